//! The reader's groups (issue 2): header parse, open, load, touch.

use std::fs::File;
use std::hint::black_box;
use std::path::Path;

use memmap2::Mmap;
use serde::de::IgnoredAny;
use tensorfile::{Backend, Header, ReadOptions, SafeTensors};

use crate::fixture::{self, sum_words};
use crate::measure::{fmt_bytes, fmt_time, interleave, speedup, Case, Measured};
use crate::report::{ratio, verdicts, Table, Verdict};
use crate::{BenchError, Config};

pub(crate) type Reference<'a> = safetensors::SafeTensors<'a>;

/// Fails unless two cases that compute the same thing agreed.
pub(crate) fn agree(a: &Measured, b: &Measured) -> Result<(), BenchError> {
    if a.check == b.check {
        Ok(())
    } else {
        Err(BenchError(format!(
            "results differ: {} gave {}, {} gave {}",
            a.name, a.check, b.name, b.check
        )))
    }
}

pub(crate) fn row(
    m: &Measured,
    label: &str,
    vs: Option<&Measured>,
    header_len: Option<u64>,
) -> Vec<String> {
    vec![
        label.to_string(),
        m.name.clone(),
        fmt_time(m.median),
        format!("{} – {}", fmt_time(m.min), fmt_time(m.max)),
        vs.map(|r| ratio(speedup(r.median, m.median)))
            .unwrap_or_default(),
        fmt_bytes(m.peak as u64),
        header_len
            .map(|h| format!("{:.2}", m.peak as f64 / h as f64))
            .unwrap_or_default(),
    ]
}

pub(crate) const COLUMNS: [&str; 7] = [
    "input",
    "case",
    "median",
    "min – max",
    "reference time / this time",
    "peak extra heap",
    "peak / header",
];

/// Group 1: header parse + full validation over bytes in memory.
pub fn parse(cfg: &Config) -> Result<String, BenchError> {
    let mut table = Table::new(&COLUMNS);
    let mut results = Vec::new();
    for &n in &cfg.parse_sizes() {
        let path = cfg.dir.join(format!("parse-{n}.safetensors"));
        let header_len = fixture::write_file(&path, &fixture::many_small(n))?;
        let bytes = std::fs::read(&path)?;
        std::fs::remove_file(&path)?;
        let text = &bytes[8..8 + header_len as usize];
        let iters = if cfg.quick {
            1
        } else {
            (100_000 / n).clamp(1, 100) as u32
        };
        let options = ReadOptions::default();
        // Both must accept the file; say why if not (the timed closures
        // only return a sentinel).
        Header::from_file_bytes(&bytes, &options)
            .map_err(|e| BenchError(format!("tensorfile rejects the {n}-tensor file: {e}")))?;
        Reference::deserialize(&bytes)
            .map_err(|e| BenchError(format!("safetensors rejects the {n}-tensor file: {e}")))?;
        let mut cases = [
            Case::new("tensorfile `Header::from_file_bytes`", iters, || {
                match Header::from_file_bytes(&bytes, &options) {
                    Ok(h) => h.len() as u64,
                    Err(_) => u64::MAX,
                }
            }),
            Case::new("safetensors `SafeTensors::deserialize`", iters, || {
                match Reference::deserialize(&bytes) {
                    Ok(st) => st.len() as u64,
                    Err(_) => u64::MAX - 1,
                }
            }),
            Case::new(
                "floor: serde_json skipping the JSON (`IgnoredAny`)",
                iters,
                || match serde_json::from_slice::<IgnoredAny>(text) {
                    Ok(any) => {
                        black_box(any);
                        n as u64
                    }
                    Err(_) => u64::MAX - 2,
                },
            ),
        ];
        let m = interleave(cfg.rounds, &mut cases);
        agree(&m[0], &m[1])?;
        if m[0].check != n as u64 {
            return Err(BenchError(format!("parse of {n} tensors failed")));
        }
        let label = format!("{n} tensors, header {}", fmt_bytes(header_len));
        table.row(row(&m[0], &label, Some(&m[1]), Some(header_len)));
        table.row(row(&m[1], &label, None, Some(header_len)));
        table.row(row(&m[2], &label, Some(&m[1]), Some(header_len)));
        results.push((n, header_len, m));
    }
    let mut list = Vec::new();
    for (n, header_len, m) in &results {
        if *n >= 100_000 || cfg.quick {
            let s = speedup(m[1].median, m[0].median);
            list.push(Verdict {
                target: format!("parse {n} tensors at least 5x faster than the reference"),
                measured: ratio(s),
                met: s >= 5.0,
            });
        }
        let p = m[0].peak as f64 / *header_len as f64;
        list.push(Verdict {
            target: format!("parse {n} tensors with peak extra memory at most 2x the header"),
            measured: format!(
                "{p:.2}x (reference {:.2}x)",
                m[1].peak as f64 / *header_len as f64
            ),
            met: p <= 2.0,
        });
    }
    Ok(format!(
        "### 1. Header parse + full validation (bytes in memory)\n\n{}\n{}",
        table.render(),
        verdicts(&list)
    ))
}

