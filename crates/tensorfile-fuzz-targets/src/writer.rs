//! The writer's round trip: arbitrary tensors and metadata, serialized,
//! read back equal; and the bytes are canonical (writing what was read
//! gives the same bytes).

use std::collections::HashSet;

use tensorfile::{serialize_with, Metadata, ReadOptions, SafeTensors, TensorRef, WriteOptions};
use tensorfile_core::writer::Align;

use crate::input::{pattern, Input};

/// Most tensors, metadata entries and bytes per tensor the target builds.
const MAX_TENSORS: usize = 8;
const MAX_META: usize = 4;
const MAX_BYTES: u64 = 1024;

/// Tensors (names, dtypes, shapes and bytes from the input, a zero
/// dimension sometimes beside a huge one) and metadata: the writer refuses
/// exactly the sets it must (a repeated name, `__metadata__`, a sub-byte
/// count that is no whole bytes), and what it writes reads back equal and
/// writes again to the same bytes.
pub fn writer(data: &[u8]) {
    let mut input = Input::new(data);
    let align = input.pick(&[Align::Canonical, Align::Bytes64, Align::Bytes4096]);
    let count = input.below(MAX_TENSORS + 1);
    let mut specs = Vec::new();
    for _ in 0..count {
        let name = input.string(12);
        let dtype = input.dtype();
        let ndim = input.below(4);
        let shape: Vec<u64> = (0..ndim).map(|_| input.dim()).collect();
        specs.push((name, dtype, shape, input.byte()));
    }
    let mut metadata = Metadata::new();
    for _ in 0..input.below(MAX_META + 1) {
        let key = input.string(8);
        let value = input.string(16);
        metadata.insert(key, value);
    }
    // What the writer must refuse; the bytes of every other tensor.
    let mut names = HashSet::new();
    let mut refused = false;
    let mut datas = Vec::new();
    for (name, dtype, shape, seed) in &specs {
        refused |= !names.insert(name.as_str()) || name == "__metadata__";
        match dtype.tensor_bytes(shape) {
            Ok(n) if n <= MAX_BYTES => datas.push(pattern(*seed, n as usize)),
            // Too large to build here: skip the input.
            Ok(_) => return,
            Err(_) => {
                refused = true;
                datas.push(Vec::new());
            }
        }
    }
    let tensors: Vec<TensorRef<'_>> = specs
        .iter()
        .zip(&datas)
        .map(|((name, dtype, shape, _), data)| TensorRef {
            name,
            dtype: *dtype,
            shape,
            data,
        })
        .collect();
    let options = WriteOptions::default().with_align(align);
    let meta = (!metadata.is_empty()).then_some(&metadata);
    let bytes = match serialize_with(tensors.iter(), meta, &options) {
        Ok(bytes) => bytes,
        Err(e) => {
            assert!(refused, "refused a valid set: {e}: {specs:?} {metadata:?}");
            return;
        }
    };
    assert!(!refused, "wrote an invalid set: {specs:?}");
    let file = match SafeTensors::from_source(bytes.clone(), &ReadOptions::default()) {
        Ok(file) => file,
        // The header parser refuses some shapes the writer takes (a running
        // product that overflows before a zero dimension): not this
        // target's business, as long as both sides agree on the rest.
        Err(e)
            if matches!(
                e.format(),
                Some(tensorfile::FormatError::ShapeOverflow { .. })
            ) =>
        {
            return
        }
        Err(e) => panic!("what the writer wrote does not read back: {e}: {specs:?}"),
    };
    assert_eq!(file.len(), tensors.len());
    for t in &tensors {
        let back = file
            .tensor(t.name)
            .unwrap_or_else(|e| panic!("{:?} is missing: {e}", t.name));
        assert_eq!(back.dtype(), t.dtype, "{:?}", t.name);
        assert_eq!(back.shape(), t.shape, "{:?}", t.name);
        assert_eq!(back.data(), t.data, "{:?}", t.name);
    }
    assert_eq!(file.metadata(), meta, "metadata");
    let again = serialize_with(file.tensors(), file.metadata(), &options)
        .expect("a file read back writes again");
    assert_eq!(again, bytes, "writing what was read changes the bytes");
}
