//! An output at a bucket URL is made locally, then uploaded: the upload is
//! a further stage of the operation's progress (what the command's bar
//! shows), against the GCS stand-in in this process.

use std::sync::Mutex;

use tensorfile::Progress;
use tensorfile_ops::rewrite::{rewrite, RewriteRequest};
use tensorfile_ops::transform::InOut;
use tensorfile_testkit::fixtures;
use tensorfile_testkit::gcs::GcsServer;

/// What an operation told its progress, in order.
#[derive(Default)]
struct Recorded(Mutex<Vec<String>>);

impl Progress for Recorded {
    fn total(&self, units: u64) {
        self.0.lock().unwrap().push(format!("total {units}"));
    }
    fn advance(&self, units: u64) {
        self.0.lock().unwrap().push(format!("advance {units}"));
    }
    fn stage(&self, what: &str, total: u64) {
        self.0.lock().unwrap().push(format!("stage {what} {total}"));
    }
}

#[test]
fn an_upload_is_a_stage_of_the_progress() {
    let _env = tensorfile_testkit::env_lock();
    let gcs = GcsServer::start();
    gcs.create_bucket("tf-ops-progress", false);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, gcs.service_account_key()).unwrap();
    std::env::set_var("GOOGLE_BASE_URL", gcs.url());
    std::env::set_var("GOOGLE_APPLICATION_CREDENTIALS", &key);
    std::env::set_var("GCE_METADATA_HOST", "127.0.0.1:9");
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let url = "gs://tf-ops-progress/m.safetensors";
    let recorded = Recorded::default();
    let request = RewriteRequest {
        files: InOut::new(&input, url),
        ..RewriteRequest::default()
    };
    let done = rewrite(&request, &recorded);
    for var in [
        "GOOGLE_BASE_URL",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GCE_METADATA_HOST",
    ] {
        std::env::remove_var(var);
    }
    done.unwrap();
    let object = gcs.get("tf-ops-progress", "m.safetensors").unwrap();
    let seen = recorded.0.into_inner().unwrap();
    // The local work first, then the stage, then the upload's bytes: all
    // of the object, no more.
    let stage = format!("stage uploading to {url} {}", object.len());
    let at = seen
        .iter()
        .position(|s| *s == stage)
        .unwrap_or_else(|| panic!("{seen:?}"));
    assert!(
        seen[..at].iter().any(|s| s.starts_with("advance")),
        "{seen:?}"
    );
    let uploaded: u64 = seen[at + 1..]
        .iter()
        .map(|s| {
            s.strip_prefix("advance ")
                .expect("only advances")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(uploaded, object.len() as u64);
}
