//! Gives `libtensorfile.so` its SONAME, `libtensorfile.so.<ABI>`: programs
//! linked against it record that name, so the loader finds the installed
//! `libtensorfile.so.0` (a link `ldconfig` keeps) and a later library that
//! breaks the ABI, `libtensorfile.so.1`, can sit beside it.
//!
//! It also leaves that name in the build tree, a relative link
//! `libtensorfile.so.0 -> libtensorfile.so` beside the library, so a program
//! linked with `-L target/release -ltensorfile -Wl,-rpath,target/release`
//! starts without an install.

#[cfg(unix)]
use std::path::{Path, PathBuf};

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
        let soname = format!("libtensorfile.so.{ABI}");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
        // The build script runs on the host: links need a Unix host too.
        #[cfg(unix)]
        if let Some(dir) = profile_dir() {
            if let Err(e) = link_soname(&dir, &soname) {
                println!(
                    "cargo:warning=cannot link {soname} to libtensorfile.so in {}: {e}",
                    dir.display()
                );
            }
        }
    }
}

#[cfg(unix)]
/// The directory cargo puts the library in (`target/<profile>`, or
/// `target/<triple>/<profile>`): OUT_DIR is `<that>/build/<pkg>-<hash>/out`.
fn profile_dir() -> Option<PathBuf> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR")?);
    let build = out.parent()?.parent()?;
    (build.file_name()? == "build").then(|| build.parent().map(Path::to_path_buf))?
}

#[cfg(unix)]
/// Makes `dir/soname` a link to `libtensorfile.so` (relative, so the build
/// tree can move). The library is linked after this runs: the link dangles
/// until then. An existing entry of that name is replaced by a rename,
/// never followed.
fn link_soname(dir: &Path, soname: &str) -> std::io::Result<()> {
    let target = Path::new("libtensorfile.so");
    let link = dir.join(soname);
    if std::fs::read_link(&link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let temporary = dir.join(format!(".{soname}.{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    std::os::unix::fs::symlink(target, &temporary)?;
    std::fs::rename(&temporary, &link).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}
