//! The readers of whole formats on arbitrary bytes: the safetensors header,
//! the pickle interpreter, the zip reader and the PyTorch loader.

use tensorfile::{Decode, ReadOptions, SafeTensors, SliceArg};
use tensorfile_pytorch::{Checkpoint, LoadOptions};
use tensorfile_zip::ZipIndex;

/// The safetensors reader: the header parser (rules 1 to 5) and, for
/// accepted files, typed views and slicing. Errors, never panics.
pub fn header(data: &[u8]) {
    let _ = tensorfile::Header::parse(data, data.len() as u64 / 2);
    if let Ok(file) = SafeTensors::from_source(data.to_vec(), &ReadOptions::default()) {
        for t in file.tensors() {
            let _ = t.to_f32_vec();
            if let Ok(s) = t.slice(&[SliceArg::range(0, 1), SliceArg::Index(-1)]) {
                assert_eq!(s.to_vec().len() as u64, s.nbytes());
            }
        }
    }
}

/// The restricted pickle interpreter: errors, never panics.
pub fn pickle(data: &[u8]) {
    let _ = tensorfile_pytorch::fuzzing::pickle(data);
}

/// The zip reader: index, then read every entry (at most 64 MiB each).
pub fn zip(data: &[u8]) {
    if let Ok(index) = ZipIndex::parse(data) {
        for entry in index.entries() {
            let _ = entry.read(&data, 64 << 20);
        }
    }
}

/// The whole PyTorch loader: load (expansion capped at 1 MiB), then read
/// every tensor, whole and in pieces.
pub fn checkpoint(data: &[u8]) {
    let options = LoadOptions::default().with_max_expanded_bytes(1 << 20);
    if let Ok(ckpt) = Checkpoint::from_bytes(data.to_vec(), &options) {
        for t in ckpt.tensors() {
            if let Ok(whole) = t.bytes() {
                let mut pieces = Vec::new();
                let made = t.for_each_piece(4096, |p| -> Result<(), tensorfile_pytorch::Error> {
                    pieces.extend_from_slice(p);
                    Ok(())
                });
                assert!(made.is_ok() && pieces == *whole, "{:?}", t.name());
            }
        }
    }
}
