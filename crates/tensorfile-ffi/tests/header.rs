//! The checked-in `include/tensorfile.h` is what cbindgen generates from the
//! source now, so the header cannot drift from the library.
//!
//! After changing the API: `TENSORFILE_BLESS=1 cargo test -p tensorfile-ffi --test header`.

use std::path::Path;

#[test]
fn header_matches_the_source() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("the header is UTF-8");

    let path = crate_dir.join("include/tensorfile.h");
    if std::env::var_os("TENSORFILE_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write the header");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "include/tensorfile.h differs from what cbindgen generates from src/; \
         run `TENSORFILE_BLESS=1 cargo test -p tensorfile-ffi --test header` and commit it"
    );
}
