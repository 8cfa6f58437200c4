//! The AWS credential chain, source by source and in its order, against
//! the stand-ins of tensorfile-testkit (the metadata service, the container
//! endpoint, STS) on 127.0.0.1: which source the chain picked is pinned by
//! the access key id each source hands out, never by the secret. The chain
//! reads a map of variables here, not the process's environment, so the
//! cases run side by side; the instance metadata service is always pointed
//! at a stand-in or turned off (a real one is never asked).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use tensorfile_remote::creds::{Chain, Provider, Source, REFRESH_BEFORE};
use tensorfile_remote::Problem;
use tensorfile_testkit::aws::{CredentialServer, IMDS_TOKEN, SECRET};

/// A chain reading `vars` only (no HOME: no file of the machine's).
fn chain(vars: &[(&str, String)]) -> Chain {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    Chain::with_vars(move |n| map.get(n).cloned())
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// What the chain picked: (source, access key id).
fn picked(c: &Chain) -> Option<(Source, String)> {
    c.resolve()
        .unwrap()
        .map(|k| (k.source().clone(), k.access_key_id().to_string()))
}

/// Every source configured at once; each case drops the sources before
/// the one it expects.
struct Setup {
    server: CredentialServer,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            server: CredentialServer::start(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "ENVKEY".into()),
            ("AWS_SECRET_ACCESS_KEY", "env-secret".into()),
        ]
    }

    fn web_identity(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                write(self.dir.path(), "token", "eyJ.web.identity\n"),
            ),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/irsa".into()),
            ("AWS_ENDPOINT_URL_STS", self.server.url()),
        ]
    }

    fn profile(&self, credentials: &str, config: &str) -> Vec<(&'static str, String)> {
        vec![
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                write(self.dir.path(), "credentials", credentials),
            ),
            ("AWS_CONFIG_FILE", write(self.dir.path(), "config", config)),
            ("AWS_ENDPOINT_URL_STS", self.server.url()),
        ]
    }

    fn container(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                format!("{}/container/creds", self.server.url()),
            ),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-auth".into()),
        ]
    }

    fn imds(&self) -> Vec<(&'static str, String)> {
        vec![("AWS_EC2_METADATA_SERVICE_ENDPOINT", self.server.url())]
    }
}

const KEYS: &str = "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = file-secret\n";

