//! GGUF conversions, file to file, against the `gguf` Python package and
//! against plain writing.
//!
//! ```text
//! cargo build --release -p tensorfile --example bench_gguf
//! ./target/release/examples/bench_gguf [MiB] [runs] [dir] [python]
//! ```
//!
//! - safetensors -> GGUF Q8_0 of `MiB` (default 1024) of F32 (16 tensors
//!   of [4096, MiB / 16 * 64]; `hf_to_gguf` as a plain container), against
//!   `scripts/bench_gguf_py.py` run by `python` (a venv with gguf 0.19,
//!   safetensors and numpy): `safe_open` + `gguf.quants.quantize` +
//!   `GGUFWriter`, the same conversion in one run of the package.
//! - GGUF Q4_K -> safetensors BF16 of `MiB` of output (`gguf_to_hf` of a
//!   llama-named file of random Q4_K blocks), against `save` of the same
//!   BF16 tensors from memory: writing the output once.
//!
//! `bench_gguf prepare DIR MiB` writes the inputs only (`DIR/f32/`,
//! `DIR/q4k.gguf`), and `bench_gguf child-q8 IN OUT` / `child-q4k IN OUT`
//! run one conversion, for profiling.
//!
//! Dirty pages are flushed (`sync`) before each measurement, so that the
//! write-back of one run's output does not land in the next.
//!
//! Every conversion runs in a child process (this program re-run), so that
//! its peak resident memory (`VmHWM`) is its own. Outputs are not synced;
//! inputs are hot in the page cache. Prints the median of `runs` (default
//! 3) of each, interleaved, and the ratios.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tensorfile::gguf::{
    gguf_to_hf, hf_to_gguf, FromHfOptions, GgmlType, GgufFile, GgufValue as Value, ToHfOptions,
};
use tensorfile::gguf::{GgufSpec, GgufWriter};
use tensorfile::{save, Dtype, TensorRef, WriteOptions};
use tensorfile_core::plan::Sink;
use tensorfile_testkit::Rng;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn quick() -> WriteOptions {
    WriteOptions::default().with_sync(false)
}

/// Peak resident memory of this process, in MiB.
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Child mode: one conversion, then its peak memory on stdout.
fn child(mode: &str, input: &Path, output: &Path) {
    match mode {
        "child-q8" => {
            let o = FromHfOptions::default()
                .with_ggml_type(GgmlType::Q8_0)
                .with_raw(Some("llama".into()))
                .with_tokenizer_pre(None)
                .with_sync(false);
            hf_to_gguf(input, output, &o).unwrap();
        }
        "child-q4k" => {
            let file = GgufFile::open(input).unwrap();
            let o = ToHfOptions::default()
                .with_dtype(Dtype::BF16)
                .with_keep_quant(false)
                .with_write(quick());
            gguf_to_hf(&file, output, &o).unwrap();
        }
        _ => unreachable!(),
    }
    println!("{:.1}", peak_mib());
}

/// Flushes dirty pages (earlier outputs) so that their write-back does not
/// land in the next measurement.
fn settle() {
    let _ = Command::new("sync").status();
}

/// Runs a child conversion: (wall time, its peak MiB).
fn run_child(mode: &str, input: &Path, output: &Path) -> (Duration, f64) {
    settle();
    let exe = std::env::current_exe().unwrap();
    let t = Instant::now();
    let out = Command::new(exe)
        .args([mode, input.to_str().unwrap(), output.to_str().unwrap()])
        .output()
        .unwrap();
    let elapsed = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peak = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(f64::NAN);
    (elapsed, peak)
}

