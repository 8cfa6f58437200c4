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

#[test]
fn a_read_plan_of_half_the_rows_costs_half_the_bytes_served() {
    use tensorfile_core::read::ReadPlan;
    use tensorfile_core::SliceArg;
    let server = Server::start().unwrap();
    // Two shards of two 256 KiB tensors each: most bytes lie past the
    // first 64 KiB of a shard, which the client keeps from its header read.
    let dir = tempfile::tempdir().unwrap();
    let mut weight_map = std::collections::BTreeMap::new();
    for (shard, names) in [(1, ["a", "b"]), (2, ["c", "d"])] {
        let file = format!("model-0000{shard}-of-00002.safetensors");
        let data: Vec<Vec<u8>> = (0..2u8)
            .map(|i| {
                (0..256 * 1024)
                    .map(|j| (j as u8) ^ (shard * 2 + i))
                    .collect()
            })
            .collect();
        let tensors = names
            .iter()
            .zip(&data)
            .map(|(n, d)| tensorfile_core::TensorRef {
                name: n,
                dtype: tensorfile_core::Dtype::U8,
                shape: &[256, 1024],
                data: d,
            });
        let bytes = tensorfile_core::serialize(tensors, None).unwrap();
        std::fs::write(dir.path().join(&file), &bytes).unwrap();
        server.put(&format!("/u/{file}"), bytes);
        for n in names {
            weight_map.insert(n.to_string(), file.clone());
        }
    }
    let index = tensorfile_core::set::ShardIndex::new(1 << 20, weight_map).to_json();
    std::fs::write(dir.path().join("model.safetensors.index.json"), &index).unwrap();
    server.put("/u/model.safetensors.index.json", index.into_bytes());
    let dir = dir.path();
    let client = common::client();
    let url = format!("{}/u/", server.url());
    let set = tensorfile_remote::open_set(&url, &client, &ReadOptions::default()).unwrap();
    let local = tensorfile_core::ShardedTensors::open(dir).unwrap();
    let wants: Vec<Want> = set
        .infos()
        .map(|(_, t)| {
            let rows = t.shape.first().copied().unwrap_or(0) as i64;
            Want::slice(t.name, vec![SliceArg::range(0, rows / 2)])
        })
        .collect();
    server.reset();
    let mut handed = 0;
    let plan = ReadPlan::of(wants.clone()).with_budget(1 << 20);
    let stats = set
        .read_plan(&plan, |t| {
            let want = wants.iter().find(|w| w.name == t.name).unwrap();
            let expected = local
                .read_slice(&t.name, want.slice.as_deref().unwrap())
                .unwrap();
            assert_eq!(&t.data[..], &expected[..], "{}", t.name);
            handed += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(handed, wants.len());
    let (requests, served) = server.counts();
    let data = set.data_len();
    // Only the header's first read is kept by the client: every data byte
    // asked for is served, and no more than the plan read.
    assert!(
        served <= stats.bytes_read,
        "{served} > {}",
        stats.bytes_read
    );
    assert!(served * 100 <= data * 52, "{served} of {data} bytes served");
    assert!(served * 100 >= data * 30, "{served} of {data} bytes served");
    assert!(requests >= 1);
}
