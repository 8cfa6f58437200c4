//! The safetensors reader on arbitrary bytes: the header parser (rules 1 to
//! 5) and, for accepted files, typed views and slicing. Errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfile::{SafeTensors, SliceArg};

fuzz_target!(|data: &[u8]| {
    let _ = tensorfile::Header::parse(data, data.len() as u64 / 2);
    if let Ok(file) = SafeTensors::from_bytes(data.to_vec()) {
        for t in file.tensors() {
            let _ = t.to_f32_vec();
            if let Ok(s) = t.slice(&[SliceArg::range(0, 1), SliceArg::Index(-1)]) {
                assert_eq!(s.to_vec().len() as u64, s.nbytes());
            }
        }
    }
});
