//! The streamed plan (issue 30): a set of `--size` bytes in 4 shards read
//! with `ShardedTensors::read_plan_iter` under `--budget`, each tensor
//! consumed (every word summed) and dropped, as a loader that moves
//! tensors on does. Anonymous memory (`RssAnon`: the resident set less
//! file-backed pages) is sampled by a thread every millisecond and by the
//! consumer at each tensor; the peak is what the issue bounds (under twice
//! the budget: 512 MiB for 256 MiB).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorfile::set::{ShardIndex, ShardedTensors};
use tensorfile::ReadOptions;
use tensorfile_core::read::ReadPlan;
use tensorfile_testkit::rss_anon;

use crate::fixture::{self, sum_words};
use crate::measure::{fmt_bytes, fmt_time};
use crate::report::{verdicts, Verdict};
use crate::{BenchError, Config};

/// Shards of the generated set.
const SHARDS: u64 = 4;

/// Tensors per shard: 16 MiB each in a 4 GiB set, the size of a large
/// model's layers.
const TENSORS_PER_SHARD: usize = 64;

/// Writes the set of `size` bytes of data into `dir`: 4 shards of
/// [`fixture::few_large`] tensors, named apart, and their index.
fn write_set(dir: &Path, size: u64) -> Result<(), BenchError> {
    let mut weight_map = BTreeMap::new();
    let mut total = 0;
    for shard in 0..SHARDS {
        let file = format!("model-{:05}-of-{SHARDS:05}.safetensors", shard + 1);
        let mut specs = fixture::few_large(TENSORS_PER_SHARD, size / SHARDS);
        for (i, spec) in specs.iter_mut().enumerate() {
            let layer = shard as usize * TENSORS_PER_SHARD + i;
            spec.name = format!("model.layers.{layer}.mlp.up_proj.weight");
            weight_map.insert(spec.name.clone(), file.clone());
            total += spec.nbytes;
        }
        fixture::write_file(&dir.join(&file), &specs)?;
    }
    let index = ShardIndex::new(total, weight_map).to_json();
    std::fs::write(dir.join("model.safetensors.index.json"), index)?;
    Ok(())
}

/// The streamed plan: writes the set, streams it once, reports.
pub fn stream(cfg: &Config) -> Result<String, BenchError> {
    let (size, budget) = (cfg.stream_size(), cfg.stream_budget());
    let dir = cfg.dir.join("stream-set");
    std::fs::create_dir_all(&dir)?;
    write_set(&dir, size)?;
    let set = ShardedTensors::open_pread(&dir, &ReadOptions::default())
        .map_err(|e| BenchError(e.to_string()))?;
    let set = Arc::new(set);
    let data_len = set.data_len();
    let Some(base) = rss_anon() else {
        std::fs::remove_dir_all(&dir)?;
        return Ok("### Streamed plan (issue 30)\n\nskipped: this system does not report RssAnon (/proc/self/status)\n".into());
    };

    let peak = AtomicU64::new(base);
    let done = AtomicBool::new(false);
    let sample = || {
        if let Some(now) = rss_anon() {
            peak.fetch_max(now, Ordering::Relaxed);
        }
    };
    let plan = ReadPlan::all().with_budget(budget);
    let (outcome, seconds) = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                sample();
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let start = Instant::now();
        let outcome = (|| -> Result<_, BenchError> {
            let mut iter = Arc::clone(&set)
                .read_plan_iter(&plan)
                .map_err(|e| BenchError(e.to_string()))?;
            let (mut tensors, mut bytes, mut digest) = (0u64, 0u64, 0u64);
            for t in iter.by_ref() {
                let t = t.map_err(|e| BenchError(e.to_string()))?;
                digest = digest.wrapping_add(sum_words(&t.data));
                sample();
                tensors += 1;
                bytes += t.data.len() as u64;
            }
            Ok((tensors, bytes, digest, iter.stats()))
        })();
        let seconds = start.elapsed();
        done.store(true, Ordering::Relaxed);
        (outcome, seconds)
    });
    std::fs::remove_dir_all(&dir)?;
    let (tensors, bytes, digest, stats) = outcome?;
    if bytes != data_len {
        return Err(BenchError(format!(
            "the plan handed over {bytes} of {data_len} bytes"
        )));
    }
    let peak = peak.load(Ordering::Relaxed);
    let limit = 2 * budget;
    let list = [Verdict {
        target: format!(
            "peak anonymous memory under twice the budget ({})",
            fmt_bytes(limit)
        ),
        measured: fmt_bytes(peak),
        met: peak < limit,
    }];
    Ok(format!(
        "### Streamed plan (issue 30)\n\n\
         {} in {SHARDS} shards ({tensors} tensors of about {}), warm page cache, read with\n\
         `ShardedTensors::read_plan_iter` under a budget of {}, each tensor summed and dropped:\n\
         {} ({:.2} GB/s), {} reads, at most {} held by the plan (`ReadStats::peak_held`).\n\
         Anonymous memory (`RssAnon`): {} before, peak {} during the run (growth {});\n\
         digest {digest:#x}.\n\n{}",
        fmt_bytes(data_len),
        fmt_bytes(data_len / tensors.max(1)),
        fmt_bytes(budget),
        fmt_time(seconds),
        data_len as f64 / seconds.as_secs_f64().max(1e-9) / 1e9,
        stats.reads,
        fmt_bytes(stats.peak_held),
        fmt_bytes(base),
        fmt_bytes(peak),
        fmt_bytes(peak.saturating_sub(base)),
        verdicts(&list)
    ))
}
