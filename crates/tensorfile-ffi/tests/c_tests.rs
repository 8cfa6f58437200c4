//! Runs the C tests (`tests/c/test_tensorfile.c`) against the built
//! `libtensorfile.so`.
//!
//! The expected values come from the fixtures' `.json` manifests: this
//! driver turns them into a C table (`fixtures_table.h`, in a temporary
//! directory), compiles the test with the system C compiler (`$CC`, else
//! `cc`) and runs it.
//!
//! CI runs it again under valgrind and with AddressSanitizer
//! (`.ci/c-tests.sh`) through two variables:
//! - `TENSORFILE_C_RUNNER`: a command line to run the test under
//!   (`valgrind --leak-check=full --error-exitcode=1`);
//! - `TENSORFILE_C_CFLAGS`: extra compiler flags (`-fsanitize=address`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use tensorfile_testkit::fixtures;
/// The hostile checkpoints of issue 12, built at test time.
use tensorfile_testkit::hostile;

/// Builds `libtensorfile.so` (once per test binary) and returns the
/// directory it is in.
///
/// `cargo test` builds a cdylib-only crate's tests but not the library
/// itself, so this runs `cargo build` for it, in the same target directory
/// and profile as the test binary (`<target>/<profile>/deps/<test>`).
fn build_library() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(build_library_now).clone()
}

fn build_library_now() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf();
    let target = dir.parent().expect("target/<profile>");
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => panic!("no profile directory in {}", dir.display()),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "tensorfile-ffi",
            "--lib",
            "--profile",
            profile,
        ])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p tensorfile-ffi failed");
    assert!(
        dir.join("libtensorfile.so").is_file(),
        "{} has no libtensorfile.so",
        dir.display()
    );
    dir
}

/// The SONAME recorded in a shared library (`readelf -d`, of binutils,
/// which comes with the C compiler).
fn soname(library: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(library)
        .output()
        .expect("run readelf (binutils)");
    assert!(out.status.success(), "readelf -d {}", library.display());
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| {
            let (_, rest) = line.split_once("Library soname: [")?;
            rest.strip_suffix(']').map(str::to_string)
        })
        .unwrap_or_else(|| panic!("{} has no SONAME:\n{text}", library.display()))
}

/// A directory in `work` to link and run against, laid out as an install
/// is: `libtensorfile.so` and the SONAME's name, both links to cargo's
/// `libtensorfile.so` (which programs find by its SONAME at run time).
fn library_dir(work: &Path) -> PathBuf {
    let built = build_library().join("libtensorfile.so");
    let lib = work.join("lib");
    std::fs::create_dir_all(&lib).expect("create lib/");
    for name in ["libtensorfile.so".to_string(), soname(&built)] {
        std::os::unix::fs::symlink(&built, lib.join(name)).expect("link the library");
    }
    lib
}

/// The C compiler (`$CC`, else `cc`) with the flags every C program here
/// is built with: warnings are errors, casting a const away is one
/// (`-Wcast-qual`), string literals are const (`-Wwrite-strings`), plus
/// `TENSORFILE_C_CFLAGS`.
fn c_compiler() -> Command {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let extra = std::env::var("TENSORFILE_C_CFLAGS").unwrap_or_default();
    let mut compile = Command::new(cc);
    compile
        .args(["-std=c11", "-Wall", "-Wextra", "-Wcast-qual"])
        .args(["-Wwrite-strings", "-Werror", "-O1", "-g"])
        .args(extra.split_whitespace())
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"));
    compile
}

/// Links a compiler command against the library in `lib` and builds `exe`.
fn link_and_build(mut compile: Command, lib: &Path, exe: &Path) {
    compile
        .arg("-L")
        .arg(lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-ltensorfile", "-lpthread", "-o"])
        .arg(exe);
    let status = compile
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler: {e}"));
    assert!(status.success(), "compiling failed: {compile:?}");
}

/// A command running `exe` under `TENSORFILE_C_RUNNER` (valgrind), if set.
fn runner(exe: &Path) -> Command {
    let runner = std::env::var("TENSORFILE_C_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(words).arg(exe);
            c
        }
        None => Command::new(exe),
    }
}

