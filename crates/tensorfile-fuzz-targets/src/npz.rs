//! The numpy reader on arbitrary bytes.

use tensorfile::npz::{NpzFile, NpzLimits};
use tensorfile::{Dtype, TensorData};

/// The `.npy` / `.npz` reader: headers and the zip directory under small
/// limits, then for accepted files every array read in one pass and by
/// range, as it is and with opaque arrays taken as BF16 and as F4 (the
/// packing path). Errors, never panics; what is read agrees with itself.
pub fn npz(data: &[u8]) {
    let limits = NpzLimits {
        max_header_len: 4096,
        max_reorder_bytes: 1 << 20,
        ..NpzLimits::default()
    };
    let Ok(file) = NpzFile::from_source(data.to_vec(), "x", &limits) else {
        return;
    };
    for opaque in [None, Some(Dtype::BF16), Some(Dtype::F4)] {
        let Ok(tensors) = file.tensors(opaque) else {
            continue;
        };
        for t in tensors {
            let len = t.byte_len().min(1 << 16) as usize;
            let mut whole = vec![0u8; len];
            let produced = t.produce(&mut |at, piece| {
                let end = (at as usize).saturating_add(piece.len());
                assert!(end <= t.byte_len() as usize, "a piece past the end");
                if let Some(dst) = whole.get_mut(at as usize..end.min(len)) {
                    dst.copy_from_slice(&piece[..dst.len()]);
                }
                Ok(())
            });
            if len > 3 {
                let mut mid = vec![0u8; len - 3];
                if t.read_at(1, &mut mid).is_ok() && produced.is_ok() {
                    assert_eq!(mid, whole[1..len - 2], "read_at and produce disagree");
                }
            }
        }
    }
}
