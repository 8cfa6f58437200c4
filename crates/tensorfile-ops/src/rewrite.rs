//! `rewrite`: the canonical file (or set) of a safetensors input, with the
//! data optionally aligned to 64 or 4096 bytes.

use serde::{Deserialize, Serialize};
use tensorfile_core::Align;

use crate::transform::InOut;
use tensorfile::cast::{convert_plan, CastOptions};
use tensorfile::{Error, Progress, Result};

/// What to rewrite, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RewriteRequest {
    /// The input (a safetensors file or set) and the output, which may be
    /// the input itself.
    #[serde(flatten)]
    pub files: InOut,
    /// Pad the header so that the data starts at a multiple of this many
    /// bytes: 8 (canonical), 64 or 4096.
    pub align: u64,
    /// Record every tensor's sha256 in the output's metadata
    /// (`tensorfile.sha256`).
    pub embed_hash: bool,
}

impl Default for RewriteRequest {
    fn default() -> RewriteRequest {
        RewriteRequest {
            files: InOut::default(),
            align: 8,
            embed_hash: false,
        }
    }
}

/// What was written: `tensorfile rewrite --json`. Fields are in the order
/// of their names: the order the command has always printed its keys in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewriteReport {
    /// The alignment of the data, in bytes.
    pub align: u64,
    /// Bytes in all the files written.
    pub bytes: u64,
    /// The files written, in order.
    pub files: Vec<std::path::PathBuf>,
    /// The index written, for a set.
    pub index: Option<std::path::PathBuf>,
    /// The input, as given.
    pub input: std::path::PathBuf,
    /// The output, as given.
    pub output: std::path::PathBuf,
    /// Tensors written.
    pub tensors: usize,
}

/// Copies the input's tensors into an atomic save of the output, as the
/// canonical writer writes them. The output may be the input: the save
/// renames a new file over the name, and the input's open file keeps
/// reading the old one. `progress` counts the data bytes written.
///
/// # Errors
/// An alignment other than 8, 64 or 4096 ([`Error::Request`]), an input
/// that is not safetensors or cannot be read, a failed write (nothing is
/// left behind).
pub fn rewrite(request: &RewriteRequest, progress: &dyn Progress) -> Result<RewriteReport> {
    request.files.via_local(
        progress,
        |io| {
            let mut local = request.clone();
            local.files = io.clone();
            rewrite_here(&local, progress)
        },
        |r, map| {
            r.files = r.files.iter().map(|f| map(f)).collect();
            r.index = r.index.as_deref().map(map);
            r.output = request.files.output.clone();
        },
    )
}

fn rewrite_here(request: &RewriteRequest, progress: &dyn Progress) -> Result<RewriteReport> {
    let align = Align::from_bytes(request.align).ok_or_else(|| {
        Error::request(format!(
            "`{}` is not an alignment; expected 8, 64 or 4096",
            request.align
        ))
    })?;
    let io = &request.files;
    let input = io.open_safetensors()?;
    let options = io.write_options().with_align(align);
    let tensors = input.tensors();
    let metadata = input.metadata()?;
    let (plan, summary) = convert_plan(&tensors, metadata.as_ref(), None, CastOptions::default())?;
    #[allow(unused_mut)]
    let mut written = io.write_with(&input.layout(&tensors), &plan, &options, progress)?;
    #[cfg(feature = "digest")]
    if request.embed_hash {
        written.embed_hashes(&options)?;
    }
    #[cfg(not(feature = "digest"))]
    if request.embed_hash {
        return Err(Error::request(
            "--embed-hash needs tensorfile's `digest` feature",
        ));
    }
    Ok(RewriteReport {
        align: align.bytes(),
        bytes: written.bytes,
        files: written.files,
        index: written.index,
        input: io.input.clone(),
        output: io.output.clone(),
        tensors: summary.tensors,
    })
}
