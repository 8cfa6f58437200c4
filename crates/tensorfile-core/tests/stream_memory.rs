//! A streamed read plan holds its budget, not the set: while a 64 MiB set
//! streams through an 8 MiB budget, each tensor taken and dropped, the
//! process's anonymous memory (`RssAnon`) grows by less than twice the
//! budget. A test binary of its own, with one test: resident memory is the
//! process's, and another test running beside it would move it. Growth is
//! sampled where the most is held (the consumer holding a tensor), not as
//! a peak, which a process inherits from whatever ran before in it.

#![cfg(target_os = "linux")]

use std::collections::BTreeMap;
use std::sync::Arc;

use tensorfile_core::read::ReadPlan;
use tensorfile_core::set::{ShardIndex, ShardedTensors};
use tensorfile_core::{save, Dtype, ReadOptions, TensorRef, WriteOptions};
use tensorfile_testkit::rss_anon;

const MIB: u64 = 1 << 20;

/// Writes 4 shards of 16 MiB (2 tensors of 4 MiB, 6 of 1 MiB, 8 of
/// 256 KiB each) and their index into `dir`.
fn write_set(dir: &std::path::Path) {
    let sizes: Vec<u64> = [4 * MIB; 2]
        .into_iter()
        .chain([MIB; 6])
        .chain([MIB / 4; 8])
        .collect();
    let data: Vec<u8> = (0..4 * MIB).map(|i| i as u8).collect();
    let mut weight_map = BTreeMap::new();
    for shard in 1..=4 {
        let file = format!("model-0000{shard}-of-00004.safetensors");
        let names: Vec<String> = (0..sizes.len())
            .map(|i| format!("layers.{shard}.w{i:02}"))
            .collect();
        let shapes: Vec<[u64; 1]> = sizes.iter().map(|&n| [n]).collect();
        let tensors = names.iter().zip(&shapes).map(|(name, shape)| TensorRef {
            name,
            dtype: Dtype::U8,
            shape,
            data: &data[..shape[0] as usize],
        });
        save(dir.join(&file), tensors, None, &WriteOptions::default()).unwrap();
        for name in names {
            weight_map.insert(name, file.clone());
        }
    }
    let index = ShardIndex::new(64 * MIB, weight_map).to_json();
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
}

/// Streams the whole set through `budget`, each tensor checked and
/// dropped; the most `RssAnon` grew over `base` while a tensor was held.
fn stream(set: &Arc<ShardedTensors>, budget: u64, base: u64) -> u64 {
    let plan = ReadPlan::all().with_budget(budget);
    let mut grown = 0u64;
    let mut bytes = 0u64;
    for t in Arc::clone(set).read_plan_iter(&plan).unwrap() {
        let t = t.unwrap();
        assert_eq!(
            t.data.last(),
            Some(&((t.data.len() - 1) as u8)),
            "{}",
            t.name
        );
        bytes += t.data.len() as u64;
        let now = rss_anon().unwrap();
        grown = grown.max(now.saturating_sub(base));
    }
    assert_eq!(bytes, 64 * MIB);
    grown
}

#[test]
fn a_streamed_plan_holds_its_budget_not_the_set() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path());
    let set = Arc::new(ShardedTensors::open_pread(dir.path(), &ReadOptions::default()).unwrap());
    let budget = 8 * MIB;
    // Once untimed and unmeasured: the pool's threads, the allocator's
    // arenas and the page cache settle.
    stream(&set, budget, 0);
    let base = rss_anon().unwrap();
    let grown = stream(&set, budget, base);
    // Twice the budget, and slack for the kernel's counters (kept per
    // thread and CPU) and the allocator: far below the set's 64 MiB.
    let allowed = 2 * budget + 8 * MIB;
    assert!(
        grown < allowed,
        "anonymous memory grew by {grown} bytes (allowed {allowed})"
    );
}