/// Group 7: one entry with millions of unknown fields (a header of about
/// 96 MB at 7.5 million), parsed by both libraries, against this library's
/// known-field path on a header of many ordinary entries of about the same
/// size. Times are compared per header byte.
pub fn unknown_fields(cfg: &Config) -> Result<String, BenchError> {
    let fields = cfg.unknown_fields();
    let unknown_path = cfg.dir.join("unknown-fields.safetensors");
    let unknown_len =
        fixture::write_header_file(&unknown_path, &fixture::unknown_fields_header(fields), 8)?;
    let unknown = std::fs::read(&unknown_path)?;
    std::fs::remove_file(&unknown_path)?;
    // As many ordinary tensors as fill about the same header length (names
    // grow with the layer number, so the estimate is refined twice).
    let mut tensors = 10_000usize;
    for _ in 0..3 {
        let len = fixture::header_text(&fixture::many_small(tensors)).len() as u64;
        tensors = ((tensors as u64).saturating_mul(unknown_len) / len.max(1)).max(1) as usize;
    }
    let known_path = cfg.dir.join("known-fields.safetensors");
    let known_len = fixture::write_file(&known_path, &fixture::many_small(tensors))?;
    let known = std::fs::read(&known_path)?;
    std::fs::remove_file(&known_path)?;

    let options = ReadOptions::default();
    Header::from_file_bytes(&unknown, &options)
        .map_err(|e| BenchError(format!("tensorfile rejects the unknown-field file: {e}")))?;
    Reference::deserialize(&unknown)
        .map_err(|e| BenchError(format!("safetensors rejects the unknown-field file: {e}")))?;
    Header::from_file_bytes(&known, &options)
        .map_err(|e| BenchError(format!("tensorfile rejects the known-field file: {e}")))?;
    let mut cases = [
        Case::new(
            "tensorfile `Header::from_file_bytes`, unknown fields",
            1,
            || match Header::from_file_bytes(&unknown, &options) {
                Ok(h) => h.len() as u64,
                Err(_) => u64::MAX,
            },
        ),
        Case::new(
            "safetensors `SafeTensors::deserialize`, unknown fields",
            1,
            || match Reference::deserialize(&unknown) {
                Ok(st) => st.len() as u64,
                Err(_) => u64::MAX - 1,
            },
        ),
        Case::new(
            "tensorfile `Header::from_file_bytes`, known fields",
            1,
            || match Header::from_file_bytes(&known, &options) {
                Ok(h) => h.len() as u64,
                Err(_) => u64::MAX,
            },
        ),
    ];
    let m = interleave(cfg.rounds, &mut cases);
    agree(&m[0], &m[1])?;
    if m[2].check != tensors as u64 {
        return Err(BenchError("parse of the known-field file failed".into()));
    }
    let unknown_label = format!(
        "1 tensor with {fields} unknown fields, header {}",
        fmt_bytes(unknown_len)
    );
    let known_label = format!("{tensors} tensors, header {}", fmt_bytes(known_len));
    let mut table = Table::new(&COLUMNS);
    table.row(row(&m[0], &unknown_label, Some(&m[1]), Some(unknown_len)));
    table.row(row(&m[1], &unknown_label, None, Some(unknown_len)));
    table.row(row(&m[2], &known_label, None, Some(known_len)));
    let per_byte = |m: &Measured, len: u64| m.median.as_secs_f64() / len as f64;
    let slower = per_byte(&m[0], unknown_len) / per_byte(&m[2], known_len);
    let faster = speedup(m[1].median, m[0].median);
    let list = [
        Verdict {
            target: "unknown fields parsed within 2x of the known-field path's time per byte"
                .into(),
            measured: format!(
                "{} ({:.2} ns a byte, known fields {:.2} ns)",
                ratio(slower),
                per_byte(&m[0], unknown_len) * 1e9,
                per_byte(&m[2], known_len) * 1e9
            ),
            met: slower <= 2.0,
        },
        Verdict {
            target: "unknown fields parsed faster than the reference".into(),
            measured: ratio(faster),
            met: faster > 1.0,
        },
        Verdict {
            target: "less peak extra heap than the reference on unknown fields".into(),
            measured: format!(
                "{} (reference {})",
                fmt_bytes(m[0].peak as u64),
                fmt_bytes(m[1].peak as u64)
            ),
            met: m[0].peak < m[1].peak,
        },
    ];
    Ok(format!(
        "### 7. Unknown fields: one entry, header parse + full validation (bytes in memory)\n\n{}\n{}",
        table.render(),
        verdicts(&list)
    ))
}

