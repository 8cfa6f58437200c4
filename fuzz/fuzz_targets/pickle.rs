//! The restricted pickle interpreter on arbitrary bytes: errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfile_pytorch::pickle::{Limits, Pickle};

fuzz_target!(|data: &[u8]| {
    let _ = Pickle::parse(data, &Limits::default());
});
