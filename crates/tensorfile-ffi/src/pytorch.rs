//! `fs_load_pytorch` and `fs_mmap_pytorch`: a PyTorch checkpoint as an
//! `fs_file`, loaded by `tensorfile-pytorch` (no code in it is run).
//!
//! The two differ as `fs_open` and `fs_mmap` do. `fs_load_pytorch` reads
//! the file with positional reads (the loader's `Checkpoint::open_with`):
//! every tensor is read or gathered on its first access into a buffer the
//! `fs_file` owns, so a file truncated underneath is an error naming it
//! (`TL_EIO`), never a signal. `fs_mmap_pytorch` maps the file read-only:
//! tensors whose bytes lie in the file as they are point into the map from
//! the start (zero-copy, no second copy of every stored tensor), and, like
//! every map, a truncation by another process while it is open makes a
//! later access raise `SIGBUS`. In both, the other tensors (views with
//! gaps, expansions, deflated records, big-endian data) are gathered on
//! first access, once per rebuilt object (names of one object share it):
//! loading holds none of them. A contiguous view of a deflated record
//! points into the record's inflated bytes, which are inflated once for
//! all its views.

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::OnceLock;

use tensorfile_core::Metadata;
use tensorfile_pytorch::{Checkpoint, LoadOptions, TensorBytes};

use crate::args::c_path;
use crate::error::{guard, Failure};
use crate::reader::{fs_file, into_handle, Part, Storage};

