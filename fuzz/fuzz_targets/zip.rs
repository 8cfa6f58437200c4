//! The zip reader on arbitrary bytes: index, then read every entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfile_pytorch::zip::ZipIndex;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = ZipIndex::parse(data) {
        for entry in index.entries() {
            let _ = entry.read(data);
        }
    }
});
