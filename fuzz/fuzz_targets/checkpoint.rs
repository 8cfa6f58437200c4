//! The whole loader on arbitrary bytes: load, then read every tensor.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfile_pytorch::{Checkpoint, LoadOptions};

fuzz_target!(|data: &[u8]| {
    let options = LoadOptions {
        max_expanded_bytes: 1 << 20,
        ..LoadOptions::default()
    };
    if let Ok(ckpt) = Checkpoint::from_bytes(data.to_vec(), &options) {
        for t in ckpt.tensors() {
            let _ = t.bytes();
        }
    }
});
