//! `hf://` against a Hub-shaped server (`HF_ENDPOINT` pointing at the test
//! server): the tree listing (paginated), `resolve/REVISION/PATH`, the
//! redirect of weights to a CDN on another origin without the token, the
//! token from `HF_TOKEN` or from the token file, and 401/403 saying what to
//! do. One test: the environment is the process's.

use crate::common;

use tensorfile_core::set::Want;
use tensorfile_core::{ReadOptions, ShardedTensors};
use tensorfile_testkit::serve::Server;

const TOKEN: &str = "hf_TestSecretValue123";

#[test]
fn hub_repositories() {
    let _env = tensorfile_testkit::env_lock();
    let server = Server::start().unwrap();
    let dir = common::fixtures().join("real/sharded/unet_sharded_safetensors");
    let files: Vec<(String, Vec<u8>)> = common::files_under(&dir)
        .into_iter()
        .map(|rel| {
            let bytes = std::fs::read(dir.join(&rel)).unwrap();
            (rel.display().to_string(), bytes)
        })
        .collect();
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    server.hub_repo("org/unet", "main", &files, Some(TOKEN));
    server.hub_repo("org/unet-v", "v1.0", &files, None);
    server.set_page_size(2);
    std::env::set_var("HF_ENDPOINT", server.url());
    std::env::set_var("HF_TOKEN", TOKEN);
    std::env::remove_var("HF_TOKEN_PATH");
    // An empty Hugging Face cache of its own, online: every byte is asked
    // of the server.
    let no_cache = tempfile::tempdir().unwrap();
    std::env::set_var("HF_HUB_CACHE", no_cache.path().join("hub"));
    std::env::remove_var("HF_HUB_OFFLINE");
    std::env::remove_var("TRANSFORMERS_OFFLINE");
    let options = ReadOptions::default();
    let local = ShardedTensors::open_pread(&dir, &options).unwrap();

    // The whole repository: listed (3 pages of 2), then the index and the
    // four shards' headers.
    let client = common::client();
    let set = tensorfile_remote::open_set("hf://org/unet", &client, &options).unwrap();
    assert_eq!(set.shards().len(), 4);
    assert_eq!(set.len(), local.len());
    let wants: Vec<Want> = local.infos().map(|(_, t)| Want::tensor(t.name)).collect();
    let loaded = set.load(&wants, u64::MAX).unwrap();
    for ((_, info), got) in local.infos().zip(loaded) {
        assert!(
            *local.read_tensor(info.name).unwrap() == got.bytes[..],
            "{}",
            info.name
        );
    }
    let log = server.log();
    let pages = log
        .iter()
        .filter(|s| s.target.starts_with("/api/models/"))
        .count();
    assert_eq!(pages, 3, "{log:#?}");
    // The token went to the Hub and never to the CDN, where weights are.
    let cdn: Vec<_> = log
        .iter()
        .filter(|s| s.target.starts_with("/cdn/"))
        .collect();
    assert!(!cdn.is_empty());
    assert!(cdn.iter().all(|s| !s.authorized), "{cdn:#?}");
    assert!(log
        .iter()
        .filter(|s| !s.target.starts_with("/cdn/"))
        .all(|s| s.authorized));

    // One file of it, at a revision.
    let url = "hf://org/unet-v@v1.0/diffusion_pytorch_model-00002-of-00004.safetensors";
    let file = tensorfile_remote::open_file(url, &client, &options).unwrap();
    assert_eq!(file.path().unwrap().to_str(), Some(url));
    assert_eq!(file.header().len(), local.shards()[1].header().len());
    // A missing file names itself.
    let url = "hf://org/unet/nothing.safetensors";
    let e = tensorfile_remote::open_file(url, &client, &options).unwrap_err();
    assert_eq!(e.to_string(), format!("{url}: not found (HTTP 404)"));

    // Without a token: 401, saying a token is needed.
    std::env::remove_var("HF_TOKEN");
    std::env::set_var("HF_HOME", dir.join("no-such-dir"));
    let e = tensorfile_remote::open_set("hf://org/unet", &client, &options).unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("hf://org/unet/"), "{text}");
    assert!(
        text.contains("HTTP 401") && text.contains("needs a token"),
        "{text}"
    );
    // A wrong one: 403, saying it lacks access; the token is not shown.
    std::env::set_var("HF_TOKEN", "hf_WrongSecret");
    let e = tensorfile_remote::open_set("hf://org/unet", &client, &options).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("HTTP 403") && text.contains("lacks access"),
        "{text}"
    );
    assert!(!text.contains("hf_WrongSecret"), "{text}");
    // From the token file huggingface_hub writes.
    std::env::remove_var("HF_TOKEN");
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("token"), format!("{TOKEN}\n")).unwrap();
    std::env::set_var("HF_HOME", home.path());
    let set = tensorfile_remote::open_set("hf://org/unet/", &client, &options).unwrap();
    assert_eq!(set.shards().len(), 4);
    // No error or debug output shows the token.
    assert!(!format!("{set:?}").contains(TOKEN));
}
