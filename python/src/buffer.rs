//! Tensor bytes handed to Python: a [`Buffer`] owns (or shares) the memory
//! and describes it through the numpy array interface, so `numpy.asarray`
//! makes an array viewing it with the buffer as its `base`: the memory lives
//! as long as any array over it does.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use tensorfile::Dtype;
use tensorfile_core::read::{AlignedBuffer, TensorBytes};
use tensorfile_core::PrivateMap;

/// Where a buffer's bytes live.
pub enum Memory {
    /// A private copy-on-write map of the tensor's range of the file:
    /// zero-copy and writeable; writes never reach the file.
    Mapped(PrivateMap),
    /// Memory of its own (read with `pread`, sliced, cast, copied).
    Owned(Vec<u8>),
    /// Memory the library allocated for this one tensor and read it into
    /// with a read plan (`load_file`, `load`, `get_tensors`, `prefetch`):
    /// 64-byte aligned, huge pages from 2 MiB where they help, freed when its last array
    /// goes (each tensor's own, so one kept does not keep the others).
    Aligned(AlignedBuffer),
}

/// Bytes of one tensor (or slice) with their numpy description.
///
/// `numpy.asarray(buffer)` is an array over these bytes, without a copy,
/// whose `base` is the buffer. The arrays are writeable: the memory is this
/// process's own, or a private copy-on-write map.
#[pyclass(frozen, module = "tensorfile._native")]
pub struct Buffer {
    memory: Memory,
    /// The first byte (an address inside `memory`).
    ptr: usize,
    len: usize,
    /// The numpy type string of the carrier dtype.
    typestr: &'static str,
    /// The shape in carrier elements.
    shape: Vec<u64>,
    /// The safetensors dtype.
    dtype: Dtype,
}

/// The numpy dtype that carries `dtype`'s bytes (itself where numpy has it,
/// an unsigned integer of its width where it does not, for the Python layer
/// to view as ml_dtypes' or torch's type), and the shape in that carrier.
/// F4 packs two values in a byte: its carrier is a byte per pair, the last
/// dimension halved (torch's `float4_e2m1fn_x2`); the F6 types and an F4
/// tensor of odd last dimension come as their bytes, flat.
pub fn carrier(dtype: Dtype, shape: &[u64], len: usize) -> (&'static str, Vec<u64>) {
    if let Some(typestr) = dtype.numpy_typestr() {
        return (typestr, shape.to_vec());
    }
    let typestr = match dtype {
        Dtype::F4 => {
            return match shape.split_last() {
                Some((last, outer)) if last % 2 == 0 => {
                    let mut packed = outer.to_vec();
                    packed.push(last / 2);
                    ("|u1", packed)
                }
                _ => ("|u1", vec![len as u64]),
            }
        }
        _ if dtype.is_sub_byte() => return ("|u1", vec![len as u64]),
        _ => match dtype.size() {
            Some(2) => "<u2",
            _ => "|u1",
        },
    };
    (typestr, shape.to_vec())
}

impl Buffer {
    /// A buffer over `len` bytes at `ptr`, which `memory` keeps alive.
    pub fn new(memory: Memory, ptr: *mut u8, len: usize, dtype: Dtype, shape: &[u64]) -> Buffer {
        let (typestr, shape) = carrier(dtype, shape, len);
        Buffer {
            memory,
            ptr: ptr as usize,
            len,
            typestr,
            shape,
            dtype,
        }
    }

    /// A buffer owning `bytes`.
    pub fn owned(mut bytes: Vec<u8>, dtype: Dtype, shape: &[u64]) -> Buffer {
        let len = bytes.len();
        let ptr = if len == 0 {
            std::ptr::NonNull::<u64>::dangling().as_ptr().cast()
        } else {
            bytes.as_mut_ptr()
        };
        Buffer::new(Memory::Owned(bytes), ptr, len, dtype, shape)
    }

    /// A buffer over a tensor a read plan read, in the memory it read it
    /// into.
    pub fn read(tensor: TensorBytes) -> Buffer {
        let TensorBytes {
            dtype,
            shape,
            mut data,
            ..
        } = tensor;
        let len = data.len();
        let ptr = if len == 0 {
            std::ptr::NonNull::<u64>::dangling().as_ptr().cast()
        } else {
            data.as_mut_ptr()
        };
        Buffer::new(Memory::Aligned(data), ptr, len, dtype, &shape)
    }

    /// A buffer over a private map of the tensor's bytes.
    pub fn mapped(mut map: PrivateMap, dtype: Dtype, shape: &[u64]) -> Buffer {
        let ptr = map.as_mut_ptr();
        let len = map.len();
        Buffer::new(Memory::Mapped(map), ptr, len, dtype, shape)
    }
}

#[pymethods]
impl Buffer {
    /// The numpy array interface (version 3): the data's address, writeable.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", self.typestr)?;
        d.set_item("data", (self.ptr, false))?;
        d.set_item("version", 3)?;
        Ok(d)
    }

    /// The safetensors dtype of the bytes (`"BF16"`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    /// The address of the first byte.
    #[getter]
    fn address(&self) -> usize {
        self.ptr
    }

    /// Whether the bytes are a (private, copy-on-write) map of the file
    /// rather than memory of their own.
    #[getter]
    fn is_mapped(&self) -> bool {
        matches!(self.memory, Memory::Mapped(_))
    }

    /// Whether the bytes were read by a read plan (a whole load, a
    /// prefetch) into memory the library allocated for this tensor alone.
    #[getter]
    fn is_loaded(&self) -> bool {
        matches!(self.memory, Memory::Aligned(_))
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __repr__(&self) -> String {
        format!(
            "<tensorfile Buffer {} {:?} {} bytes at {:#x}{}>",
            self.dtype,
            self.shape,
            self.len,
            self.ptr,
            if self.is_mapped() { ", mapped" } else { "" }
        )
    }
}
