//! Model directories: config.json (the architecture's fields, MLX's
//! `quantization`) and the weights, from the input, through
//! [`check_dir`], [`ModelDir::open`] and [`QuantConfig::from_config`].

use std::path::PathBuf;

use tensorfile::model::{check_dir, ModelDir, QuantConfig, CONFIG_NAME, TOKENIZER_NAME};
use tensorfile::set::SINGLE_NAME;
use tensorfile::Contract;

use crate::input::Input;

/// Input: two bytes of little-endian length `n`, `n` bytes of config.json,
/// one byte of flags (bit 0: a tokenizer.json is there; bit 1: check
/// against contract v0; bit 2: no config.json at all), and the rest as
/// model.safetensors. Every check reports, never fails; the report of
/// [`check_dir`] is the one of the opened directory; a config's
/// quantization reads or is refused with a message.
pub fn model(data: &[u8]) {
    let mut input = Input::new(data);
    let n = usize::from(input.byte()) | usize::from(input.byte()) << 8;
    let config = input.bytes_exact(n);
    let flags = input.byte();
    let weights = input.rest();
    let dir = dir();
    let write = |name: &str, bytes: Option<&[u8]>| {
        let path = dir.join(name);
        match bytes {
            Some(b) => std::fs::write(&path, b).expect("write a file of the directory"),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    };
    write(CONFIG_NAME, (flags & 4 == 0).then_some(config));
    write(TOKENIZER_NAME, (flags & 1 != 0).then_some(b"{}"));
    write(SINGLE_NAME, Some(weights));
    let contract = if flags & 2 != 0 {
        Contract::V0
    } else {
        Contract::Any
    };
    let report = check_dir(&dir, contract);
    let _ = report.is_ok();
    if let Ok(model) = ModelDir::open(&dir) {
        let again = model.check(contract);
        assert_eq!(
            format!("{:?}", again.problems),
            format!("{:?}", report.problems),
            "check_dir and ModelDir::check disagree"
        );
        let _ = (model.arch(), model.needs_tokenizer());
        if let Ok(Some(q)) = QuantConfig::from_config(model.config()) {
            for name in model.weights().infos().map(|(_, t)| t.name) {
                let _ = q.for_module(name.strip_suffix(".weight").unwrap_or(name));
            }
        }
    }
}

/// The process's model directory.
fn dir() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
        .to_path_buf()
}