/// What a gathered tensor's pointer points into.
enum Kept {
    /// The checkpoint's map (a view with no gaps that was not stored as is,
    /// such as one with only size-1 dimensions around a block).
    Mapped(*const u8),
    /// A buffer of its own, or an inflated storage's bytes.
    Data(TensorBytes<'static>),
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
        // The tables were built from this checkpoint: a miss is a bug.
        let missing = || Failure::internal("no such lazy tensor");
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

/// How `load` reaches the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    /// Positional reads, each tensor on its first access.
    Read,
    /// A read-only memory map, stored tensors borrowed from it.
    Map,
}

fn load(path: &std::path::Path, way: Way) -> Result<fs_file, Failure> {
    let options = LoadOptions::default();
    let checkpoint = match way {
        Way::Read => Checkpoint::open_with(path, &options)?,
        Way::Map => Checkpoint::open_mapped(path, &options)?,
    };
    let mut objects: HashMap<usize, usize> = HashMap::new();
    let mut object_of = Vec::with_capacity(checkpoint.len());
    let mut data = Vec::with_capacity(checkpoint.len());
    for t in checkpoint.tensors() {
        if way == Way::Map && t.is_zero_copy() {
            // Contiguous and stored as is: borrowed from the map, no copy.
            // Zero-copy means borrowed from the map: anything else is a bug.
            let bytes = t.data()?.detach().err().ok_or_else(|| {
                Failure::internal(format_args!("tensor {:?}: not in the map", t.name()))
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
/// it, reading the file with positional reads. Tensors are named by their
/// path in the saved object (`model.layers.0.weight`) and listed in
/// ascending byte order of their names; each `data` holds the C-order
/// little-endian bytes. Every tensor is read (or gathered: views with
/// gaps, expansions, deflated or big-endian records) on its first access
/// (`fs_get_tensor`, `fs_get_tensor_at`), once, into a buffer of `malloc`
/// alignment that lives until `fs_close`: loading itself reads only the
/// archive's directory and pickle, and a first access may fail (NULL with
/// the codes below). The file stays open, never mapped: if another process
/// truncates it meanwhile, a later first access fails with `TL_EIO` and a
/// message naming the file ("changed or truncated while being read"),
/// never a signal. `fs_mmap_pytorch` maps it instead (zero-copy). The
/// metadata holds the checkpoint's non-tensor values (numbers, strings)
/// rendered as text, under their flattened names.
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
        load(path, Way::Read).map(into_handle)
    })
}

/// Loads a PyTorch checkpoint as `fs_load_pytorch` does, from a read-only
/// memory map: tensors stored as they are point into the map from the
/// start (zero-copy; torch.save aligns records to 64 bytes), the others
/// are gathered on first access as there. The file is mapped for the
/// handle's life and must not be modified in place meanwhile: another
/// process truncating it makes a later access raise `SIGBUS`, as for
/// `fs_mmap` (replacing it by rename is safe).
///
/// Returns NULL on failure, with the codes of `fs_load_pytorch`.
///
/// Ownership: the caller owns the handle and frees it with `fs_close`,
/// which unmaps the file.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fs_mmap_pytorch(path: *const c_char) -> *mut fs_file {
    guard(|| {
        // SAFETY: by the caller's contract.
        let path = unsafe { c_path(path) }?;
        load(path, Way::Map).map(into_handle)
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
        let file = load(&path, Way::Map).unwrap();
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

    /// A checkpoint of two 1 MiB F32 tensors stored as they are, each in
    /// its own record.
    fn two_stored(path: &std::path::Path) {
        use crate::hostile::{Record, Storage, Tensor};
        let numel = 1u64 << 18;
        let storages: Vec<Storage> = (0..2)
            .map(|i| Storage {
                key: i.to_string(),
                class: "FloatStorage",
                elem: 4,
                numel,
            })
            .collect();
        let tensors: Vec<Tensor> = ["a", "b"]
            .iter()
            .enumerate()
            .map(|(i, name)| Tensor {
                name: (*name).into(),
                storage: i,
                offset: 0,
                shape: vec![numel],
                strides: vec![1],
            })
            .collect();
        let pickle = crate::hostile::state_dict_pickle(&storages, &tensors);
        let records = (0..2u8)
            .map(|i| Record::stored(&format!("archive/data/{i}"), vec![i + 1; 4 << 18]))
            .collect();
        let bytes = crate::hostile::checkpoint(Record::stored("archive/data.pkl", pickle), records);
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_checkpoint_truncated_after_load_fails_its_next_read_naming_the_file() {
        use crate::error::{fs_last_error, fs_last_error_message, TL_EIO};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.pt");
        two_stored(&path);
        let file = load(&path, Way::Read).unwrap();
        // Nothing is borrowed or read at load: every tensor is lazy.
        let Storage::Lazy(lazy) = file.storage() else {
            panic!("not a checkpoint")
        };
        let loaded = lazy.as_any().downcast_ref::<Loaded>().unwrap();
        assert_eq!(loaded.kept.len(), 2);
        // SAFETY: a live handle.
        let a = unsafe { fs_get_tensor_at(&file, 0) };
        assert!(!a.is_null());
        // Another process cuts the file to its first 64 KiB.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(64 << 10)
            .unwrap();
        // SAFETY: a live handle.
        let b = unsafe { fs_get_tensor_at(&file, 1) };
        assert!(b.is_null());
        assert_eq!(fs_last_error(), TL_EIO);
        // SAFETY: a NUL-terminated string of this thread.
        let message = unsafe { std::ffi::CStr::from_ptr(fs_last_error_message()) };
        let message = message.to_string_lossy();
        assert!(message.contains("cut.pt"), "{message}");
        assert!(message.contains("changed or truncated"), "{message}");
        // What was read before the cut is the file's own buffer, intact.
        // SAFETY: the tensor lives until the file is dropped; `data` holds
        // `nbytes` bytes.
        let a = unsafe { &*a };
        let bytes = unsafe { std::slice::from_raw_parts(a.data.cast::<u8>(), a.nbytes) };
        assert_eq!(a.nbytes, 1 << 20);
        assert!(bytes.iter().all(|&b| b == 1));
    }

    #[test]
    fn the_mapped_way_borrows_stored_tensors_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stored.pt");
        two_stored(&path);
        let mapped = load(&path, Way::Map).unwrap();
        // Both are borrowed from the map at load, none is lazy.
        let Storage::Lazy(lazy) = mapped.storage() else {
            panic!("not a checkpoint")
        };
        let loaded = lazy.as_any().downcast_ref::<Loaded>().unwrap();
        assert!(loaded.kept.is_empty());
        let read = load(&path, Way::Read).unwrap();
        for i in 0..2 {
            // SAFETY: live handles; tensors live until their file is
            // dropped; `data` holds `nbytes` bytes.
            let (m, r) = unsafe { (&*fs_get_tensor_at(&mapped, i), &*fs_get_tensor_at(&read, i)) };
            let (m, r) = unsafe {
                (
                    std::slice::from_raw_parts(m.data.cast::<u8>(), m.nbytes),
                    std::slice::from_raw_parts(r.data.cast::<u8>(), r.nbytes),
                )
            };
            assert!(m == r && m.len() == 1 << 20, "tensor {i}");
        }
    }
}
