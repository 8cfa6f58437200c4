//! Gives `libtensorfile.so` its SONAME, `libtensorfile.so.<ABI>`: programs
//! linked against it record that name, so the loader finds the installed
//! `libtensorfile.so.0` (a link `ldconfig` keeps) and a later library that
//! breaks the ABI, `libtensorfile.so.1`, can sit beside it.

/// The C ABI's number: raise it only when a change breaks programs built
/// against an earlier libtensorfile (a function removed or given another
/// signature, a struct changed, an enum value or a `TL_E*` code moved). New
/// functions, codes and dtypes keep it. It is not the crates' version:
/// the Rust API can break in 0.2 while the C ABI stays.
const ABI: u32 = 0;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let family = std::env::var("CARGO_CFG_TARGET_FAMILY").unwrap_or_default();
    // ELF systems: Linux, the BSDs, illumos. macOS names a dylib by its
    // install name and Windows has no SONAME; both are left as cargo makes them.
    if family.split(',').any(|f| f == "unix") && os != "macos" && os != "ios" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtensorfile.so.{ABI}");
    }
}
