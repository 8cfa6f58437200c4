//! Generated input files: header-heavy files with many tiny tensors, and
//! large files with a few hundred big tensors. Written by hand (JSON text
//! and bytes) so the inputs do not depend on either implementation under
//! test.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use tensorfile_testkit::Rng;

/// One tensor to generate.
pub struct Spec {
    /// Tensor name.
    pub name: String,
    /// Dtype as spelled in the file.
    pub dtype: &'static str,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Byte length (dtype size x element count).
    pub nbytes: u64,
}

/// The parts of a transformer layer, named as Mistral's own checkpoints
/// name them (`layers.N.feed_forward.w1.weight`), with a dtype, a tiny
/// shape and its byte length: names and variety are realistic, the data is
/// not (only the header should matter). Hugging Face's longer names
/// (`model.layers.N.mlp.up_proj.weight`) would put a 1M-tensor header over
/// the 100,000,000-byte cap that both implementations enforce.
const LAYER_PARTS: [(&str, &str, &[u64], u64); 10] = [
    ("attention.wq.weight", "BF16", &[2, 2], 8),
    ("attention.wk.weight", "BF16", &[2, 2], 8),
    ("attention.wv.weight", "F16", &[4], 8),
    ("attention.wo.weight", "BF16", &[2, 2], 8),
    ("feed_forward.w1.weight", "F32", &[2], 8),
    ("feed_forward.w2.weight", "F32", &[2], 8),
    ("feed_forward.w3.weight", "F8_E4M3", &[2, 4], 8),
    ("feed_forward.w1.qscale", "U8", &[3], 3),
    ("attention_norm.weight", "F32", &[1], 4),
    ("ffn_norm.steps", "I64", &[], 8),
];

/// `n` tiny tensors named like a transformer's (`layers.N.attention.wq.weight`).
pub fn many_small(n: usize) -> Vec<Spec> {
    (0..n)
        .map(|i| {
            let (part, dtype, shape, nbytes) = LAYER_PARTS[i % LAYER_PARTS.len()];
            Spec {
                name: format!("layers.{}.{part}", i / LAYER_PARTS.len()),
                dtype,
                shape: shape.to_vec(),
                nbytes,
            }
        })
        .collect()
}

/// `count` large F32/BF16 matrices of 4 KiB rows adding up to `total`
/// bytes (rounded down to whole rows); every tensor is a multiple of 8
/// bytes long.
pub fn few_large(count: usize, total: u64) -> Vec<Spec> {
    const ROW: u64 = 4096;
    let rows = total / ROW;
    let count = count.max(1) as u64;
    let each = rows / count;
    (0..count)
        .map(|i| {
            let r = if i + 1 == count {
                rows - each * (count - 1)
            } else {
                each
            };
            let (dtype, cols) = if i % 2 == 0 {
                ("F32", ROW / 4)
            } else {
                ("BF16", ROW / 2)
            };
            Spec {
                name: format!("model.layers.{}.mlp.up_proj.weight", i),
                dtype,
                shape: vec![r, cols],
                nbytes: r * ROW,
            }
        })
        .collect()
}

/// The header JSON for `specs` laid out in order, space-padded to a
/// multiple of 8 bytes.
pub fn header_text(specs: &[Spec]) -> String {
    let mut s = String::with_capacity(specs.len() * 100 + 64);
    s.push_str(r#"{"__metadata__":{"format":"pt"}"#);
    let mut offset = 0u64;
    for t in specs {
        let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        let _ = write!(
            s,
            r#","{}":{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}}"#,
            t.name,
            t.dtype,
            shape.join(","),
            offset,
            offset + t.nbytes
        );
        offset += t.nbytes;
    }
    s.push('}');
    while !s.len().is_multiple_of(8) {
        s.push(' ');
    }
    s
}

/// The header of one file of a single U8 tensor `w` of 8 bytes whose entry
/// also holds `fields` unknown fields (`"u0":0,"u1":1,...`, values 0 to 9),
/// between its `shape` and its `data_offsets`; space-padded to a multiple
/// of 8. At 7.5 million fields it is about 96 MB: the parser's path for
/// unknown fields, against [`many_small`]'s of the same size.
pub fn unknown_fields_header(fields: usize) -> String {
    let mut s = String::with_capacity(fields * 13 + 128);
    s.push_str(r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"U8","shape":[8],"#);
    for i in 0..fields {
        let _ = write!(s, r#""u{i}":{},"#, i % 10);
    }
    s.push_str(r#""data_offsets":[0,8]}}"#);
    while !s.len().is_multiple_of(8) {
        s.push(' ');
    }
    s
}

/// Writes a file of this header text and `data_len` bytes of
/// pseudo-random data; returns its header length N.
pub fn write_header_file(path: &Path, header: &str, data_len: u64) -> io::Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut left = data_len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        fill(&mut chunk[..n], &mut rng);
        out.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(header.len() as u64)
}

/// Writes a file of `specs` with pseudo-random data (not sparse, not
/// compressible) and returns its header length N.
pub fn write_file(path: &Path, specs: &[Spec]) -> io::Result<u64> {
    let data_len: u64 = specs.iter().map(|t| t.nbytes).sum();
    write_header_file(path, &header_text(specs), data_len)
}

/// Fills `buf` from the workspace's one deterministic generator.
fn fill(buf: &mut [u8], rng: &mut Rng) {
    for chunk in buf.chunks_mut(8) {
        let bytes = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// The sum of the little-endian u64 words of `data` (a trailing partial
/// word is ignored): touches every byte, cheap per byte.
pub fn sum_words(data: &[u8]) -> u64 {
    data.chunks_exact(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .fold(0u64, u64::wrapping_add)
}

/// N, the header length of a file's bytes (0 if shorter than 8 bytes).
pub fn header_len(file: &[u8]) -> u64 {
    let mut n = [0u8; 8];
    if let Some(prefix) = file.get(..8) {
        n.copy_from_slice(prefix);
    }
    u64::from_le_bytes(n)
}
