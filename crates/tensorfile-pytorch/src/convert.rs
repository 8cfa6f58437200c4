//! Converts a checkpoint into a canonical safetensors file.
//!
//! Tensors go from the input to their places in the output file, written by
//! two threads at once (each takes the next tensor in file order): stored
//! tensors are read in 4 MiB pieces, contiguous views are written straight
//! from the memory map, and other views are gathered about 4 MiB at a time
//! ([`TorchTensor::for_each_piece`]), so peak memory is a few pieces per
//! thread, not the largest tensor. A deflated storage is
//! inflated once for all its tensors (only the spans they view, see
//! [`LoadOptions::max_inflated_bytes`]) and released after the last of them
//! is written. A refused or failed
//! conversion leaves no output file (the writer saves to a temporary file and
//! renames it at the end).

use std::collections::HashMap;
use std::path::Path;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tensorfile::cast::{plan_targets, CastOptions, TensorCast};
use tensorfile::{save_positional, Dtype, Metadata, PositionalWriter, TensorSpec, WriteOptions};

use crate::checkpoint::{Checkpoint, LoadOptions, TorchTensor};
use crate::error::{Error, Result};
use crate::sharing::{plan, SharedPolicy};

/// The metadata key and value every converted file carries, like the
/// reference converter's output.
pub const FORMAT_KEY: &str = "format";
/// See [`FORMAT_KEY`].
pub const FORMAT_VALUE: &str = "pt";

/// How to convert.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// How to load the checkpoint (`key`, `name`, limits).
    pub load: LoadOptions,
    /// What to do with tensors that share storage.
    pub shared: SharedPolicy,
    /// Keep non-tensor values (numbers, strings) as string metadata.
    pub keep_values: bool,
    /// How to write (alignment, syncing).
    pub write: WriteOptions,
    /// Cast the float tensors to this dtype on the way (the companions of
    /// quantized weights keep theirs, as in `tensorfile::cast`).
    pub dtype: Option<Dtype>,
    /// How to cast (saturation, integers), with `dtype`.
    pub cast: CastOptions,
}

/// Where a conversion is, for progress bars.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// The tensor just written.
    pub name: &'a str,
    /// Tensors written so far.
    pub tensors_done: usize,
    /// Tensors to write.
    pub tensors_total: usize,
    /// Tensor bytes written so far.
    pub bytes_done: u64,
    /// Tensor bytes to write.
    pub bytes_total: u64,
}

/// What a conversion wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Tensors written with their own bytes.
    pub tensors: usize,
    /// Names recorded as aliases of a written tensor.
    pub aliases: usize,
    /// Non-tensor values kept as metadata.
    pub values: usize,
    /// Tensors cast to `dtype`.
    pub cast: usize,
    /// Tensor bytes written.
    pub bytes: u64,
    /// The output's metadata.
    pub metadata: Metadata,
}

