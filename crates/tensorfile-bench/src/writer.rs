//! The writer's groups (issue 3): writing a large file, serializing a big
//! header.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use tensorfile::{Backend, Dtype, ReadOptions, SafeTensors};
use tensorfile_core::writer::{serialize, TensorRef, WriteOptions};

use crate::fixture;
use crate::measure::{fmt_bytes, interleave, speedup, Case};
use crate::reader::{agree, row, Reference, COLUMNS};
use crate::report::{ratio, verdicts, Table, Verdict};
use crate::{BenchError, Config};

fn bench_err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> BenchError + '_ {
    move |e| BenchError(format!("{what}: {e}"))
}

/// Removes a previous output.
fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// Group 5: writing every tensor of the large file, from memory, to a path.
pub fn write(cfg: &Config, big: &Path) -> Result<String, BenchError> {
    // The source: every tensor in memory. The baselines write the
    // canonical file's bytes, made once here, with one `write_all`.
    let load = ReadOptions::default().backend(Backend::Load);
    let source = SafeTensors::open_with(big, &load).map_err(bench_err("loading the source"))?;
    let views: Vec<_> = source.tensors().collect();
    let canonical = serialize(&views, None).map_err(bench_err("serializing"))?;
    let header_len = fixture::header_len(&canonical);
    let reference = Reference::deserialize(source.as_bytes())
        .map_err(|e| BenchError(format!("the reference rejects the source: {e}")))?
        .tensors();

    let out = |name: &str| cfg.dir.join(name);
    let (ours_path, base_path, ref_path) = (out("ours.out"), out("base.out"), out("ref.out"));
    let no_sync = WriteOptions::default().with_sync(false);
    let sync = WriteOptions::default();
    // Before every sample, untimed: remove every case's output, which also
    // drops its dirty pages, so no sample pays for writing back another's
    // gigabyte (at most one output is dirty at a time).
    let clear = || {
        for path in [&ours_path, &base_path, &ref_path] {
            remove(path);
        }
    };
    let save = |opts: &WriteOptions| match tensorfile::save(&ours_path, &views, None, opts) {
        Ok(()) => canonical.len() as u64,
        Err(_) => u64::MAX,
    };
    let write_all = |durable: bool| -> std::io::Result<u64> {
        let mut f = File::create(&base_path)?;
        f.write_all(&canonical)?;
        if durable {
            f.sync_all()?;
        }
        Ok(canonical.len() as u64)
    };
    // All three write the canonical bytes: checked once, before timing.
    tensorfile::save(&ours_path, &views, None, &no_sync).map_err(bench_err("save"))?;
    write_all(false)?;
    safetensors::serialize_to_file(
        reference.iter().map(|(n, v)| (n.as_str(), v)),
        None,
        &ref_path,
    )
    .map_err(|e| BenchError(format!("reference serialize_to_file: {e}")))?;
    for path in [&ours_path, &base_path, &ref_path] {
        if std::fs::read(path)? != canonical {
            return Err(BenchError(format!(
                "{} differs from the canonical file",
                path.display()
            )));
        }
    }
    let mut cases = [
        Case::new("tensorfile `save`, sync off", 1, || save(&no_sync)).with_setup(clear),
        Case::new("baseline: one `write_all`", 1, || {
            write_all(false).unwrap_or(u64::MAX - 1)
        })
        .with_setup(clear),
        Case::new("safetensors `serialize_to_file`", 1, || {
            let tensors = reference.iter().map(|(n, v)| (n.as_str(), v));
            match safetensors::serialize_to_file(tensors, None, &ref_path) {
                Ok(()) => canonical.len() as u64,
                Err(_) => u64::MAX - 2,
            }
        })
        .with_setup(clear),
        Case::new("tensorfile `save`, sync on", 1, || save(&sync)).with_setup(clear),
        Case::new("baseline: one `write_all` + `fsync`", 1, || {
            write_all(true).unwrap_or(u64::MAX - 3)
        })
        .with_setup(clear),
    ];
    let m = interleave(cfg.rounds, &mut cases);
    drop(cases);
    clear();
    agree(&m[0], &m[1])?;
    agree(&m[0], &m[2])?;
    agree(&m[3], &m[4])?;
    let label = format!(
        "{} of tensors, {} tensors, header {}",
        fmt_bytes(canonical.len() as u64),
        views.len(),
        fmt_bytes(header_len)
    );
    let mut table = Table::new(&COLUMNS);
    table.row(row(&m[0], &label, Some(&m[2]), Some(header_len)));
    table.row(row(&m[1], &label, Some(&m[2]), Some(header_len)));
    table.row(row(&m[2], &label, None, Some(header_len)));
    table.row(row(&m[3], &label, Some(&m[2]), Some(header_len)));
    table.row(row(&m[4], &label, Some(&m[2]), Some(header_len)));
    let off = speedup(m[0].median, m[1].median);
    let on = speedup(m[3].median, m[4].median);
    let vs_ref = speedup(m[2].median, m[0].median);
    // The file sink's buffer (1 MiB) plus the header and small tables.
    let bound = header_len * 2 + (2 << 20);
    let peak = m[0].peak.max(m[3].peak) as u64;
    let list = [
        Verdict {
            target: "write with sync off within 1.1x of one `write_all`".into(),
            measured: format!("save time / write_all time = {}", ratio(off)),
            met: off <= 1.1,
        },
        Verdict {
            target: "write with sync on within 1.1x of `write_all` + `fsync`".into(),
            measured: format!("save time / (write_all + fsync) time = {}", ratio(on)),
            met: on <= 1.1,
        },
        Verdict {
            target: "no slower than the reference's `serialize_to_file` (sync off)".into(),
            measured: format!("reference time / save time = {}", ratio(vs_ref)),
            met: vs_ref >= 1.0,
        },
        Verdict {
            target: "memory bounded by the header (at most 2x header + 2 MiB of buffers)".into(),
            measured: format!("peak extra heap {}", fmt_bytes(peak)),
            met: peak <= bound,
        },
    ];
    Ok(format!(
        "### 5. Writing a large file (atomic save)\n\n{}\n\
         (The \"reference\" column is the reference's time over this row's; \
         the source tensors are in memory, loaded beforehand.)\n\n{}",
        table.render(),
        verdicts(&list)
    ))
}