/// A C string literal of `bytes`: printable ASCII as is, the rest as octal
/// escapes (three digits, so a following digit cannot join them).
fn c_literal(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes {
        match b {
            b'"' | b'\\' | b'?' => write!(s, "\\{}", b as char).unwrap(),
            0x20..=0x7e => s.push(b as char),
            _ => write!(s, "\\{b:03o}").unwrap(),
        }
    }
    s.push('"');
    s
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Files of `dir` ending in `ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    all.sort();
    all
}

/// One expected tensor: `{name, name_len, dtype, ndim, shape, nbytes, sha256}`.
fn tensor_row(out: &mut String, shapes: &mut String, id: &str, t: &Value) {
    let name = t["name"].as_str().expect("name");
    let dtype = t["dtype"].as_str().expect("dtype");
    let shape: Vec<u64> = t["shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dimension"))
        .collect();
    let nbytes = match (t.get("data_offsets"), t.get("nbytes")) {
        (Some(o), _) => o[1].as_u64().expect("end") - o[0].as_u64().expect("begin"),
        (None, Some(n)) => n.as_u64().expect("nbytes"),
        (None, None) => panic!("tensor {name:?} has neither data_offsets nor nbytes"),
    };
    let sha = t["sha256"].as_str().expect("sha256");
    let dims: Vec<String> = shape.iter().map(|d| format!("INT64_C({d})")).collect();
    writeln!(
        shapes,
        "static const int64_t {id}[] = {{{}}};",
        if dims.is_empty() {
            "0".to_string()
        } else {
            dims.join(", ")
        }
    )
    .unwrap();
    writeln!(
        out,
        "    {{{}, {}, TL_{dtype}, {}, {id}, {nbytes}, \"{sha}\"}},",
        c_literal(name.as_bytes()),
        name.len(),
        shape.len(),
    )
    .unwrap();
}

/// `fixtures_table.h`: the valid files with their tensors and metadata,
/// the invalid files, and the PyTorch files with what they must give.
fn generate_table(fixtures: &Path) -> String {
    let mut shapes = String::new();
    let mut body = String::new();
    let mut files_rows = String::new();

    for (n, manifest) in files(&fixtures.join("valid"), "json").iter().enumerate() {
        let m = json(manifest);
        let file = manifest.with_extension("safetensors");
        writeln!(body, "static const struct fx_tensor fx_tensors_{n}[] = {{").unwrap();
        let tensors = m["tensors"].as_array().expect("tensors");
        for (i, t) in tensors.iter().enumerate() {
            tensor_row(&mut body, &mut shapes, &format!("fx_shape_{n}_{i}"), t);
        }
        writeln!(body, "    {{0}}\n}};").unwrap();
        // Metadata in ascending byte order of the keys, as the library lists it.
        let mut meta: Vec<(String, String)> = m["metadata"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().expect("string value").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        meta.sort();
        writeln!(body, "static const char *const fx_meta_{n}[] = {{").unwrap();
        for (k, v) in &meta {
            writeln!(
                body,
                "    {}, {},",
                c_literal(k.as_bytes()),
                c_literal(v.as_bytes())
            )
            .unwrap();
        }
        writeln!(body, "    NULL\n}};").unwrap();
        let lens: Vec<String> = meta
            .iter()
            .flat_map(|(k, v)| [k.len().to_string(), v.len().to_string()])
            .chain(["0".to_string()])
            .collect();
        writeln!(
            body,
            "static const size_t fx_meta_len_{n}[] = {{{}}};",
            lens.join(", ")
        )
        .unwrap();
        writeln!(
            files_rows,
            "    {{{}, {}, fx_tensors_{n}, {}, fx_meta_{n}, fx_meta_len_{n}, {}}},",
            c_literal(file.to_str().expect("UTF-8 path").as_bytes()),
            c_literal(
                manifest
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .expect("name")
                    .as_bytes()
            ),
            tensors.len(),
            meta.len()
        )
        .unwrap();
    }

    let mut out = String::from(
        "/* Generated by tests/c_tests.rs from tests/fixtures: do not edit. */\n\
         #include \"fixtures.h\"\n\n",
    );
    out += &shapes;
    out += &body;
    writeln!(
        out,
        "const struct fx_file FX_VALID[] = {{\n{files_rows}    {{0}}\n}};"
    )
    .unwrap();

    writeln!(out, "const char *const FX_INVALID[] = {{").unwrap();
    for file in files(&fixtures.join("invalid"), "safetensors") {
        writeln!(
            out,
            "    {},",
            c_literal(file.to_str().expect("UTF-8 path").as_bytes())
        )
        .unwrap();
    }
    writeln!(out, "    NULL\n}};").unwrap();
    out += &pytorch_table(fixtures);
    out
}

/// The code a refused checkpoint must give, where the test pins it (0:
/// `TL_EFORMAT` or `TL_EUNSUPPORTED`).
fn expected_pytorch_code(file: &str) -> &'static str {
    match file {
        // Pickle globals off the allow-list, limits, containers not loaded.
        "evil_builtins_eval.pt"
        | "evil_posix_system.pt"
        | "reject_full_module.pt"
        | "reject_quantized.pt"
        | "reject_sparse.pt"
        | "bad_dtype_conflict.pt"
        | "hostile_deep_nesting.pt"
        | "reject_torchscript.pt"
        | "tar_format_stub.pt"
        | "reject_complex128.pt"
        | "reject_conj.pt"
        | "reject_neg.pt"
        | "reject_float4_packed.pt"
        // An opcode torch.load(weights_only=True) refuses (FRAME).
        | "zip_protocol4.pt" => "TL_EUNSUPPORTED",
        // Broken containers, pickles, storages and views.
        "bad_truncated.pt"
        | "bad_legacy_magic.pt"
        | "bad_legacy_truncated.pt"
        | "bad_no_data_pkl.pt"
        | "bad_short_storage.pt"
        | "bad_view_out_of_bounds.pt"
        | "hostile_unknown_opcode.pt"
        | "hostile_no_stop.pt"
        | "hostile_huge_string.pt" => "TL_EFORMAT",
        _ => "0",
    }
}

/// One row of `FX_HOSTILE` (see `struct fx_hostile` in `fixtures.h`).
struct Case {
    file: &'static str,
    bytes: Vec<u8>,
    /// `fs_load_pytorch`'s code, or "0".
    load: &'static str,
    /// Each first access's code, or "0".
    access: &'static str,
    /// In the failure's message.
    part: &'static str,
    tensors: usize,
    /// 0 unchecked, 1 zeros, 2 rows of the bytes 0..255, -1 not read
    /// (loading must not gather it).
    content: i8,
}

/// `FX_HOSTILE`: issue 12's hostile checkpoints, written into `work`,
/// with what loading them and reading their tensors must give.
fn hostile_table(work: &Path) -> String {
    use hostile::{Apply, Record, Shared};
    // A deflated record of garbage: it loads (records are inflated when
    // first read), then its tensor's first access fails.
    let garbage = hostile::checkpoint(
        Record::stored(
            "archive/data.pkl",
            hostile::state_dict_pickle(
                &[hostile::Storage::f32("0", 64)],
                &[hostile::Tensor::view("w", 0, 0, &[64], &[1])],
            ),
        ),
        vec![Record {
            name: "archive/data/0".into(),
            data: vec![0xff; 64],
            inflated: Some(256),
        }],
    );
    // Small versions of the costlier files (the Rust tests run them at
    // full size, which under valgrind would take many minutes): the same
    // code paths, a tenth of the Nones and calls, a 1 MiB storage.
    let cases = [
        Case {
            // Refused at the POP that torch refuses too (issue 27).
            file: "bomb_reduce_tuple.pt",
            bytes: hostile::clone_bomb(Apply::Reduce, Shared::Tuple, 100_000, 200),
            load: "TL_EUNSUPPORTED",
            access: "0",
            part: "opcode POP",
            tensors: 0,
            content: 0,
        },
        Case {
            file: "bomb_build_tuple.pt",
            bytes: hostile::clone_bomb(Apply::Build, Shared::Tuple, 100_000, 200),
            load: "TL_EUNSUPPORTED",
            access: "0",
            part: "opcode POP",
            tensors: 0,
            content: 0,
        },
        Case {
            // The memo is a map: one entry, whatever its id (torch loads
            // it too: None, no tensors).
            file: "sparse_memo.pt",
            bytes: hostile::sparse_memo(),
            load: "0",
            access: "0",
            part: "",
            tensors: 0,
            content: 0,
        },
        Case {
            file: "deflated_128_views_of_1gib.pt",
            bytes: hostile::deflated_views(128, 1 << 30, false),
            load: "0",
            access: "0",
            part: "",
            tensors: 128,
            content: 1,
        },
        Case {
            file: "deflated_1000_spread_views.pt",
            bytes: hostile::deflated_views(1000, 1 << 20, true),
            load: "0",
            access: "0",
            part: "",
            tensors: 1000,
            content: 1,
        },
        Case {
            file: "expansions_16_gib.pt",
            bytes: hostile::expansions(16, 1 << 22),
            load: "TL_EUNSUPPORTED",
            access: "0",
            part: "max_expanded_total_bytes",
            tensors: 0,
            content: 0,
        },
        Case {
            file: "expansions_at_cap.pt",
            bytes: hostile::expansions_at_default_cap(0),
            load: "0",
            access: "0",
            part: "",
            tensors: 2,
            content: -1,
        },
        Case {
            file: "expansions_cap_plus_one.pt",
            bytes: hostile::expansions_at_default_cap(1),
            load: "TL_EUNSUPPORTED",
            access: "0",
            part: "1073741825 B needed",
            tensors: 0,
            content: 0,
        },
        Case {
            file: "expansions_small.pt",
            bytes: hostile::expansions(4, 1000),
            load: "0",
            access: "0",
            part: "",
            tensors: 4,
            content: 2,
        },
        Case {
            file: "deflated_garbage.pt",
            bytes: garbage,
            load: "0",
            access: "TL_EFORMAT",
            part: "invalid deflate data",
            tensors: 1,
            content: 0,
        },
    ];
    let mut rows = String::new();
    for c in cases {
        let path = work.join(c.file);
        std::fs::write(&path, c.bytes).expect("write a hostile checkpoint");
        writeln!(
            rows,
            "    {{{}, {}, {}, {}, {}, {}}},",
            c_literal(path.to_str().expect("UTF-8 path").as_bytes()),
            c.load,
            c.access,
            c_literal(c.part.as_bytes()),
            c.tensors,
            c.content
        )
        .unwrap();
    }
    format!("const struct fx_hostile FX_HOSTILE[] = {{\n{rows}    {{0}}\n}};\n")
}

/// `FX_PYTORCH_OK` (the `ok` checkpoints, tensors in name order) and
/// `FX_PYTORCH_REJECT` (the others, with the code they must give).
fn pytorch_table(fixtures: &Path) -> String {
    let dir = fixtures.join("pytorch");
    let manifest = json(&dir.join("manifest.json"));
    let all = manifest["fixtures"].as_object().expect("fixtures");
    let (mut shapes, mut body, mut ok, mut reject) =
        (String::new(), String::new(), String::new(), String::new());
    for (n, (file, f)) in all.iter().enumerate() {
        let path = dir.join(file);
        let path = c_literal(path.to_str().expect("UTF-8 path").as_bytes());
        let expect = f["expect"].as_str().expect("expect");
        if !expect.starts_with("ok") {
            writeln!(reject, "    {{{path}, {}}},", expected_pytorch_code(file)).unwrap();
            continue;
        }
        let mut tensors: Vec<(&String, &Value)> =
            f["tensors"].as_object().expect("tensors").iter().collect();
        tensors.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        writeln!(body, "static const struct fx_tensor fx_pt_{n}[] = {{").unwrap();
        for (i, (name, t)) in tensors.iter().enumerate() {
            let mut t = (*t).clone();
            t["name"] = Value::String((*name).clone());
            tensor_row(&mut body, &mut shapes, &format!("fx_pt_shape_{n}_{i}"), &t);
        }
        writeln!(body, "    {{0}}\n}};").unwrap();
        writeln!(
            ok,
            "    {{{path}, {}, fx_pt_{n}, {}, NULL, NULL, -1}},",
            c_literal(file.as_bytes()),
            tensors.len()
        )
        .unwrap();
    }
    format!(
        "{shapes}{body}const struct fx_file FX_PYTORCH_OK[] = {{\n{ok}    {{0}}\n}};\n\
         const struct fx_reject FX_PYTORCH_REJECT[] = {{\n{reject}    {{0}}\n}};\n"
    )
}

#[test]
fn c_test_program_passes() {
    let fixtures = fixtures();
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().expect("a temporary directory");
    let lib = library_dir(work.path());
    let table = generate_table(&fixtures) + &hostile_table(work.path());
    std::fs::write(work.path().join("fixtures_table.c"), table).expect("write the table");

    let exe = work.path().join("test_tensorfile");
    let c_dir = crate_dir.join("tests/c");
    let mut compile = c_compiler();
    compile
        .arg(format!(
            "-DTF_EXPECTED_VERSION=\"{}\"",
            env!("CARGO_PKG_VERSION")
        ))
        .arg("-I")
        .arg(&c_dir)
        .arg(c_dir.join("test_tensorfile.c"))
        .arg(c_dir.join("sha256.c"))
        .arg(work.path().join("fixtures_table.c"));
    link_and_build(compile, &lib, &exe);

    let mut run = runner(&exe);
    run.arg(work.path());
    let output = run.output().expect("run the C test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(output.status.success(), "the C test failed: {run:?}");
    assert!(
        stdout.contains(" passed, 0 failed"),
        "the C test did not report its checks"
    );
}

/// The library is named by `libtensorfile.so.0`, so a program linked
/// against it finds the installed, versioned library (and a later one
/// that breaks the ABI can sit beside it).
#[test]
fn the_library_has_a_versioned_soname() {
    let built = build_library().join("libtensorfile.so");
    assert_eq!(soname(&built), "libtensorfile.so.0");
}

/// A program links against the build tree as it stands after `cargo
/// build`: exactly `-L <profile dir> -ltensorfile -Wl,-rpath,<profile dir>`,
/// and it starts, because the build left `libtensorfile.so.0` (the SONAME
/// the program asks the loader for) beside `libtensorfile.so`.
#[test]
fn a_program_linked_against_the_build_tree_runs() {
    let profile_dir = build_library();
    let link = profile_dir.join("libtensorfile.so.0");
    let target = std::fs::read_link(&link)
        .unwrap_or_else(|e| panic!("{}: not a symbolic link: {e}", link.display()));
    assert_eq!(target, Path::new("libtensorfile.so"), "a relative link");
    let work = tempfile::tempdir().expect("a temporary directory");
    let source = work.path().join("version.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include \"tensorfile.h\"\n\
         int main(void) { printf(\"%s\\n\", fs_version()); return 0; }\n",
    )
    .expect("write the program");
    let exe = work.path().join("version");
    let mut compile = c_compiler();
    compile.arg(&source);
    link_and_build(compile, &profile_dir, &exe);
    let output = runner(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run it");
    assert!(
        output.status.success(),
        "it does not start: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim_end(),
        env!("CARGO_PKG_VERSION")
    );
}

/// The README's C example (its one ` ```c ` block) compiles with the
/// strict flags and does what it says: it reads `w` from model.safetensors
/// and writes out.safetensors, in the directory it runs in.
#[test]
fn the_readme_c_example_compiles_and_runs() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("read README.md");
    let blocks: Vec<&str> = readme
        .split("\n```c\n")
        .skip(1)
        .map(|rest| rest.split_once("\n```\n").expect("a closed ```c block").0)
        .collect();
    assert_eq!(blocks.len(), 1, "the README has one C example");
    let work = tempfile::tempdir().expect("a temporary directory");
    let lib = library_dir(work.path());
    let source = work.path().join("readme_example.c");
    std::fs::write(&source, format!("{}\n", blocks[0])).expect("write the example");
    let exe = work.path().join("readme_example");
    let mut compile = c_compiler();
    compile.arg(&source);
    link_and_build(compile, &lib, &exe);

    std::fs::copy(
        fixtures().join("valid/worked_example.safetensors"),
        work.path().join("model.safetensors"),
    )
    .expect("copy the worked example");
    let mut run = runner(&exe);
    let output = run.current_dir(work.path()).output().expect("run it");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the README's example failed: {run:?}"
    );
    assert_eq!(stdout, "F32, 2 dims, 16 bytes\n");
    let written = tensorfile_core::SafeTensors::open(work.path().join("out.safetensors"))
        .expect("the example's output is a valid file");
    let w = written.tensor("w").expect("it holds w");
    assert_eq!(w.data(), [1f32, 2., 3., 4.].map(f32::to_le_bytes).concat());
    assert_eq!(
        written
            .metadata()
            .and_then(|m| m.get("format"))
            .map(String::as_str),
        Some("tinyllm")
    );
}
