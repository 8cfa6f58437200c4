//! `edit`: set, remove and rename in a file's header, in place when only
//! the header changes (see [`tensorfile_core::edit`] for when, and what
//! readers see).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tensorfile::{Error, Progress, Result};
use tensorfile_core::edit::Edit;

/// What to change in which file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EditRequest {
    /// The safetensors file to edit: a local file, or an object at a store
    /// URL (`s3://`, `gs://`, `az://`), which is rewritten whole: copied
    /// to a private temporary directory, edited, and put back in its
    /// place (not atomic for a concurrent writer of the same object).
    pub file: PathBuf,
    /// Metadata keys to set, with their values.
    pub set: BTreeMap<String, String>,
    /// Metadata keys to remove (a key the file lacks is no error).
    pub unset: Vec<String>,
    /// Tensors to rename, old name to new (all at once: two may swap).
    pub rename: BTreeMap<String, String>,
    /// Rewrite the file atomically even when it could be edited in place.
    pub rewrite: bool,
    /// Largest header length accepted and written, in bytes.
    pub max_header_len: u64,
    /// Sync the write to disk.
    pub sync: bool,
}

impl Default for EditRequest {
    fn default() -> EditRequest {
        EditRequest {
            file: PathBuf::new(),
            set: BTreeMap::new(),
            unset: Vec::new(),
            rename: BTreeMap::new(),
            rewrite: false,
            max_header_len: tensorfile_core::DEFAULT_MAX_HEADER_LEN,
            sync: true,
        }
    }
}

/// What was done: `tensorfile edit --json`. Fields are in the order of
/// their names (the order the keys print in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditReport {
    /// The file's alignment, which the edit keeps: 8, 64 or 4096.
    pub align: u64,
    /// Bytes written: the first block in place, the whole file otherwise.
    pub bytes: u64,
    /// The file, as given.
    pub file: PathBuf,
    /// N, the new header's length (padding included).
    pub header_len: u64,
    /// Whether only the header was written, in place.
    pub in_place: bool,
    /// Why the file was rewritten instead; `None` in place.
    pub reason: Option<String>,
    /// The number of tensors.
    pub tensors: usize,
}

/// Applies the request's edits: in place when the file is canonical (as
/// `rewrite --align A` writes it), the new header pads to the old one's
/// length within the first page and no tensor moves; otherwise an atomic
/// rewrite (`progress` counts its data bytes). The result is the same
/// file either way.
///
/// # Errors
/// A key both set and removed ([`Error::Request`]), an input that is not
/// a valid safetensors file, a renamed tensor that does not exist, two
/// tensors of one name, a write that fails (the file is then as it was).
pub fn edit(request: &EditRequest, progress: &dyn Progress) -> Result<EditReport> {
    if let Some(key) = request.unset.iter().find(|k| request.set.contains_key(*k)) {
        return Err(Error::request(format!(
            "metadata key {key:?} is both set and removed"
        )));
    }
    if crate::bucket::store_url(&request.file).is_none() {
        return edit_here(request, progress);
    }
    edit_object(request, progress)
}

/// [`edit`] of an object in a store: an object cannot be written in part,
/// so it is copied here, edited and put back whole (replacing it is what an
/// edit asks for).
#[cfg(feature = "remote")]
fn edit_object(request: &EditRequest, progress: &dyn Progress) -> Result<EditReport> {
    crate::bucket::via_local(
        &request.file,
        true,
        progress,
        |local| {
            let source = request.file.to_string_lossy().into_owned();
            let mut copy = crate::fetch::FetchRequest::new(source, Some(local.to_path_buf()));
            copy.sync = false;
            crate::fetch::fetch(&copy, &())?;
            let here = EditRequest {
                file: local.to_path_buf(),
                rewrite: true,
                sync: false,
                ..request.clone()
            };
            let mut report = edit_here(&here, progress)?;
            report.reason = Some("an object in a store is rewritten whole".into());
            Ok(report)
        },
        |report, _| report.file = request.file.clone(),
    )
}

/// Without the `remote` feature an object cannot be fetched to edit.
#[cfg(not(feature = "remote"))]
fn edit_object(request: &EditRequest, _progress: &dyn Progress) -> Result<EditReport> {
    Err(Error::request(format!(
        "{}: this build cannot edit objects in stores (tensorfile-ops' feature `remote`)",
        request.file.display()
    )))
}

/// [`edit`] of a local file.
fn edit_here(request: &EditRequest, progress: &dyn Progress) -> Result<EditReport> {
    let edit = Edit::default()
        .with_set(request.set.clone().into_iter().collect())
        .with_unset(request.unset.clone())
        .with_rename(request.rename.clone().into_iter().collect())
        .with_rewrite(request.rewrite)
        .with_sync(request.sync)
        .with_max_header_len(request.max_header_len);
    let done = tensorfile_core::edit::edit(&request.file, &edit, progress)?;
    Ok(EditReport {
        align: done.align,
        bytes: done.bytes,
        file: request.file.clone(),
        header_len: done.header_len,
        in_place: done.in_place,
        reason: done.rewritten_because,
        tensors: done.tensors,
    })
}