/// Group 2: open, map and parse a large file with a small header.
pub fn open(cfg: &Config, big: &Path) -> Result<String, BenchError> {
    let iters = if cfg.quick { 5 } else { 200 };
    let mut cases = [
        Case::new(
            "tensorfile `SafeTensors::open`",
            iters,
            || match SafeTensors::open(big) {
                Ok(st) => st.len() as u64,
                Err(_) => u64::MAX,
            },
        ),
        Case::new(
            "safetensors: `File::open` + `Mmap::map` + `deserialize`",
            iters,
            || reference_open(big).unwrap_or(u64::MAX - 1),
        ),
    ];
    let m = interleave(cfg.rounds, &mut cases);
    agree(&m[0], &m[1])?;
    let label = big_label(big)?;
    let mut table = Table::new(&COLUMNS);
    table.row(row(&m[0], &label, Some(&m[1]), None));
    table.row(row(&m[1], &label, None, None));
    let s = speedup(m[1].median, m[0].median);
    let list = [Verdict {
        target: "open a large file with a 200-tensor header at least 4x faster than the reference"
            .into(),
        measured: ratio(s),
        met: s >= 4.0,
    }];
    Ok(format!(
        "### 2. Open, map and parse\n\n{}\n{}",
        table.render(),
        verdicts(&list)
    ))
}

fn reference_open(path: &Path) -> std::io::Result<u64> {
    let file = File::open(path)?;
    // SAFETY: the benchmark's own file, not modified while mapped.
    let map = unsafe { Mmap::map(&file)? };
    let st = Reference::deserialize(&map).map_err(std::io::Error::other)?;
    Ok(st.len() as u64)
}

/// A cheap digest of owned tensors: their count and first and last words,
/// enough to tell that the same tensors were loaded.
fn digest<'a>(tensors: impl Iterator<Item = &'a [u8]>) -> u64 {
    tensors.fold(0u64, |acc, t| {
        let first = sum_words(t.get(..8).unwrap_or(&[]));
        let last = sum_words(t.get(t.len().saturating_sub(8)..).unwrap_or(&[]));
        acc.wrapping_mul(31)
            .wrapping_add(first ^ last.rotate_left(1))
    })
}

