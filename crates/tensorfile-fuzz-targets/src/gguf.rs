//! The GGUF reader on arbitrary bytes.

use tensorfile::gguf::{GgufFile, ReadLimits};
use tensorfile::TensorData;

/// The GGUF reader: the header, metadata and tensor infos under small
/// limits (so that hostile counts hit them), and for accepted files every
/// tensor's bytes, raw and decoded, from the start and from an odd offset.
/// Errors, never panics.
pub fn gguf(data: &[u8]) {
    let limits = ReadLimits {
        max_kv: 64,
        max_tensors: 64,
        max_array_len: 4096,
        max_string_len: 4096,
        max_depth: 4,
        max_memory: 1 << 20,
    };
    let Ok(file) = GgufFile::from_source(data.to_vec(), &limits) else {
        return;
    };
    for t in file.header().tensors() {
        let mut raw = vec![0u8; t.byte_len.min(1 << 16) as usize];
        let _ = file.read_raw(t, 0, &mut raw);
        if let Ok(d) = file.tensor(&t.name) {
            let len = d.byte_len().min(1 << 16) as usize;
            let mut buf = vec![0u8; len];
            let _ = d.read_at(0, &mut buf);
            if len > 3 {
                let _ = d.read_at(1, &mut buf[..len - 3]);
            }
        }
    }
}
