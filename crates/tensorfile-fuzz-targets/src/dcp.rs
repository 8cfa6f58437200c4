//! torch DCP checkpoints ([`DcpCheckpoint`]): rank files whose
//! `DCP_SHARDING_INFO` (each piece's offsets in the full tensor) is the
//! fuzzer's text, over pieces of shapes the fuzzer picks. A checkpoint that
//! opens consolidates to a file holding every tensor it declares, each
//! whole; anything else is refused with an error, never a panic, a hang or
//! an allocation the pieces' bytes do not stand for.

use std::path::PathBuf;

use tensorfile::set::DcpCheckpoint;
use tensorfile::{
    serialize, Dtype, Metadata, ReadOptions, SafeTensors, TensorRef, TensorSpec, WriteOptions,
};

use crate::input::Input;

/// Most rank files one input writes.
const MAX_FILES: usize = 4;

/// The first bytes pick the number of rank files, the output files, and
/// each file's two pieces (`a`, F32, and `b`, a dtype of the input's
/// choice, small shapes); the rest, split at 0xFF bytes, are the files'
/// `DCP_SHARDING_INFO` texts in turn.
pub fn dcp(data: &[u8]) {
    let mut input = Input::new(data);
    let files = 1 + input.below(MAX_FILES);
    let outputs = 1 + input.below(2) as u64;
    let mut pieces = Vec::with_capacity(files);
    for _ in 0..files {
        let a: Vec<u64> = (0..1 + input.below(3))
            .map(|_| input.below(4) as u64)
            .collect();
        let b_dtype = input.pick(&[Dtype::U8, Dtype::BF16, Dtype::I64, Dtype::F4]);
        let b: Vec<u64> = (0..input.below(3))
            .map(|_| 2 * input.below(3) as u64)
            .collect();
        pieces.push((a, b_dtype, b));
    }
    let rest = input.rest();
    let mut texts = rest.split(|&b| b == 0xFF);
    let dir = fresh_dir();
    for (r, (a, b_dtype, b)) in pieces.iter().enumerate() {
        let info = String::from_utf8_lossy(texts.next().unwrap_or(b"{}")).into_owned();
        let metadata = Metadata::from([
            ("DCP_SHARDING_INFO".to_string(), info),
            ("DCP_VERSION".to_string(), "1.0".to_string()),
            ("format".to_string(), "pt".to_string()),
        ]);
        let a_bytes = vec![r as u8; (a.iter().product::<u64>() * 4) as usize];
        let b_len = TensorSpec::new("b", *b_dtype, b.clone())
            .byte_len()
            .unwrap_or(0);
        let b_bytes = vec![0x5A; b_len as usize];
        let tensors = [
            TensorRef {
                name: "a",
                dtype: Dtype::F32,
                shape: a,
                data: &a_bytes,
            },
            TensorRef {
                name: "b",
                dtype: *b_dtype,
                shape: b,
                data: &b_bytes,
            },
        ];
        let Ok(bytes) = serialize(tensors, Some(&metadata)) else {
            return;
        };
        let k = (r as u64 % outputs) + 1;
        let name = format!(
            "shard-{:05}-model-{k:05}-of-{outputs:05}.safetensors",
            r + 1
        );
        std::fs::write(dir.join(name), bytes).expect("write a rank file");
    }
    let Ok(checkpoint) = DcpCheckpoint::open(&dir, &ReadOptions::default()) else {
        return;
    };
    // Opened: the pieces cover every tensor exactly, so the data is what
    // the rank files hold, and the consolidation holds every tensor whole.
    let data_len: u64 = checkpoint.specs().map(|s| s.byte_len().unwrap_or(0)).sum();
    assert_eq!(
        data_len,
        checkpoint.data_len(),
        "data_len disagrees with the specs"
    );
    let bytes = checkpoint
        .plan()
        .to_bytes(&WriteOptions::default())
        .unwrap_or_else(|e| panic!("an opened checkpoint does not consolidate: {e}"));
    let file = SafeTensors::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("the consolidation is not a valid file: {e}"));
    assert_eq!(file.len(), checkpoint.specs().len());
    for spec in checkpoint.specs() {
        let t = file
            .tensor(&spec.name)
            .unwrap_or_else(|e| panic!("{:?} is not in the consolidation: {e}", spec.name));
        assert_eq!(t.shape(), &spec.shape[..], "{:?}", spec.name);
    }
}

fn fresh_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let root = DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
    let dir = root.path().join("dcp");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("create the checkpoint's directory");
    dir
}