#[test]
fn each_source_in_the_documented_order() {
    let s = Setup::new();
    let all = [
        s.env(),
        s.web_identity(),
        s.profile(KEYS, ""),
        s.container(),
        s.imds(),
    ];
    let expected = [
        (Source::Environment, "ENVKEY"),
        (Source::WebIdentity, "WEBID"),
        (Source::Profile("default".into()), "FILEKEY"),
        (Source::Container, "CONTAINER"),
        (Source::InstanceMetadata, "IMDS"),
    ];
    for (first, (source, key)) in expected.iter().enumerate() {
        let vars: Vec<_> = all[first..].iter().flatten().cloned().collect();
        let (got, id) = picked(&chain(&vars)).unwrap_or_else(|| panic!("nothing for {source:?}"));
        assert_eq!(&got, source);
        assert!(id.starts_with(key), "{source:?}: {id}");
    }
    // Nothing configured and the metadata service off: anonymous.
    let none = chain(&[("AWS_EC2_METADATA_DISABLED", "true".into())]);
    assert!(picked(&none).is_none());
    // The web identity was exchanged unsigned, with the token file's token.
    let seen = s.server.seen();
    let web = seen
        .iter()
        .find(|r| r.body.contains("AssumeRoleWithWebIdentity"))
        .unwrap();
    assert!(
        web.body.ends_with("&WebIdentityToken=eyJ.web.identity"),
        "{}",
        web.body
    );
    assert!(web
        .body
        .contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Firsa"));
    assert!(!web.headers.contains_key("authorization"));
    // IMDSv2: a token first, then the role with it.
    let imds: Vec<_> = seen
        .iter()
        .filter(|r| r.target.starts_with("/latest/"))
        .collect();
    assert_eq!(imds[0].method, "PUT");
    assert!(imds[1..].iter().all(|r| r
        .headers
        .get("x-aws-ec2-metadata-token")
        .map(String::as_str)
        == Some(IMDS_TOKEN)));
}

#[test]
fn profiles_from_either_file_and_roles_assumed() {
    let s = Setup::new();
    // Keys in the config file, a region, a named profile.
    let config = "\
[default]
region = eu-north-1
[profile dev]
aws_access_key_id = CONFIGDEV
aws_secret_access_key = dev-secret
[profile both]
aws_access_key_id = CONFIGBOTH
aws_secret_access_key = config-secret
[profile role]
role_arn = arn:aws:iam::123456789012:role/reader
source_profile = base
region = ap-south-1
[profile loop-a]
role_arn = arn:aws:iam::123456789012:role/a
source_profile = loop-b
[profile loop-b]
role_arn = arn:aws:iam::123456789012:role/b
source_profile = loop-a
[profile self]
role_arn = arn:aws:iam::123456789012:role/self
source_profile = self
aws_access_key_id = SELFKEY
aws_secret_access_key = self-secret
[profile webid]
role_arn = arn:aws:iam::123456789012:role/web
web_identity_token_file = TOKEN
";
    let token = write(s.dir.path(), "tok", "profile-web-token");
    let config = config.replace("TOKEN", &token);
    let creds = "\
[both]
aws_access_key_id = CREDSBOTH
aws_secret_access_key = creds-secret
[base]
aws_access_key_id = BASEKEY
aws_secret_access_key = base-secret
";
    let files = s.profile(creds, &config);
    let with = |profile: &str| {
        let mut v = files.clone();
        v.push(("AWS_PROFILE", profile.to_string()));
        v.push(("AWS_EC2_METADATA_DISABLED", "true".to_string()));
        chain(&v)
    };
    assert_eq!(
        picked(&with("dev")),
        Some((Source::Profile("dev".into()), "CONFIGDEV".into()))
    );
    // The credentials file wins over the config file.
    assert_eq!(
        picked(&with("both")),
        Some((Source::Profile("both".into()), "CREDSBOTH".into()))
    );
    // The default profile has a region and no keys: anonymous, in that region.
    let default = chain(
        &[
            files.clone(),
            vec![("AWS_EC2_METADATA_DISABLED", "true".into())],
        ]
        .concat(),
    );
    assert!(picked(&default).is_none());
    assert_eq!(default.region().as_deref(), Some("eu-north-1"));
    assert_eq!(with("role").region().as_deref(), Some("ap-south-1"));

    // role_arn + source_profile: AssumeRole signed with the source's key.
    let (source, id) = picked(&with("role")).unwrap();
    assert_eq!(source, Source::AssumeRole("role".into()));
    assert!(id.starts_with("ROLE"), "{id}");
    let seen = s.server.seen();
    let assume = seen
        .iter()
        .rev()
        .find(|r| r.body.contains("Action=AssumeRole&"))
        .unwrap();
    let auth = &assume.headers["authorization"];
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=BASEKEY/"),
        "{auth}"
    );
    assert!(auth.contains("/ap-south-1/sts/aws4_request"), "{auth}");
    assert!(!auth.contains("base-secret"));

    // A profile that is its own source uses its own keys.
    let (source, id) = picked(&with("self")).unwrap();
    assert_eq!(source, Source::AssumeRole("self".into()));
    assert!(id.starts_with("ROLE"));
    let auth = s.server.seen().last().unwrap().headers["authorization"].clone();
    assert!(auth.contains("Credential=SELFKEY/"), "{auth}");

    // web_identity_token_file in a profile.
    let (source, id) = picked(&with("webid")).unwrap();
    assert_eq!(
        (source, &id[..5]),
        (Source::AssumeRole("webid".into()), "WEBID")
    );

    // A circle, and a profile that is not there, are errors naming them.
    let e = with("loop-a").resolve().unwrap_err();
    assert!(e.to_string().contains("circle"), "{e}");
    let e = with("nosuch").resolve().unwrap_err();
    assert!(matches!(e.problem, Problem::Credentials(_)));
    assert!(e.to_string().contains("\"nosuch\""), "{e}");
}