/// Loads `input` and converts it to `output`.
pub fn convert(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    options: &ConvertOptions,
    progress: impl FnMut(Progress<'_>),
) -> Result<Report> {
    let ckpt = Checkpoint::open_with(input, &options.load)?;
    convert_checkpoint(&ckpt, output, options, progress)
}

/// Converts a loaded checkpoint to `output` (`options.load` is not used).
pub fn convert_checkpoint(
    ckpt: &Checkpoint,
    output: impl AsRef<Path>,
    options: &ConvertOptions,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Report> {
    let plan = plan(ckpt, options.shared)?;
    let metadata = metadata(ckpt, &plan.aliases, options.keep_values)?;
    // The dtype each tensor is written in, every cast checked up front.
    let described: Vec<(&str, Dtype, &[u64])> = plan
        .write
        .iter()
        .map(|t| (t.name(), t.dtype(), t.shape()))
        .collect();
    let targets = plan_targets(&described, options.dtype, options.cast)?;
    let cast = plan
        .write
        .iter()
        .zip(&targets)
        .filter(|(t, target)| target.dtype != t.dtype())
        .count();
    let specs: Vec<TensorSpec> = plan
        .write
        .iter()
        .zip(&targets)
        .map(|(t, target)| TensorSpec::new(t.name(), target.dtype, t.shape()))
        .collect();
    let by_name: HashMap<&str, (TorchTensor<'_>, Dtype)> = plan
        .write
        .iter()
        .zip(&targets)
        .map(|(t, target)| (t.name(), (*t, target.dtype)))
        .collect();
    let bytes_total: u64 = plan.write.iter().map(|t| t.nbytes()).sum();
    let mut bytes_done = 0u64;
    let mut tensors_done = 0usize;
    // A loader error inside the writer's callback must come back out as
    // itself, not as a writer error: keep it aside.
    let mut failure: Option<Error> = None;
    let layout = tensorfile::writer::Layout::new(&specs, Some(&metadata), &options.write)?;
    let result = save_positional(output, layout, &options.write, |w| {
        // Tensors in file order; two workers take them in turn.
        let order: Vec<&(TorchTensor<'_>, Dtype)> = w
            .layout()
            .slots()
            .map(|slot| {
                by_name
                    .get(slot.name())
                    .ok_or_else(|| aborted(format!("no tensor {:?} to write", slot.name())))
            })
            .collect::<tensorfile::Result<_>>()
            .map_err(tensorfile_core::Error::from)?;
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        // Tensors left to write per storage: a deflated storage's inflated
        // bytes are released after its last one.
        let mut left: HashMap<usize, AtomicUsize> = HashMap::new();
        for (t, _) in &order {
            left.entry(t.storage_index())
                .or_insert_with(|| AtomicUsize::new(0))
                .fetch_add(1, Ordering::Relaxed);
        }
        let left = &left;
        let (done, finished) = std::sync::mpsc::channel::<std::result::Result<usize, Failed>>();
        std::thread::scope(|scope| {
            for _ in 0..WORKERS {
                let done = done.clone();
                let (order, next, stop) = (&order, &next, &stop);
                scope.spawn(move || {
                    let mut buf = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&&(ref t, target)) = order.get(i) else {
                            return;
                        };
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let cast = (target != t.dtype()).then_some((target, options.cast));
                        let written = write_tensor(w, i, t, cast, &mut buf);
                        let storage = t.storage_index();
                        if left
                            .get(&storage)
                            .is_some_and(|n| n.fetch_sub(1, Ordering::AcqRel) == 1)
                        {
                            ckpt.release_storage(storage);
                        }
                        if written.is_err() {
                            stop.store(true, Ordering::Relaxed);
                        }
                        let _ = done.send(written.map(|()| i));
                    }
                });
            }
            drop(done);
            // Progress from this thread (the callback need not be Sync);
            // the first failure wins, the workers stop at their next tensor.
            let mut first: Option<Failed> = None;
            for event in finished {
                match event {
                    Ok(i) => {
                        let Some((t, _)) = order.get(i) else { continue };
                        bytes_done += t.nbytes();
                        tensors_done += 1;
                        progress(Progress {
                            name: t.name(),
                            tensors_done,
                            tensors_total: specs.len(),
                            bytes_done,
                            bytes_total,
                        });
                    }
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
            }
            match first {
                None => Ok(()),
                Some(Failed::Write(e)) => Err(e.into()),
                Some(Failed::Load(name, e)) => {
                    failure = Some(*e);
                    Err(aborted(format!("tensor {name:?} could not be read")).into())
                }
            }
        })
    });
    if let Some(e) = failure {
        return Err(e);
    }
    result?;
    Ok(Report {
        tensors: plan.write.len(),
        aliases: plan.aliases.len(),
        cast,
        values: if options.keep_values {
            ckpt.values().len()
        } else {
            0
        },
        bytes: bytes_total,
        metadata,
    })
}

/// Threads writing tensors at once: two cores copying into the page cache
/// is what makes writing a large file fast (one core was the bottleneck).
const WORKERS: usize = 2;
/// Stored tensors are read in pieces of this size.
const PIECE: usize = 4 << 20;

/// Why a worker stopped.
enum Failed {
    /// The tensor could not be read from the checkpoint (boxed: errors are
    /// large and this travels through a channel).
    Load(String, Box<Error>),
    /// Writing failed.
    Write(tensorfile::Error),
}

/// Why writing one piece of a tensor stopped.
enum PieceError {
    Load(Error),
    Write(tensorfile::Error),
}

impl From<Error> for PieceError {
    fn from(e: Error) -> PieceError {
        PieceError::Load(e)
    }
}

/// Writes tensor `t`, the `index`-th in file order, at its place: stored
/// tensors are read in pieces into `buf` (plain reads are faster than
/// faulting in the memory map page by page); other views are taken from
/// the map, or gathered (re-ordered, expanded, inflated, byte-swapped) a
/// piece at a time, so that no tensor is ever held whole. With `cast`, the
/// bytes are cast piece by piece on the way.
fn write_tensor(
    w: &PositionalWriter<'_>,
    index: usize,
    t: &TorchTensor<'_>,
    cast: Option<(Dtype, CastOptions)>,
    buf: &mut Vec<u8>,
) -> std::result::Result<(), Failed> {
    use std::io::Read;
    let load = |e: Error| Failed::Load(t.name().to_string(), Box::new(e));
    let failed = |e: PieceError| match e {
        PieceError::Load(e) => load(e),
        PieceError::Write(e) => Failed::Write(e),
    };
    if let Some((target, opts)) = cast {
        let mut caster =
            TensorCast::new(t.name(), t.dtype(), t.shape(), target, opts).map_err(Failed::Write)?;
        let mut offset = 0u64;
        t.for_each_piece(PIECE, |piece| {
            buf.clear();
            caster.push(piece, buf).map_err(PieceError::Write)?;
            w.write(index, offset, buf)
                .map_err(|e| PieceError::Write(e.into()))?;
            offset += buf.len() as u64;
            Ok(())
        })
        .map_err(failed)?;
        return caster.finish().map_err(Failed::Write);
    }
    match t.reader().map_err(load)? {
        Some(mut reader) => {
            buf.resize(PIECE, 0);
            let mut offset = 0u64;
            loop {
                let n = match reader.read(buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        let reason = format!("cannot read the input file: {e}");
                        let name = t.name().to_string();
                        return Err(load(Error::Tensor { name, reason }));
                    }
                };
                w.write(index, offset, &buf[..n])
                    .map_err(|e| Failed::Write(e.into()))?;
                offset += n as u64;
            }
        }
        None => {
            let mut offset = 0u64;
            t.for_each_piece(PIECE, |piece| {
                w.write(index, offset, piece)
                    .map_err(|e| PieceError::Write(e.into()))?;
                offset += piece.len() as u64;
                Ok(())
            })
            .map_err(failed)
        }
    }
}

/// Stops the writer (which then removes its temporary file).
fn aborted(why: String) -> tensorfile::Error {
    tensorfile::Error::from(std::io::Error::other(why))
}

/// The output's metadata: `"format": "pt"`, one `"removed": "kept"` entry
/// per alias, and with `keep_values` every non-tensor value. Refuses two
/// entries with one key.
pub fn metadata(
    ckpt: &Checkpoint,
    aliases: &[(String, String)],
    keep_values: bool,
) -> Result<Metadata> {
    let mut m = Metadata::new();
    m.insert(FORMAT_KEY.to_string(), FORMAT_VALUE.to_string());
    let values = if keep_values { ckpt.values() } else { &[] };
    let entries = aliases
        .iter()
        .map(|(k, v)| (k, v, "an alias"))
        .chain(values.iter().map(|(k, v)| (k, v, "a kept value")));
    for (k, v, what) in entries {
        if m.insert(k.clone(), v.clone()).is_some() {
            return Err(Error::Structure(format!(
                "metadata key {k:?} ({what}) collides with another entry (\"format\", an alias or a kept value)"
            )));
        }
    }
    Ok(m)
}
