//! Group 8 (issue 30): read plans. Every tensor of the large file against
//! the first half of every tensor's rows, on 1 and 2 threads, into memory
//! the library allocates (fresh) or memory the caller already touched.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use tensorfile::{FileSource, ReadOptions, SafeTensors, SliceArg};
use tensorfile_core::read::{ReadPlan, ReadStats};
use tensorfile_core::set::Want;

use crate::fixture::sum_words;
use crate::measure::{fmt_bytes, interleave, speedup, Case};
use crate::reader::{agree, row, COLUMNS};
use crate::report::{ratio, verdicts, Table, Verdict};
use crate::{BenchError, Config};

/// First and last words of a tensor: a check that two cases read the same.
fn digest(acc: u64, data: &[u8]) -> u64 {
    let first = sum_words(data.get(..8).unwrap_or(&[]));
    let last = sum_words(data.get(data.len().saturating_sub(8)..).unwrap_or(&[]));
    acc.wrapping_mul(31)
        .wrapping_add(first ^ last.rotate_left(1))
}

/// Reads `plan` from a freshly opened file; the digest of what was handed
/// over (each buffer dropped once handed, as a loader that moves it on).
fn read(big: &Path, plan: &ReadPlan, bytes: &AtomicU64) -> u64 {
    let Ok(source) = FileSource::open(big) else {
        return u64::MAX;
    };
    let Ok(file) = SafeTensors::from_source(source, &ReadOptions::default()) else {
        return u64::MAX;
    };
    let mut acc = 0u64;
    let stats: Result<ReadStats, _> = file.read_plan(plan, |t| {
        acc = digest(acc, &t.data);
        Ok(())
    });
    match stats {
        Ok(s) => {
            bytes.store(s.bytes_read, Ordering::Relaxed);
            acc
        }
        Err(_) => u64::MAX,
    }
}

/// Group 8: read plans.
pub fn plans(cfg: &Config, big: &Path) -> Result<String, BenchError> {
    let opened = SafeTensors::from_source(FileSource::open(big)?, &ReadOptions::default())
        .map_err(|e| BenchError(e.to_string()))?;
    let data_len = opened.header().data_len();
    let half: Vec<Want> = opened
        .header()
        .tensors()
        .map(|t| {
            let rows = t.shape.first().copied().unwrap_or(0) as i64;
            Want::slice(t.name, vec![SliceArg::range(0, rows / 2)])
        })
        .collect();
    let names: Vec<String> = opened.names().map(str::to_string).collect();
    // The caller's buffers, touched once before the timed rounds.
    let mut touched: Vec<Vec<u8>> = opened
        .header()
        .tensors()
        .map(|t| vec![1u8; t.nbytes() as usize])
        .collect();
    let counts: [AtomicU64; 4] = Default::default();
    let mut cases = [
        Case::new("plan, every tensor, 2 threads, fresh memory", 1, || {
            read(big, &ReadPlan::all().with_threads(2), &counts[0])
        }),
        Case::new("plan, every tensor, 1 thread, fresh memory", 1, || {
            read(big, &ReadPlan::all().with_threads(1), &counts[1])
        }),
        Case::new("plan, half of every tensor's rows, 2 threads", 1, || {
            read(big, &ReadPlan::of(half.clone()).with_threads(2), &counts[2])
        }),
        Case::new("plan, half of every tensor's rows, 1 thread", 1, || {
            read(big, &ReadPlan::of(half.clone()).with_threads(1), &counts[3])
        }),
        Case::new(
            "`read_into` every tensor, touched memory, pool threads",
            1,
            || {
                let mut acc = 0u64;
                for (name, out) in names.iter().zip(touched.iter_mut()) {
                    if opened.read_into(name, None, out).is_err() {
                        return u64::MAX;
                    }
                    acc = digest(acc, out);
                }
                acc
            },
        ),
        Case::new(
            "baseline: `std::fs::read`, fresh memory",
            1,
            || match std::fs::read(big) {
                Ok(v) => v.len() as u64,
                Err(_) => u64::MAX - 2,
            },
        ),
    ];
    let m = interleave(cfg.rounds, &mut cases);
    agree(&m[0], &m[1])?;
    agree(&m[0], &m[4])?;
    agree(&m[2], &m[3])?;
    let label = format!(
        "{} file, {} tensors",
        fmt_bytes(std::fs::metadata(big)?.len()),
        names.len()
    );
    let mut table = Table::new(&COLUMNS);
    for (i, measured) in m.iter().enumerate() {
        // The ratio column: against the full plan on the same threads.
        let vs = match i {
            2 => Some(&m[0]),
            3 => Some(&m[1]),
            4 | 5 => Some(&m[0]),
            _ => None,
        };
        table.row(row(measured, &label, vs, None));
    }
    let half_read = counts[2].load(Ordering::Relaxed);
    let share = half_read as f64 / data_len as f64;
    let faster = speedup(m[0].median, m[2].median);
    let threads = speedup(m[1].median, m[0].median);
    let touched_gain = speedup(m[0].median, m[4].median);
    let gbs = |d: std::time::Duration| data_len as f64 / d.as_secs_f64() / 1e9;
    let list = [
        Verdict {
            target: "half the rows reads at most 52% of the data bytes (counted by the plan)"
                .into(),
            measured: format!(
                "{} of {} ({:.1}%)",
                fmt_bytes(half_read),
                fmt_bytes(data_len),
                share * 100.0
            ),
            met: share <= 0.52,
        },
        Verdict {
            target: "half the rows at least 1.7x faster than every tensor (2 threads)".into(),
            measured: ratio(faster),
            met: faster >= 1.7,
        },
    ];
    Ok(format!(
        "### 8. Read plans (issue 30)\n\n{}\n\
         (The ratio column here is the full plan's time over this case's: rows 3-4 against\n\
         the full plan on the same threads, rows 5-6 against the full plan on 2 threads.)\n\
         Every tensor: {:.2} GB/s on 2 threads, {:.2} GB/s on 1 (2 threads / 1 = {}); into\n\
         touched memory {:.2} GB/s ({} the fresh-memory plan).\n\n{}",
        table.render(),
        gbs(m[0].median),
        gbs(m[1].median),
        ratio(threads),
        gbs(m[4].median),
        ratio(touched_gain),
        verdicts(&list)
    ))
}