#[test]
fn container_credentials_want_their_token() {
    let s = Setup::new();
    let file = write(s.dir.path(), "auth", "container-auth\n");
    let by_file = chain(&[
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/container/pod", s.server.url()),
        ),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", file),
    ]);
    assert_eq!(picked(&by_file).map(|p| p.0), Some(Source::Container));
    let wrong = chain(&[
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/container/pod", s.server.url()),
        ),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "not-it".into()),
    ]);
    let e = wrong.resolve().unwrap_err();
    assert!(e.to_string().contains("HTTP 401"), "{e}");
    assert!(!e.to_string().contains("not-it"), "{e}");
    // A plain http endpoint elsewhere than this host or the agent's address.
    let far = chain(&[(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "http://192.0.2.9/creds".into(),
    )]);
    assert!(far.resolve().is_err());
}

#[test]
fn the_metadata_probe_is_one_attempt_and_remembered() {
    let s = Setup::new();
    // A service without a role: asked once, then never again.
    s.server.set_imds_role(false);
    let c = chain(&s.imds());
    assert!(picked(&c).is_none());
    let asked = s.server.seen().len();
    assert!(asked >= 1);
    assert!(picked(&c).is_none());
    assert_eq!(s.server.seen().len(), asked, "asked again");
    // Nothing listening: one connection attempt, within the 1 s limit.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let c = chain(&[(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        format!("http://127.0.0.1:{port}"),
    )]);
    let t = Instant::now();
    assert!(picked(&c).is_none());
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    // Turned off: not asked at all.
    let other = Setup::new();
    let off = chain(
        &[
            other.imds(),
            vec![("AWS_EC2_METADATA_DISABLED", "TRUE".into())],
        ]
        .concat(),
    );
    assert!(picked(&off).is_none());
    assert!(other.server.seen().is_empty());
}

#[test]
fn credentials_are_fetched_again_before_they_expire() {
    let s = Setup::new();
    // Valid for REFRESH_BEFORE and 2 s more: kept, then fetched again.
    s.server
        .set_lifetime(Some(REFRESH_BEFORE + Duration::from_secs(2)));
    let provider = Provider::new(chain(&s.container())).unwrap();
    let first = provider.current().unwrap();
    assert_eq!(first.access_key_id(), "CONTAINER1");
    assert!(first.expires().is_some());
    assert_eq!(provider.current().unwrap().access_key_id(), "CONTAINER1");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(provider.current().unwrap().access_key_id(), "CONTAINER2");
    // The same for STS's credentials and the metadata service's.
    let web = Provider::new(chain(&s.web_identity())).unwrap();
    let a = web.current().unwrap().access_key_id().to_string();
    std::thread::sleep(Duration::from_millis(2500));
    let b = web.current().unwrap().access_key_id().to_string();
    assert!(
        a.starts_with("WEBID") && b.starts_with("WEBID") && a != b,
        "{a} {b}"
    );
    let imds = Provider::new(chain(&s.imds())).unwrap();
    let a = imds.current().unwrap().access_key_id().to_string();
    std::thread::sleep(Duration::from_millis(2500));
    let b = imds.current().unwrap().access_key_id().to_string();
    assert!(
        a.starts_with("IMDS") && b.starts_with("IMDS") && a != b,
        "{a} {b}"
    );
}

#[test]
fn secrets_are_never_shown() {
    let s = Setup::new();
    let provider = Provider::new(chain(&s.container())).unwrap();
    let creds = provider.current().unwrap();
    let shown = format!("{creds:?} {provider:?} {:?}", provider.source());
    assert!(shown.contains("CONTAINER1"), "{shown}");
    assert!(
        !shown.contains(SECRET) && !shown.contains("token-of-"),
        "{shown}"
    );
    let files = s.profile(KEYS, "");
    let store = tensorfile_remote::s3::S3Store::with_chain("bucket", chain(&files)).unwrap();
    let shown = format!("{store:?}");
    assert!(!shown.contains("file-secret"), "{shown}");
    // STS's refusal names the source, not the token.
    let mut vars = s.web_identity();
    vars[0].1 = write(s.dir.path(), "empty-token", "");
    let e = chain(&vars).resolve().unwrap_err();
    assert!(
        e.to_string().contains("web identity") && e.to_string().contains("InvalidIdentityToken"),
        "{e}"
    );
}