/// Group 3: every tensor into owned memory.
pub fn load(cfg: &Config, big: &Path) -> Result<String, BenchError> {
    let mut cases = [
        Case::new(
            "tensorfile `SafeTensors::load`",
            1,
            || match SafeTensors::open_with(big, &ReadOptions::default().backend(Backend::Load)) {
                Ok(st) => digest(st.tensors().map(|t| t.data())),
                Err(_) => u64::MAX,
            },
        ),
        Case::new(
            "safetensors: map + `deserialize` + `data().to_vec()` per tensor",
            1,
            || reference_load(big).unwrap_or(u64::MAX - 1),
        ),
        Case::new(
            "baseline: one copy into fresh memory (`std::fs::read`)",
            1,
            || match std::fs::read(big) {
                Ok(v) => v.len() as u64,
                Err(_) => u64::MAX - 2,
            },
        ),
    ];
    let m = interleave(cfg.rounds, &mut cases);
    agree(&m[0], &m[1])?;
    let label = big_label(big)?;
    let mut table = Table::new(&COLUMNS);
    table.row(row(&m[0], &label, Some(&m[1]), None));
    table.row(row(&m[1], &label, None, None));
    table.row(row(&m[2], &label, Some(&m[1]), None));
    let s = speedup(m[1].median, m[0].median);
    let b = speedup(m[2].median, m[0].median);
    let list = [
        Verdict {
            target: "load every tensor at least 1.5x faster than the reference's map-then-copy"
                .into(),
            measured: ratio(s),
            met: s >= 1.5,
        },
        Verdict {
            target: "load never slower than one copy into fresh memory".into(),
            measured: format!("baseline time / load time = {}", ratio(b)),
            met: b >= 1.0,
        },
    ];
    Ok(format!(
        "### 3. Every tensor into owned memory\n\n{}\n\
         (`load` reads into an anonymous map, which the heap counter does not see.)\n\n{}",
        table.render(),
        verdicts(&list)
    ))
}

fn reference_load(path: &Path) -> std::io::Result<u64> {
    let file = File::open(path)?;
    // SAFETY: the benchmark's own file, not modified while mapped.
    let map = unsafe { Mmap::map(&file)? };
    let st = Reference::deserialize(&map).map_err(std::io::Error::other)?;
    // Data order, as ours iterates, so the digests compare.
    let mut views: Vec<_> = st.iter().map(|(_, v)| v).collect();
    views.sort_by_key(|v| v.data().as_ptr() as usize);
    let owned: Vec<Vec<u8>> = views.iter().map(|v| v.data().to_vec()).collect();
    Ok(digest(owned.iter().map(Vec::as_slice)))
}

/// Group 4: touching every byte through the map.
pub fn touch(cfg: &Config, big: &Path) -> Result<String, BenchError> {
    let mut cases = [
        Case::new(
            "tensorfile `SafeTensors::open` + sum over every view",
            1,
            || match SafeTensors::open(big) {
                Ok(st) => st
                    .tensors()
                    .fold(0u64, |acc, t| acc.wrapping_add(sum_words(t.data()))),
                Err(_) => u64::MAX,
            },
        ),
        Case::new("baseline: bare `memmap2` map, sum over the data", 1, || {
            bare_sum(big).unwrap_or(u64::MAX - 1)
        }),
    ];
    let m = interleave(cfg.rounds, &mut cases);
    agree(&m[0], &m[1])?;
    let label = big_label(big)?;
    let mut table = Table::new(&COLUMNS);
    table.row(row(&m[0], &label, Some(&m[1]), None));
    table.row(row(&m[1], &label, None, None));
    let slower = speedup(m[0].median, m[1].median);
    let list = [Verdict {
        target: "touch every byte within 1.1x of a bare map".into(),
        measured: format!("this time / bare map time = {}", ratio(slower)),
        met: slower <= 1.1,
    }];
    Ok(format!(
        "### 4. Touching every byte through the map\n\n{}\n\
         (Here the \"reference\" column compares with the bare map.)\n\n{}",
        table.render(),
        verdicts(&list)
    ))
}

fn bare_sum(path: &Path) -> std::io::Result<u64> {
    let file = File::open(path)?;
    // SAFETY: the benchmark's own file, not modified while mapped.
    let map = unsafe { Mmap::map(&file)? };
    let mut n = [0u8; 8];
    n.copy_from_slice(
        map.get(..8)
            .ok_or_else(|| std::io::Error::other("short file"))?,
    );
    let start = usize::try_from(u64::from_le_bytes(n))
        .ok()
        .and_then(|n| n.checked_add(8))
        .ok_or_else(|| std::io::Error::other("bad header length"))?;
    let data = map
        .get(start..)
        .ok_or_else(|| std::io::Error::other("header past end"))?;
    Ok(sum_words(data))
}

fn big_label(big: &Path) -> Result<String, BenchError> {
    let len = std::fs::metadata(big)?.len();
    Ok(format!("{} file, 200 tensors", fmt_bytes(len)))
}
