//! The GGUF <-> Hugging Face mappings (and GGUF -> one safetensors or npz
//! file, as it is) on models built from the input, with
//! shapes that hold zero dimensions beside huge ones: [`gguf_to_hf`] of a
//! GGUF file, and [`hf_to_gguf`] of a Hugging Face directory holding the
//! same tensors under their Hugging Face names.

use std::path::{Path, PathBuf};

use tensorfile::gguf::{
    gguf_to_hf, hf_to_gguf, FromHfOptions, GgmlType, GgufFile, ReadLimits, ToHfOptions,
};
use tensorfile::gguf::{hf_tensor_name as hf_name, Arch};
use tensorfile::Dtype;

use crate::input::Input;
use tensorfile_testkit::{gguf_file, GgufValue};

/// Dimensions a tensor may have: small ones, and huge ones that only an
/// empty tensor (a zero beside them) can hold.
const DIMS: [u64; 14] = [
    0,
    1,
    2,
    3,
    4,
    8,
    32,
    64,
    256,
    1 << 28,
    1 << 40,
    1 << 62,
    (1 << 63) - 1,
    (1 << 40) + 2,
];

/// GGUF tensor names the architectures map.
const NAMES: [&str; 8] = [
    "token_embd.weight",
    "blk.0.attn_q.weight",
    "blk.0.attn_k.weight",
    "blk.0.attn_q.bias",
    "blk.0.attn_norm.weight",
    "blk.0.ffn_down.weight",
    "blk.0.ffn_up.weight",
    "output.weight",
];

const TYPES: [GgmlType; 6] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
];

/// Bytes of data one tensor may have (larger ones are declared but left
/// short, for the reader to refuse).
const MAX_TENSOR_BYTES: u64 = 1 << 14;

/// Input: the architecture, head counts, flags (bit 0: keep quantized
/// weights; bit 1: decode to F32; bit 2: skip `feed_forward_length`), the
/// type to convert back to, then up to 4 tensors, each a name, up to 3
/// dimensions (GGUF order, picked from a table of sizes from 0 to 2^63 - 1) and a type; tensor data
/// are zeros. Both conversions error or succeed, never panic; a failed
/// GGUF -> HF conversion leaves no directory behind, a complete one writes
/// each tensor with its shape.
pub fn gguf_convert(data: &[u8]) {
    let mut input = Input::new(data);
    let arch = input.pick(&Arch::ALL);
    let n_head = 1 + u32::from(input.byte() % 4);
    let n_head_kv = 1 + u32::from(input.byte() % 4);
    let flags = input.byte();
    let back = input.pick(&tensorfile::gguf::HF_TO_GGUF_TYPES);
    let count = 1 + input.below(4);
    let mut tensors: Vec<(String, Vec<u64>, GgmlType)> = Vec::new();
    for _ in 0..count {
        let name = input.pick(&NAMES).to_string();
        let n_dims = 1 + input.below(3);
        let dims: Vec<u64> = (0..n_dims).map(|_| input.pick(&DIMS)).collect();
        let t = input.pick(&TYPES);
        if tensors.iter().all(|(n, _, _)| *n != name) {
            tensors.push((name, dims, t));
        }
    }
    let mut kv: Vec<(String, Kv)> = vec![
        (
            "general.architecture".into(),
            Kv::Str(arch.gguf_name().into()),
        ),
        (format!("{arch}.attention.head_count"), Kv::U32(n_head)),
        (
            format!("{arch}.attention.head_count_kv"),
            Kv::U32(n_head_kv),
        ),
        (format!("{arch}.embedding_length"), Kv::U32(4)),
        (format!("{arch}.block_count"), Kv::U32(1)),
        (format!("{arch}.context_length"), Kv::U32(16)),
    ];
    if flags & 4 == 0 {
        kv.push((format!("{arch}.feed_forward_length"), Kv::U32(8)));
    }
    let bytes = gguf_bytes(&kv, &tensors);
    let dir = dir();

    // GGUF -> HF: all or nothing.
    let out = dir.join("hf");
    let _ = std::fs::remove_dir_all(&out);
    let limits = ReadLimits::default();
    if let Ok(file) = GgufFile::from_source(bytes, &limits) {
        let dtype = if flags & 2 != 0 {
            Dtype::F32
        } else {
            Dtype::BF16
        };
        let opts = ToHfOptions::default()
            .with_keep_quant(flags & 1 != 0)
            .with_dtype(dtype)
            .with_write(tensorfile::WriteOptions::default().with_sync(false));
        match gguf_to_hf(&file, &out, &opts) {
            Err(_) => assert!(!out.exists(), "a failed conversion left {out:?}"),
            Ok(summary) => {
                let st = tensorfile::SafeTensors::open(out.join("model.safetensors"))
                    .expect("the weights written read back");
                for info in file.header().tensors() {
                    let name = hf_name(arch, &info.name).expect("converted, so named");
                    if summary.kept.contains_key(&name) {
                        continue;
                    }
                    let t = st.tensor(&name).expect("every tensor written");
                    assert_eq!(t.shape(), info.shape(), "{name}");
                }
                let back_path = dir.join("back.gguf");
                let opts = FromHfOptions::default()
                    .with_ggml_type(back)
                    .with_sync(false);
                let _ = hf_to_gguf(&out, &back_path, &opts);
            }
        }
        // GGUF -> one safetensors / npz file, as it is: all or nothing,
        // every tensor under its GGUF name and row-major shape.
        let raw = dir.join("raw.safetensors");
        let _ = std::fs::remove_file(&raw);
        let write = tensorfile::WriteOptions::default().with_sync(false);
        match tensorfile::gguf::gguf_to_safetensors(&file, &raw, None, flags & 1 != 0, &write) {
            Err(_) => assert!(!raw.exists(), "a failed conversion left {raw:?}"),
            Ok(summary) => {
                let st = tensorfile::SafeTensors::open(&raw).expect("the file written reads back");
                for info in file.header().tensors() {
                    let t = st.tensor(&info.name).expect("every tensor written");
                    if !summary.kept.contains(&info.name) {
                        assert_eq!(t.shape(), info.shape(), "{}", info.name);
                    }
                }
            }
        }
        let npz = dir.join("raw.npz");
        let _ = std::fs::remove_file(&npz);
        let opts = tensorfile::npz::NpzWriteOptions::default().with_sync(false);
        if tensorfile::gguf::gguf_to_npz(&file, &npz, &opts).is_err() {
            assert!(!npz.exists(), "a failed conversion left {npz:?}");
        }
    }

    // HF -> GGUF of the same tensors, as a Hugging Face directory.
    let hf = dir.join("in");
    let _ = std::fs::create_dir_all(&hf);
    write_hf(&hf, arch, n_head, n_head_kv, &tensors);
    let opts = FromHfOptions::default()
        .with_ggml_type(back)
        .with_sync(false);
    let _ = hf_to_gguf(&hf, &dir.join("out.gguf"), &opts);
}