/// Group 6: serializing a file of many tiny tensors, so the header is
/// nearly all of the work.
pub fn serialize_header(cfg: &Config) -> Result<String, BenchError> {
    let n = if cfg.quick { 10_000 } else { 100_000 };
    let specs = fixture::many_small(n);
    let zeros = [0u8; 64];
    let mut ours = Vec::with_capacity(n);
    let mut theirs = Vec::with_capacity(n);
    for s in &specs {
        let data = zeros
            .get(..s.nbytes as usize)
            .ok_or_else(|| BenchError("tensor larger than the zero buffer".into()))?;
        let dtype = Dtype::from_name(s.dtype)
            .ok_or_else(|| BenchError(format!("unknown dtype {}", s.dtype)))?;
        ours.push(TensorRef {
            name: &s.name,
            dtype,
            shape: &s.shape,
            data,
        });
        let their_dtype: safetensors::Dtype = serde_json::from_str(&format!("\"{}\"", s.dtype))
            .map_err(|e| BenchError(format!("reference dtype {}: {e}", s.dtype)))?;
        let shape: Vec<usize> = s.shape.iter().map(|&d| d as usize).collect();
        let view = safetensors::tensor::TensorView::new(their_dtype, shape, data)
            .map_err(|e| BenchError(format!("reference view: {e}")))?;
        theirs.push((s.name.as_str(), view));
    }
    // Same bytes, checked once before timing.
    let a = serialize(&ours, None).map_err(bench_err("serializing"))?;
    let b = safetensors::serialize(theirs.iter().map(|(n, v)| (*n, v)), None)
        .map_err(|e| BenchError(format!("reference serialize: {e}")))?;
    if a != b {
        return Err(BenchError(
            "tensorfile and safetensors serialized different bytes".into(),
        ));
    }
    let header_len = fixture::header_len(&a);
    drop((a, b));
    let iters = if cfg.quick { 1 } else { 3 };
    let mut cases = [
        Case::new(
            "tensorfile `writer::serialize`",
            iters,
            || match serialize(&ours, None) {
                Ok(v) => v.len() as u64,
                Err(_) => u64::MAX,
            },
        ),
        Case::new(
            "safetensors `serialize`",
            iters,
            || match safetensors::serialize(theirs.iter().map(|(n, v)| (*n, v)), None) {
                Ok(v) => v.len() as u64,
                Err(_) => u64::MAX - 1,
            },
        ),
    ];
    let m = interleave(cfg.rounds, &mut cases);
    agree(&m[0], &m[1])?;
    let label = format!("{n} tensors, header {}", fmt_bytes(header_len));
    let mut table = Table::new(&COLUMNS);
    table.row(row(&m[0], &label, Some(&m[1]), Some(header_len)));
    table.row(row(&m[1], &label, None, Some(header_len)));
    let s = speedup(m[1].median, m[0].median);
    let list = [Verdict {
        target: format!(
            "serialize the header of {n} tensors at least 3x faster than the reference"
        ),
        measured: ratio(s),
        met: s >= 3.0,
    }];
    Ok(format!(
        "### 6. Serializing a header of many tensors (tiny data)\n\n{}\n\
         (Both write the same bytes, checked before timing; peak includes the output.)\n\n{}",
        table.render(),
        verdicts(&list)
    ))
}
