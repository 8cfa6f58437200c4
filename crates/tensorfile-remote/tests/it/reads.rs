//! How many requests reads cost: a header longer than the first read
//! costs a second request, never more; partial loads stay within their
//! memory budget (refused before any request when they cannot) and go
//! through a set in batches; a server slower than the read timeout is a
//! timeout, retried, then an error naming the URL.

use crate::common;

use std::time::Duration;

use tensorfile_core::set::Want;
use tensorfile_core::{ErrorKind, ReadOptions};
use tensorfile_remote::Client;
use tensorfile_testkit::serve::Server;

/// A file of `n` one-byte tensors (its header about 60 bytes each).
fn many_tensors(n: usize) -> Vec<u8> {
    let names: Vec<String> = (0..n).map(|i| format!("tensor.{i:06}")).collect();
    let data = vec![7u8; n];
    let tensors: Vec<tensorfile_core::TensorRef<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, name)| tensorfile_core::TensorRef {
            name,
            dtype: tensorfile_core::Dtype::U8,
            shape: &[1],
            data: &data[i..i + 1],
        })
        .collect();
    tensorfile_core::serialize(tensors, None).unwrap()
}

#[test]
fn headers_cost_one_request_or_two_when_longer_than_the_first_read() {
    let server = Server::start().unwrap();
    let small = many_tensors(10);
    let big = many_tensors(5000);
    assert!(u64::from_le_bytes(big[..8].try_into().unwrap()) > 64 << 10);
    server.put("/small.safetensors", small);
    server.put("/big.safetensors", big);
    for (name, requests) in [("small", 1), ("big", 2)] {
        let client = common::client();
        let url = format!("{}/{name}.safetensors", server.url());
        let file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
        assert_eq!(client.stats().requests, requests, "{name}");
        // The first bytes are kept: reading a tensor within them is free.
        let first = file.header().tensors().next().unwrap();
        if name == "small" {
            file.read_tensor(&first).unwrap();
            assert_eq!(client.stats().requests, 1);
        }
    }
}

#[test]
fn loads_stay_within_their_budget() {
    let server = Server::start().unwrap();
    let dir = common::fixtures().join("real/sharded/unet_sharded_safetensors");
    for rel in common::files_under(&dir) {
        let bytes = std::fs::read(dir.join(&rel)).unwrap();
        server.put(&format!("/u/{}", rel.display()), bytes);
    }
    let client = common::client();
    let set = tensorfile_remote::open_set(
        &format!("{}/u/", server.url()),
        &client,
        &ReadOptions::default(),
    )
    .unwrap();
    let wants: Vec<Want> = set.infos().map(|(_, t)| Want::tensor(t.name)).collect();
    let total: u64 = set.infos().map(|(_, t)| t.nbytes()).sum();
    let largest = set.infos().map(|(_, t)| t.nbytes()).max().unwrap();
    // Over the budget: refused before any request.
    let before = client.stats().requests;
    let e = set.load(&wants, total - 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}");
    assert_eq!(client.stats().requests, before);
    // In batches: every result once, in order, each batch within budget.
    let budget = (largest * 4).max(total / 10);
    let mut seen = Vec::new();
    set.load_each(&wants, budget, |loaded| {
        assert!(loaded.bytes.len() as u64 <= budget);
        seen.push(loaded.name);
        Ok(())
    })
    .unwrap();
    let names: Vec<String> = wants.iter().map(|w| w.name.clone()).collect();
    assert_eq!(seen, names);
    // A single tensor over the budget is named.
    let e = set.load_each(&wants, largest - 1, |_| Ok(())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}");
    let big = set.infos().find(|(_, t)| t.nbytes() == largest).unwrap().1;
    assert!(e.to_string().contains(&format!("{:?}", big.name)), "{e}");
}

#[test]
fn a_server_slower_than_the_timeout_is_retried_then_named() {
    let server = Server::start().unwrap();
    server.put("/slow.safetensors", many_tensors(3));
    server.set_latency(Duration::from_millis(500));
    let client = Client::new(
        common::fast()
            .with_read_timeout(Duration::from_millis(100))
            .with_retries(1),
    );
    let url = format!("{}/slow.safetensors", server.url());
    let e = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with(&url), "{text}");
    assert!(
        text.contains("timed out") && text.contains("after 2 attempts"),
        "{text}"
    );
}
