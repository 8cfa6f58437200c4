//! Group 8 (issue 30): read plans. Every tensor of the large file against
//! the first half of every tensor's rows, on 1 and 2 threads, into memory
//! the library allocates (fresh) or memory the caller already touched;
//! beside them, interleaved, the C baseline (`c/pread_baseline.c`, 2
//! threads of `pread` into fresh or touched memory), built with `cc` when
//! there is one.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tensorfile::{FileSource, ReadOptions, SafeTensors, SliceArg};
use tensorfile_core::read::{ReadPlan, ReadStats};
use tensorfile_core::set::Want;

use crate::fixture::sum_words;
use crate::measure::{fmt_bytes, fmt_time, interleave, speedup, Case};
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

/// The C baseline's source, beside this crate's.
const BASELINE_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/c/pread_baseline.c");

/// Builds the C baseline into `dir` with `cc` (as its comment says), or
/// says why not.
fn build_baseline(dir: &Path) -> Result<PathBuf, String> {
    let exe = dir.join("pread_baseline");
    let built = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(BASELINE_SOURCE)
        .output()
        .map_err(|e| format!("no C compiler (`cc`: {e})"))?;
    if !built.status.success() {
        let why = String::from_utf8_lossy(&built.stderr);
        return Err(format!("`cc` failed: {}", why.lines().next().unwrap_or("")));
    }
    Ok(exe)
}

/// One round of the C baseline over `big` (`memory`, `pages` as it takes
/// them): the time of its reads, as it measures them.
fn baseline_round(exe: &Path, big: &Path, memory: &str, pages: &str) -> Result<Duration, String> {
    let out = Command::new(exe)
        .arg(big)
        .args(["--threads", "2", "--memory", memory, "--pages", pages])
        .args(["--rounds", "1"])
        .output()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let seconds = serde_json::from_str::<serde_json::Value>(text.trim())
        .ok()
        .and_then(|v| v["seconds"].as_f64())
        .filter(|_| out.status.success());
    match seconds {
        Some(s) => Ok(Duration::from_secs_f64(s)),
        None => Err(format!(
            "pread_baseline: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// The median of `samples` after the first (the untimed warm-up).
fn median_after_warmup(samples: &[Duration]) -> Duration {
    let mut timed = samples.get(1..).unwrap_or(&[]).to_vec();
    timed.sort_unstable();
    match timed.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => timed[n / 2],
        n => (timed[n / 2 - 1] + timed[n / 2]) / 2,
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
    let cases = [
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
    // The C baseline's cases, interleaved with the rest: each round runs
    // it once and keeps the time it measured of its reads alone (not the
    // process's start, which the harness's clock would add).
    let baseline = build_baseline(&cfg.dir);
    const BASELINE_CASES: [(&str, &str, &str); 3] = [
        ("fresh memory, 4 KiB pages", "fresh", "4k"),
        ("fresh memory, huge pages", "fresh", "huge"),
        ("touched memory", "touched", "4k"),
    ];
    let c_times: [RefCell<Vec<Duration>>; 3] = Default::default();
    let c_error: RefCell<Option<String>> = RefCell::new(None);
    let mut cases: Vec<Case<'_>> = cases.into_iter().collect();
    if let Ok(exe) = &baseline {
        for ((name, memory, pages), times) in BASELINE_CASES.iter().zip(&c_times) {
            let c_error = &c_error;
            cases.push(Case::new(format!("C baseline, {name}"), 1, move || {
                match baseline_round(exe, big, memory, pages) {
                    Ok(t) => times.borrow_mut().push(t),
                    Err(e) => {
                        c_error.borrow_mut().get_or_insert(e);
                    }
                }
                0
            }));
        }
    }
    let m = interleave(cfg.rounds, &mut cases);
    if let Some(e) = c_error.borrow_mut().take() {
        return Err(BenchError(e));
    }
    agree(&m[0], &m[1])?;
    agree(&m[0], &m[4])?;
    agree(&m[2], &m[3])?;
    let label = format!(
        "{} file, {} tensors",
        fmt_bytes(std::fs::metadata(big)?.len()),
        names.len()
    );
    let mut table = Table::new(&COLUMNS);
    for (i, measured) in m.iter().enumerate().take(6) {
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
    let file_len = std::fs::metadata(big)?.len();
    let c_section = match &baseline {
        Err(why) => format!("C `pread` baseline: skipped, {why}.\n\n"),
        Ok(_) => {
            let c: Vec<Duration> = c_times
                .iter()
                .map(|t| median_after_warmup(&t.borrow()))
                .collect();
            let c_gbs = |d: Duration| file_len as f64 / d.as_secs_f64().max(1e-9) / 1e9;
            let lines: Vec<String> = BASELINE_CASES
                .iter()
                .zip(&c)
                .map(|((name, _, _), d)| {
                    format!("- {name}: {} ({:.2} GB/s)\n", fmt_time(*d), c_gbs(*d))
                })
                .collect();
            let fresh_best = c[0].min(c[1]);
            let fresh_ratio = speedup(fresh_best, m[0].median);
            let touched_ratio = speedup(c[2], m[4].median);
            format!(
                "C `pread` baseline (`c/pread_baseline.c`, 2 threads, the whole {} file, the time\n\
                 of its reads as it measures them; medians of {} interleaved rounds):\n\n{}\n\
                 Plan, every tensor, 2 threads, fresh memory / C fresh (the better of 4 KiB and\n\
                 huge pages): **{}** (issue 30's target for `load_file` >= 0.8x); `read_into`,\n\
                 touched memory / C touched: **{}** (target >= 0.8x).\n\n",
                fmt_bytes(file_len),
                cfg.rounds,
                lines.concat(),
                ratio(fresh_ratio),
                ratio(touched_ratio)
            )
        }
    };
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
         touched memory {:.2} GB/s ({} the fresh-memory plan).\n\n{}{}",
        table.render(),
        gbs(m[0].median),
        gbs(m[1].median),
        ratio(threads),
        gbs(m[4].median),
        ratio(touched_gain),
        c_section,
        verdicts(&list)
    ))
}
