//! Converts a checkpoint into a canonical safetensors file.
//!
//! Tensors stream from the memory-mapped input to the atomic writer one at
//! a time, in the output's file order: contiguous views are written straight
//! from the map, other views are gathered into one buffer that is dropped
//! before the next tensor. Peak memory is about the largest tensor that
//! needs re-ordering. A refused or failed conversion leaves no output file
//! (the writer saves to a temporary file and renames it at the end).

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
        while let Some(slot) = w.expected() {
            let name = slot.name().to_string();
            let Some(t) = by_name.get(name.as_str()) else {
                return Err(aborted(format!("no tensor {name:?} to write")));
            };
            // Bytes stored as they are stream with plain reads; the rest
            // (views to re-order, inflated or byte-swapped storages) come
            // from one buffer per tensor.
            let direct = match t.reader() {
                Ok(r) => r,
                Err(e) => {
                    failure = Some(e);
                    return Err(aborted(format!("tensor {name:?} could not be read")));
                }
            };
            match direct {
                Some(reader) => {
                    w.write_from(&name, reader)?;
                }
                None => {
                    let bytes = match t.bytes() {
                        Ok(b) => b,
                        Err(e) => {
                            failure = Some(e);
                            return Err(aborted(format!("tensor {name:?} could not be read")));
                        }
                    };
                    w.write_tensor(&name, &bytes)?;
                }
            }
            bytes_done += t.nbytes();
            tensors_done += 1;
            progress(Progress {
                name: &name,
                tensors_done,
                tensors_total: specs.len(),
                bytes_done,
                bytes_total,
            });
        }
        Ok(())
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
