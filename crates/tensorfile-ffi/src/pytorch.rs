//! `fs_load_pytorch`: a PyTorch checkpoint as an `fs_file`.
//!
//! The checkpoint is loaded by `tensorfile-pytorch` (memory-mapped; no
//! code in it is run). Tensors whose bytes lie in the file as they are
//! point into the map; the others (views with gaps, deflated records,
//! big-endian data) are gathered into buffers the `fs_file` owns. All of it
//! happens at load, so the `fs_file` never changes afterwards.

use std::borrow::Cow;
use std::ffi::c_char;

use tensorfile_core::Metadata;
use tensorfile_pytorch::Checkpoint;

use crate::args::c_path;
use crate::error::{guard, Failure};
use crate::reader::{fs_file, into_handle, Part, Storage};

/// What keeps a checkpoint's tensor bytes alive.
pub(crate) struct Loaded {
    /// The gathered tensors' buffers (the others borrow from `_checkpoint`).
    _gathered: Vec<Vec<u8>>,
    _checkpoint: Checkpoint,
}

fn load(path: &std::path::Path) -> Result<fs_file, Failure> {
    let checkpoint = Checkpoint::open(path)?;
    let mut gathered = Vec::new();
    let mut data = Vec::with_capacity(checkpoint.len());
    for t in checkpoint.tensors() {
        match t.bytes()? {
            Cow::Borrowed(b) => data.push(b.as_ptr()),
            Cow::Owned(v) => {
                // The Vec's heap buffer stays put when the Vec moves.
                data.push(v.as_ptr());
                gathered.push(v);
            }
        }
    }
    let parts: Vec<Part<'_>> = checkpoint
        .tensors()
        .zip(&data)
        .map(|(t, &ptr)| Part {
            name: t.name(),
            dtype: t.dtype(),
            shape: t.shape(),
            data: ptr,
            nbytes: t.nbytes(),
        })
        .collect();
    // Non-tensor values (an epoch, a learning rate) under their flattened
    // names, as `tensorfile convert --keep-values` stores them.
    let metadata: Metadata = checkpoint.values().iter().cloned().collect();
    let file = fs_file::build(&parts, Some(&metadata))?;
    drop(parts);
    Ok(file.with_storage(Storage::Other(Box::new(Loaded {
        _gathered: gathered,
        _checkpoint: checkpoint,
    }))))
}

/// Loads a PyTorch checkpoint (`torch.save`: the zip format and the legacy
/// one, `.pt`, `.pth`, `pytorch_model.bin`) without running any code in
/// it. Tensors are named by their path in the saved object
/// (`model.layers.0.weight`) and listed in ascending byte order of their
/// names; each `data` holds the C-order little-endian bytes. Stored
/// tensors point into the mapped file (torch.save aligns records to 64
/// bytes), gathered ones (views, deflated or big-endian records) into
/// buffers of `malloc` alignment. The metadata holds the checkpoint's
/// non-tensor values (numbers, strings) rendered as text, under their
/// flattened names.
///
/// Returns NULL on failure: `TL_EUNSUPPORTED` (a pickle global that is not
/// allowed, a pickle over the loader's limits, TorchScript or tar archives,
/// zip features not supported, tensors safetensors cannot hold such as
/// complex128 or conjugate-bit ones), `TL_EFORMAT` (a malformed archive,
/// pickle, storage or view), `TL_EIO`, `TL_EINVAL` (NULL or empty `path`).
///
/// Ownership: the caller owns the handle and frees it with `fs_close`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fs_load_pytorch(path: *const c_char) -> *mut fs_file {
    guard(|| {
        // SAFETY: by the caller's contract.
        let path = unsafe { c_path(path) }?;
        load(path).map(into_handle)
    })
}
