//! Generated files are what their generators make now, so they cannot drift:
//! `src/dtype_abi.rs` (the `tl_dtype` enum) from the core's dtype table, and
//! `include/tensorfile.h` from the source by cbindgen.
//!
//! After changing the API or the dtype table:
//! `TENSORFILE_BLESS=1 cargo test -p tensorfile-ffi --test header` (twice:
//! the header is generated from the regenerated enum).

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

/// The Rust source of `src/dtype_abi.rs`, from the core's dtype table.
fn dtype_abi_source() -> String {
    use std::fmt::Write;
    use tensorfile_core::Dtype;
    let mut out = String::from(
        "//! The C dtype enum, generated from the core's dtype table (its C ABI\n\
         //! numbers) by `TENSORFILE_BLESS=1 cargo test -p tensorfile-ffi --test header`;\n\
         //! do not edit.\n\n\
         use tensorfile_core::Dtype;\n\n\
         /// An element type. The values are fixed (an ABI): a dtype added later\n\
         /// gets the next free number; `fs_dtype_name` and `fs_dtype_from_name`\n\
         /// convert to and from the header names.\n\
         #[allow(non_camel_case_types)]\n\
         #[repr(C)]\n\
         #[derive(Debug, Clone, Copy, PartialEq, Eq)]\n\
         pub enum tl_dtype {\n",
    );
    let mut by_abi: Vec<Dtype> = Dtype::ALL.to_vec();
    by_abi.sort_by_key(|d| d.c_abi());
    for d in &by_abi {
        let _ = writeln!(out, "    /// {}", d.description());
        let _ = writeln!(out, "    TL_{} = {},", d.name(), d.c_abi());
    }
    out.push_str("}\n\nimpl tl_dtype {\n    /// The C value of a dtype.\n    pub(crate) const fn of(dtype: Dtype) -> tl_dtype {\n        match dtype {\n");
    for d in Dtype::ALL {
        let _ = writeln!(out, "            Dtype::{0} => tl_dtype::TL_{0},", d.name());
    }
    out.push_str("        }\n    }\n}\n");
    out
}

#[test]
fn dtype_enum_matches_the_core_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/dtype_abi.rs");
    let fresh = dtype_abi_source();
    if std::env::var_os("TENSORFILE_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write src/dtype_abi.rs");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "src/dtype_abi.rs differs from the core's dtype table; \
         run `TENSORFILE_BLESS=1 cargo test -p tensorfile-ffi --test header` and commit it"
    );
}