/// The F32 input: 16 weights of [4096, cols], values of every sign.
fn make_f32_dir(dir: &Path, mib: u64) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    // 16 tensors of 4096 rows, `mib / 16` MiB each.
    let cols = (mib * 4).max(32) / 32 * 32;
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let datas: Vec<Vec<u8>> = (0..16)
        .map(|_| {
            (0..4096 * cols)
                .flat_map(|_| {
                    let r = rng.next_u64();
                    let v = ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
                    v.to_le_bytes()
                })
                .collect()
        })
        .collect();
    let names: Vec<String> = (0..16).map(|i| format!("blk.{i}.ffn_up.weight")).collect();
    let shape = [4096u64, cols];
    let tensors: Vec<TensorRef<'_>> = names
        .iter()
        .zip(&datas)
        .map(|(n, d)| TensorRef {
            name: n,
            dtype: Dtype::F32,
            shape: &shape,
            data: d,
        })
        .collect();
    save(dir.join("model.safetensors"), tensors, None, &quick()).unwrap();
    16 * 4096 * cols * 4
}

/// The Q4_K input: 32 llama `ffn_up` weights of [4096, cols] of random
/// blocks with plausible scales, and a token embedding.
fn make_q4k(path: &Path, mib: u64) -> (u64, u64) {
    let out_elems = (mib << 20) / 2;
    let cols = (out_elems / 32 / 4096) / 256 * 256;
    let kv = vec![
        (
            "general.architecture".to_string(),
            Value::String("llama".into()),
        ),
        ("llama.block_count".to_string(), Value::U32(32)),
        ("llama.context_length".to_string(), Value::U32(2048)),
        (
            "llama.embedding_length".to_string(),
            Value::U32(cols as u32),
        ),
        ("llama.feed_forward_length".to_string(), Value::U32(4096)),
        ("llama.attention.head_count".to_string(), Value::U32(32)),
    ];
    let mut w = GgufWriter::new(kv);
    let mut specs = vec![GgufSpec::from_shape(
        "token_embd.weight",
        &[1024, cols],
        GgmlType::Q4_K,
    )];
    for i in 0..32 {
        specs.push(GgufSpec::from_shape(
            format!("blk.{i}.ffn_up.weight"),
            &[4096, cols],
            GgmlType::Q4_K,
        ));
    }
    for (k, s) in specs.into_iter().enumerate() {
        let len = s.byte_len().unwrap();
        let t = w.declare(s).unwrap();
        w.push(
            vec![t],
            move |sink: &dyn Sink<tensorfile::Error>| -> tensorfile::Result<()> {
                let mut rng = Rng::new(0x1234_5678 + k as u64);
                let mut bytes = vec![0u8; len as usize];
                for b in bytes.chunks_exact_mut(144) {
                    for x in b.iter_mut() {
                        *x = rng.next_u64() as u8;
                    }
                    // d and dmin: small positive f16 (2^-10 .. 2^-9).
                    b[0..2].copy_from_slice(
                        &(0x1400u16 | (rng.next_u64() as u16 & 0x3FF)).to_le_bytes(),
                    );
                    b[2..4].copy_from_slice(
                        &(0x1000u16 | (rng.next_u64() as u16 & 0x3FF)).to_le_bytes(),
                    );
                }
                sink.write(t, 0, &bytes)
            },
        );
    }
    w.save(path, false, &()).unwrap();
    let elems = (1024 + 32 * 4096) * cols;
    (elems, cols)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(mode) = args.first().filter(|a| a.starts_with("child-")) {
        child(mode, Path::new(&args[1]), Path::new(&args[2]));
        return;
    }
    if args.first().map(String::as_str) == Some("prepare") {
        // The inputs alone, for profiling: `prepare DIR MiB`.
        let dir = PathBuf::from(&args[1]);
        let mib = args[2].parse().unwrap();
        make_f32_dir(&dir.join("f32"), mib);
        make_q4k(&dir.join("q4k.gguf"), mib);
        return;
    }
    let mib: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = args
        .get(2)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let python = args.get(3).cloned();
    let tmp = tempfile::tempdir_in(&dir).unwrap();
    let f32_dir = tmp.path().join("f32");
    let f32_bytes = make_f32_dir(&f32_dir, mib);
    let q4k = tmp.path().join("q4k.gguf");
    let (elems, cols) = make_q4k(&q4k, mib);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench_gguf_py.py");

    // The plain output: the same BF16 tensors from memory.
    let plain = vec![0x3Cu8; (4096 * cols * 2) as usize];
    let embd = vec![0x3Cu8; (1024 * cols * 2) as usize];
    let names: Vec<String> = (0..32)
        .map(|i| format!("model.layers.{i}.mlp.up_proj.weight"))
        .collect();
    let (shape, eshape) = ([4096u64, cols], [1024u64, cols]);

    let q8_out = tmp.path().join("q8.gguf");
    let py_out = tmp.path().join("py.gguf");
    let hf_out = tmp.path().join("hf");
    let p_path = tmp.path().join("plain.safetensors");
    let (mut q8, mut py, mut q4, mut wr) = (vec![], vec![], vec![], vec![]);
    let (mut q8_peak, mut q4_peak, mut py_peak) = (0f64, 0f64, 0f64);
    for _ in 0..runs {
        let (t, p) = run_child("child-q8", &f32_dir.join("model.safetensors"), &q8_out);
        q8.push(t);
        q8_peak = q8_peak.max(p);
        if let Some(python) = &python {
            settle();
            let t = Instant::now();
            let out = Command::new(python)
                .args([
                    script.to_str().unwrap(),
                    f32_dir.join("model.safetensors").to_str().unwrap(),
                    py_out.to_str().unwrap(),
                ])
                .output()
                .unwrap();
            py.push(t.elapsed());
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            py_peak = py_peak.max(
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .unwrap_or(f64::NAN),
            );
        }
        let (t, p) = run_child("child-q4k", &q4k, &hf_out);
        q4.push(t);
        q4_peak = q4_peak.max(p);

        settle();
        let t = Instant::now();
        let mut tensors: Vec<TensorRef<'_>> = names
            .iter()
            .map(|n| TensorRef {
                name: n,
                dtype: Dtype::BF16,
                shape: &shape,
                data: &plain,
            })
            .collect();
        tensors.push(TensorRef {
            name: "model.embed_tokens.weight",
            dtype: Dtype::BF16,
            shape: &eshape,
            data: &embd,
        });
        save(&p_path, tensors, None, &quick()).unwrap();
        wr.push(t.elapsed());
    }
    if python.is_some() {
        // The same blocks as gguf-py's (tensor data; metadata differs).
        let a = GgufFile::open(&q8_out).unwrap();
        let b = GgufFile::open(&py_out).unwrap();
        for t in b.header().tensors() {
            let o = a.header().tensor(&t.name).unwrap();
            let (mut x, mut y) = (
                vec![0u8; o.byte_len as usize],
                vec![0u8; t.byte_len as usize],
            );
            a.read_raw(o, 0, &mut x).unwrap();
            b.read_raw(t, 0, &mut y).unwrap();
            assert!(x == y, "{}: the Q8_0 blocks differ from gguf-py's", t.name);
        }
    }
    let (q8, q4, wr) = (median(q8), median(q4), median(wr));
    println!("median of {runs} runs; inputs in {}", dir.display());
    println!(
        "safetensors -> GGUF Q8_0 of {:.0} MiB F32: tensorfile {:.1} ms (peak RSS {q8_peak:.0} MiB; largest tensor {:.0} MiB)",
        f32_bytes as f64 / (1 << 20) as f64,
        ms(q8),
        f32_bytes as f64 / 16.0 / (1 << 20) as f64
    );
    if !py.is_empty() {
        let py = median(py);
        println!(
            "  gguf 0.19 (quants.quantize + GGUFWriter): {:.1} ms (peak RSS {py_peak:.0} MiB); tensorfile is {:.1}x faster; Q8_0 blocks identical",
            ms(py),
            ms(py) / ms(q8)
        );
    }
    println!(
        "GGUF Q4_K -> safetensors BF16, {:.0} MiB out: tensorfile {:.1} ms (peak RSS {q4_peak:.0} MiB); writing the output once: {:.1} ms; ratio {:.2}x",
        (elems * 2) as f64 / (1 << 20) as f64,
        ms(q4),
        ms(wr),
        ms(q4) / ms(wr)
    );
}
