//! Converts a checkpoint into a canonical safetensors file.
//!
//! Tensors stream from the input to the atomic writer in the output's file
//! order. A producer thread reads stored tensors in 4 MiB pieces, hands
//! contiguous views over straight from the memory map, and gathers other
//! views into a buffer per tensor; the writer writes them meanwhile. At most
//! a few pieces wait between the two, so peak memory is about twice the
//! largest tensor that needs re-ordering (one being written, the next being
//! gathered), not the model. A refused or failed conversion leaves no output
//! file (the writer saves to a temporary file and renames it at the end).

use std::collections::HashMap;
use std::path::Path;

use tensorfile::{save_streaming, Metadata, TensorSpec, WriteOptions};

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
    let specs: Vec<TensorSpec> = plan
        .write
        .iter()
        .map(|t| TensorSpec::new(t.name(), t.dtype(), t.shape()))
        .collect();
    let by_name: HashMap<&str, TorchTensor<'_>> =
        plan.write.iter().map(|t| (t.name(), *t)).collect();
    let bytes_total: u64 = plan.write.iter().map(|t| t.nbytes()).sum();
    let mut bytes_done = 0u64;
    let mut tensors_done = 0usize;
    // A loader error inside the writer's callback must come back out as
    // itself, not as a writer error: keep it aside.
    let mut failure: Option<Error> = None;
    let result = save_streaming(output, &specs, Some(&metadata), &options.write, |w| {
        // The file order, fixed by the layout: the producer follows it.
        let order: Vec<&TorchTensor<'_>> = w
            .layout()
            .slots()
            .map(|slot| {
                by_name
                    .get(slot.name())
                    .ok_or_else(|| aborted(format!("no tensor {:?} to write", slot.name())))
            })
            .collect::<tensorfile::Result<_>>()?;
        let (pieces, received) = std::sync::mpsc::sync_channel::<Piece<'_>>(QUEUE);
        let (recycle, recycled) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::scope(|scope| {
            scope.spawn(move || produce(&order, &pieces, &recycled));
            for piece in received {
                match piece {
                    Piece::Read(buf) => {
                        w.write(&buf)?;
                        // The producer may have stopped; the buffer is then dropped.
                        let _ = recycle.send(buf);
                    }
                    Piece::Mapped(bytes) => w.write(bytes)?,
                    Piece::Gathered(bytes) => w.write(&bytes)?,
                    Piece::Done(t) => {
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
                    Piece::Failed(name, e) => {
                        failure = Some(e);
                        return Err(aborted(format!("tensor {name:?} could not be read")));
                    }
                }
            }
            // Returning (or an error above) drops the receiver, which stops
            // the producer at its next piece.
            Ok(())
        })
    });
    if let Some(e) = failure {
        return Err(e);
    }
    result?;
    Ok(Report {
        tensors: plan.write.len(),
        aliases: plan.aliases.len(),
        values: if options.keep_values {
            ckpt.values().len()
        } else {
            0
        },
        bytes: bytes_total,
        metadata,
    })
}

/// Stops the writer (which then removes its temporary file).
/// Bytes in flight between the producer and the writer: pieces of stored
/// tensors are read into buffers of this size, and at most [`QUEUE`] wait.
const PIECE: usize = 4 << 20;
/// Pieces the producer may be ahead of the writer.
const QUEUE: usize = 4;

/// What the producer hands the writer, in file order.
enum Piece<'a> {
    /// Bytes read from the input file into a buffer, which goes back to
    /// the producer once written.
    Read(Vec<u8>),
    /// A tensor's bytes borrowed from the memory map.
    Mapped(&'a [u8]),
    /// A tensor gathered (re-ordered, inflated or byte-swapped) into memory.
    Gathered(Vec<u8>),
    /// The tensor's bytes were all handed over.
    Done(&'a TorchTensor<'a>),
    /// The tensor could not be read; nothing follows.
    Failed(String, Error),
}

/// Reads or gathers each tensor, in file order, and hands its bytes over.
/// Runs on its own thread, so reading and re-ordering the next tensor
/// overlap with writing this one. Stops when the writer stops listening.
fn produce<'a>(
    order: &[&'a TorchTensor<'a>],
    out: &std::sync::mpsc::SyncSender<Piece<'a>>,
    recycled: &std::sync::mpsc::Receiver<Vec<u8>>,
) {
    use std::io::Read;
    for &t in order {
        let sent = match t.reader() {
            // Stored as they are: plain reads (faster than faulting in the
            // map page by page), into buffers the writer gives back.
            Ok(Some(mut reader)) => loop {
                let mut buf = recycled.try_recv().unwrap_or_else(|_| vec![0; PIECE]);
                buf.resize(PIECE, 0);
                let mut filled = 0;
                let read = loop {
                    match reader.read(&mut buf[filled..]) {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            filled += n;
                            if filled == buf.len() {
                                break Ok(());
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                if let Err(e) = read {
                    let reason = format!("cannot read the input file: {e}");
                    let err = Error::Tensor {
                        name: t.name().to_string(),
                        reason,
                    };
                    let _ = out.send(Piece::Failed(t.name().to_string(), err));
                    return;
                }
                if filled == 0 {
                    break true;
                }
                buf.truncate(filled);
                if out.send(Piece::Read(buf)).is_err() {
                    return;
                }
            },
            Ok(None) => match t.bytes() {
                Ok(std::borrow::Cow::Borrowed(b)) => out.send(Piece::Mapped(b)).is_ok(),
                Ok(std::borrow::Cow::Owned(v)) => out.send(Piece::Gathered(v)).is_ok(),
                Err(e) => {
                    let _ = out.send(Piece::Failed(t.name().to_string(), e));
                    return;
                }
            },
            Err(e) => {
                let _ = out.send(Piece::Failed(t.name().to_string(), e));
                return;
            }
        };
        if !sent || out.send(Piece::Done(t)).is_err() {
            return;
        }
    }
}

fn aborted(why: String) -> tensorfile::Error {
    tensorfile::Error::Stream(std::io::Error::other(why))
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
