//! Interleaved measurement: every case runs once per round, A, B, A, B, ...,
//! so drift in the machine's load hits all cases alike; medians per case.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::alloc::peak_extra;

/// One contender: a closure that performs the measured work `iters` times
/// per sample (freeing what it made, so freeing is measured too) and
/// returns a check value that must agree between cases that claim to
/// compute the same thing.
pub struct Case<'a> {
    /// Row label.
    pub name: String,
    /// Calls per timed sample, so short operations rise above timer noise.
    pub iters: u32,
    /// The work.
    pub run: Box<dyn FnMut() -> u64 + 'a>,
    /// Untimed preparation before each sample (e.g. removing last round's
    /// output file).
    pub setup: Option<Box<dyn FnMut() + 'a>>,
}

impl<'a> Case<'a> {
    /// A case that runs `run` `iters` times per sample.
    pub fn new(name: impl Into<String>, iters: u32, run: impl FnMut() -> u64 + 'a) -> Self {
        Case {
            name: name.into(),
            iters: iters.max(1),
            run: Box::new(run),
            setup: None,
        }
    }

    /// Runs `setup`, untimed, before every sample.
    pub fn with_setup(mut self, setup: impl FnMut() + 'a) -> Self {
        self.setup = Some(Box::new(setup));
        self
    }
}

/// What was measured for one case.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Row label.
    pub name: String,
    /// Median time of one call.
    pub median: Duration,
    /// Fastest and slowest sample, per call.
    pub min: Duration,
    /// Slowest sample, per call.
    pub max: Duration,
    /// Peak extra heap bytes of one call (its result included).
    pub peak: usize,
    /// The check value of the last call.
    pub check: u64,
}

/// Runs every case once untimed (warming caches and measuring its peak
/// heap), then `rounds` interleaved timed rounds.
pub fn interleave(rounds: usize, cases: &mut [Case<'_>]) -> Vec<Measured> {
    let mut peaks = Vec::with_capacity(cases.len());
    let mut checks = Vec::with_capacity(cases.len());
    for case in cases.iter_mut() {
        if let Some(setup) = case.setup.as_mut() {
            setup();
        }
        let mut check = 0;
        peaks.push(peak_extra(|| check = (case.run)()));
        checks.push(check);
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); cases.len()];
    for _ in 0..rounds.max(1) {
        for (case, times) in cases.iter_mut().zip(samples.iter_mut()) {
            if let Some(setup) = case.setup.as_mut() {
                setup();
            }
            let start = Instant::now();
            for _ in 0..case.iters {
                black_box((case.run)());
            }
            times.push(start.elapsed() / case.iters);
        }
    }
    cases
        .iter()
        .zip(samples)
        .zip(peaks.into_iter().zip(checks))
        .map(|((case, mut times), (peak, check))| {
            times.sort_unstable();
            Measured {
                name: case.name.clone(),
                median: median(&times),
                min: times.first().copied().unwrap_or_default(),
                max: times.last().copied().unwrap_or_default(),
                peak,
                check,
            }
        })
        .collect()
}

/// Median of sorted samples (mean of the middle two for an even count).
fn median(sorted: &[Duration]) -> Duration {
    match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

/// A duration in the unit that reads best.
pub fn fmt_time(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// A byte count in binary units.
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// How many times faster `ours` is than `other` (other / ours).
pub fn speedup(other: Duration, ours: Duration) -> f64 {
    other.as_secs_f64() / ours.as_secs_f64().max(1e-12)
}
