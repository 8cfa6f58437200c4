//! `fs_load_pytorch`: a PyTorch checkpoint as an `fs_file`.
//!
//! The checkpoint is loaded by `tensorfile-pytorch` (memory-mapped; no
//! code in it is run). Tensors whose bytes lie in the file as they are
//! point into the map from the start. The others (views with gaps,
//! expansions, deflated records, big-endian data) are gathered on first
//! access, once per rebuilt object (names of one object share it), into
//! buffers the `fs_file` owns until `fs_close`: loading holds none of them.
//! A contiguous view of a deflated record points into the record's
//! inflated bytes, which are inflated once for all its views.

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::OnceLock;

use tensorfile_core::Metadata;
use tensorfile_pytorch::{Checkpoint, TensorData};

use crate::args::c_path;
use crate::error::{guard, Failure};
use crate::reader::{fs_file, into_handle, Part, Storage};

/// What a gathered tensor's pointer points into.
enum Kept {
    /// The checkpoint's map (a view with no gaps that was not stored as is,
    /// such as one with only size-1 dimensions around a block).
    Mapped(*const u8),
    /// A buffer of its own, or an inflated storage's bytes.
    Data(TensorData<'static>),
}

impl Kept {
    fn ptr(&self) -> *const u8 {
        match self {
            Kept::Mapped(p) => *p,
            Kept::Data(d) => d.as_ptr(),
        }
    }
}

/// What keeps a checkpoint's tensor bytes alive.
pub(crate) struct Loaded {
    /// Per lazy tensor (file order), the index of its rebuilt object in
    /// `kept`.
    object_of: Vec<Option<usize>>,
    /// Each rebuilt object's bytes, once gathered (or why they could not be).
    kept: Vec<OnceLock<Result<Kept, Failure>>>,
    checkpoint: Checkpoint,
}

impl crate::reader::Lazy for Loaded {
    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// The data of lazy tensor `index`: gathered now if its object's is
    /// not yet. Called at most once per tensor (behind its `OnceLock`).
    fn data(&self, index: usize) -> Result<*const u8, Failure> {
        let missing = || Failure::new(crate::error::TL_EFORMAT, "no such lazy tensor");
        let object = self
            .object_of
            .get(index)
            .copied()
            .flatten()
            .ok_or_else(missing)?;
        let slot = self.kept.get(object).ok_or_else(missing)?;
        let kept = slot.get_or_init(|| {
            let t = self.checkpoint.tensor_at(index).ok_or_else(missing)?;
            Ok(match t.data()?.detach() {
                Ok(data) => Kept::Data(data),
                Err(borrowed) => Kept::Mapped(borrowed.as_ptr()),
            })
        });
        kept.as_ref().map(Kept::ptr).map_err(Failure::clone)
    }
}

fn load(path: &std::path::Path) -> Result<fs_file, Failure> {
    let checkpoint = Checkpoint::open(path)?;
    let mut objects: HashMap<usize, usize> = HashMap::new();
    let mut object_of = Vec::with_capacity(checkpoint.len());
    let mut data = Vec::with_capacity(checkpoint.len());
    for t in checkpoint.tensors() {
        if t.is_zero_copy() {
            // Contiguous and stored as is: borrowed from the map, no copy.
            let bytes = t.data()?.detach().err().ok_or_else(|| {
                Failure::new(
                    crate::error::TL_EFORMAT,
                    format!("tensor {:?}: not in the map", t.name()),
                )
            })?;
            data.push(Some(bytes.as_ptr()));
            object_of.push(None);
        } else {
            let n = objects.len();
            object_of.push(Some(*objects.entry(t.object_index()).or_insert(n)));
            data.push(None);
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
    let kept = (0..objects.len()).map(|_| OnceLock::new()).collect();
    Ok(file.with_storage(Storage::Lazy(Box::new(Loaded {
        object_of,
        kept,
        checkpoint,
    }))))
}

/// Loads a PyTorch checkpoint (`torch.save`: the zip format and the legacy
/// one, `.pt`, `.pth`, `pytorch_model.bin`) without running any code in
/// it. Tensors are named by their path in the saved object
/// (`model.layers.0.weight`) and listed in ascending byte order of their
/// names; each `data` holds the C-order little-endian bytes. Stored
/// tensors point into the mapped file (torch.save aligns records to 64
/// bytes). The others (views with gaps, expansions, deflated or big-endian
/// records) are gathered on first access (`fs_get_tensor`,
/// `fs_get_tensor_at`), once, into buffers of `malloc` alignment that live
/// until `fs_close`: loading itself gathers nothing, and a first access may
/// fail (NULL with the codes below). The metadata holds the checkpoint's
/// non-tensor values (numbers, strings) rendered as text, under their
/// flattened names.
///
/// The loader's budgets apply, with their defaults: the pickle
/// interpreter holds at most 256 MiB; expanded views (larger than their
/// storage) total at most 1 GiB, as does each one; deflated records hold at
/// most 4 GiB inflated at once.
///
/// Returns NULL on failure: `TL_EUNSUPPORTED` (a pickle global that is not
/// allowed, a pickle or checkpoint over the loader's limits or budgets,
/// TorchScript or tar archives, zip features not supported, tensors
/// safetensors cannot hold such as complex128 or conjugate-bit ones),
/// `TL_EFORMAT` (a malformed archive, pickle, storage or view), `TL_EIO`,
/// `TL_ENOMEM`, `TL_EINVAL` (NULL or empty `path`).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::fs_get_tensor_at;

    #[test]
    fn gathered_tensors_are_made_on_first_access_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("expansions.pt");
        // Three expanded views, gathered from a 256-byte storage.
        std::fs::write(&path, crate::hostile::expansions(3, 1000)).unwrap();
        let file = load(&path).unwrap();
        let Storage::Lazy(lazy) = file.storage() else {
            panic!("not a checkpoint")
        };
        let loaded = lazy.as_any().downcast_ref::<Loaded>().unwrap();
        assert_eq!(loaded.kept.len(), 3);
        assert!(
            loaded.kept.iter().all(|k| k.get().is_none()),
            "nothing at load"
        );
        // SAFETY: a live handle.
        let t = unsafe { fs_get_tensor_at(&file, 1) };
        assert!(!t.is_null());
        let made: Vec<bool> = loaded.kept.iter().map(|k| k.get().is_some()).collect();
        assert_eq!(made, [false, true, false]);
        // SAFETY: the tensor lives until the file is dropped.
        let t = unsafe { &*t };
        assert_eq!(t.nbytes, 256_000);
        // SAFETY: `data` holds `nbytes` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), t.nbytes) };
        assert!(bytes
            .chunks(256)
            .all(|row| row.iter().copied().eq(0..=255u8)));
        // SAFETY: a live handle.
        assert_eq!(
            unsafe { fs_get_tensor_at(&file, 1) },
            std::ptr::from_ref(t).cast_mut()
        );
    }
}