/// A metadata value.
enum Kv {
    U32(u32),
    Str(String),
}

/// The bytes a tensor of `dims` and `t` needs, if small enough to hold.
fn data_len(dims: &[u64], t: GgmlType) -> Option<u64> {
    let numel = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?;
    t.bytes_for(numel).filter(|&b| b <= MAX_TENSOR_BYTES)
}

/// A GGUF v3 file of `kv` and `tensors` (zeros).
fn gguf_bytes(kv: &[(String, Kv)], tensors: &[(String, Vec<u64>, GgmlType)]) -> Vec<u8> {
    let kv: Vec<(&str, GgufValue<'_>)> = kv
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Kv::U32(n) => GgufValue::U32(*n),
                Kv::Str(s) => GgufValue::Str(s),
            };
            (k.as_str(), v)
        })
        .collect();
    let tensors: Vec<_> = tensors
        .iter()
        .map(|(name, dims, t)| {
            let len = data_len(dims, *t).unwrap_or(0) as usize;
            (name.as_str(), dims.clone(), t.id(), vec![0u8; len])
        })
        .collect();
    gguf_file(&kv, &tensors)
}

/// A Hugging Face directory of `tensors` (F32 zeros, logical shapes, HF
/// names) with a config.json.
fn write_hf(
    dir: &Path,
    arch: Arch,
    n_head: u32,
    n_head_kv: u32,
    tensors: &[(String, Vec<u64>, GgmlType)],
) {
    let config = serde_json::json!({
        "model_type": arch.model_type(),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_head_kv,
        "hidden_size": 4,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "max_position_embeddings": 16,
        "rms_norm_eps": 1e-5,
        "vocab_size": 4,
    });
    let _ = std::fs::write(dir.join("config.json"), config.to_string());
    let mut header = serde_json::Map::new();
    let mut data = 0u64;
    for (name, dims, _) in tensors {
        let Some(name) = hf_name(arch, name) else {
            continue;
        };
        let shape: Vec<u64> = dims.iter().rev().copied().collect();
        let len = data_len(dims, GgmlType::F32).unwrap_or(0);
        header.insert(
            name,
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [data, data + len]}),
        );
        data += len;
    }
    let mut text = serde_json::Value::Object(header).to_string();
    text.push_str(&" ".repeat(text.len().next_multiple_of(8) - text.len()));
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes.resize(bytes.len() + data as usize, 0);
    let _ = std::fs::write(dir.join("model.safetensors"), bytes);
}

/// The process's working directory.
fn dir() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
        .to_path_buf()
}
