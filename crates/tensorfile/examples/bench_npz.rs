//! numpy conversions, file to file, against numpy and the reference
//! safetensors package doing the same in one run.
//!
//! ```text
//! cargo build --release -p tensorfile --example bench_npz
//! ./target/release/examples/bench_npz [MiB] [runs] [dir] [python]
//! ```
//!
//! - safetensors -> npz (stored): `MiB` (default 1024) of F32 in 16
//!   tensors, `save_npz` of the file's tensors, against
//!   `scripts/bench_npz_py.py to-npz` (`safetensors.numpy.load_file` +
//!   `np.savez`); the two archives must be the same bytes.
//! - npz -> safetensors: that archive back, `npz_to_safetensors`, against
//!   `bench_npz_py.py to-st` (`np.load` + `save_file`); the two files must
//!   be the same bytes.
//!
//! Every conversion runs in a child process (this program re-run) so that
//! its peak resident memory is its own; dirty pages are flushed (`sync`)
//! before each; inputs are hot in the page cache, outputs not synced.
//! Prints the median of `runs` (default 3) of each, interleaved.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tensorfile::npz::{npz_to_safetensors, save_npz, FromNpzOptions, NpzFile, NpzWriteOptions};
use tensorfile::{save, Dtype, FileSource, ReadOptions, SafeTensors, TensorRef, WriteOptions};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
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

fn child(mode: &str, input: &Path, output: &Path) {
    match mode {
        "child-to-npz" => {
            let file =
                SafeTensors::from_source(FileSource::open(input).unwrap(), &ReadOptions::default())
                    .unwrap();
            let tensors: Vec<_> = file.tensor_data().collect();
            let o = NpzWriteOptions::default()
                .with_compress(false)
                .with_sync(false);
            save_npz(output, &tensors, &o, &()).unwrap();
        }
        "child-to-st" => {
            let file = NpzFile::open(input).unwrap();
            let o = FromNpzOptions::default().with_write(quick());
            npz_to_safetensors(&file, output, &o, &()).unwrap();
        }
        _ => unreachable!(),
    }
    println!("{:.1}", peak_mib());
}

/// Runs `program args`, after `sync`: (wall time, the peak MiB it prints).
fn run(program: &Path, args: &[&str]) -> (Duration, f64) {
    let _ = Command::new("sync").status();
    let t = Instant::now();
    let out = Command::new(program).args(args).output().unwrap();
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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(mode) = args.first().filter(|a| a.starts_with("child-")) {
        child(mode, Path::new(&args[1]), Path::new(&args[2]));
        return;
    }
    let mib: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = args
        .get(2)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let python = PathBuf::from(args.get(3).cloned().unwrap_or_else(|| "python3".into()));
    let tmp = tempfile::tempdir_in(&dir).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench_npz_py.py");

    // 16 F32 tensors of [4096, cols], values of every sign.
    let cols = (mib * 4).max(1);
    let mut rng = tensorfile_testkit::Rng::new(0x9E37_79B9_7F4A_7C15);
    let datas: Vec<Vec<u8>> = (0..16)
        .map(|_| {
            rng.noise((4096 * cols) as usize)
                .iter()
                .flat_map(|v| (v * 0.5).to_le_bytes())
                .collect()
        })
        .collect();
    let names: Vec<String> = (0..16)
        .map(|i| format!("model.layers.{i}.mlp.up_proj.weight"))
        .collect();
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
    let st = tmp.path().join("in.safetensors");
    save(&st, tensors, None, &quick()).unwrap();
    drop(datas);

    let exe = std::env::current_exe().unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (ours_npz, py_npz) = (tmp.path().join("ours.npz"), tmp.path().join("py.npz"));
    let (ours_st, py_st) = (
        tmp.path().join("ours.safetensors"),
        tmp.path().join("py.safetensors"),
    );
    let mut times: [Vec<Duration>; 4] = Default::default();
    let mut peaks = [0f64; 4];
    for _ in 0..runs {
        let runs4 = [
            run(&exe, &["child-to-npz", &s(&st), &s(&ours_npz)]),
            run(&python, &[&s(&script), "to-npz", &s(&st), &s(&py_npz)]),
            run(&exe, &["child-to-st", &s(&py_npz), &s(&ours_st)]),
            run(&python, &[&s(&script), "to-st", &s(&py_npz), &s(&py_st)]),
        ];
        for (k, (t, p)) in runs4.into_iter().enumerate() {
            times[k].push(t);
            peaks[k] = peaks[k].max(p);
        }
    }
    assert!(
        std::fs::read(&ours_npz).unwrap() == std::fs::read(&py_npz).unwrap(),
        "npz bytes differ"
    );
    assert!(
        std::fs::read(&ours_st).unwrap() == std::fs::read(&py_st).unwrap(),
        "safetensors bytes differ"
    );
    let [a, b, c, d] = times.map(|v| median(v).as_secs_f64());
    let gib = (16 * 4096 * cols * 4) as f64 / (1u64 << 30) as f64;
    println!(
        "median of {runs} runs, {gib:.2} GiB of F32 in 16 tensors; outputs identical to numpy's"
    );
    println!(
        "safetensors -> npz: tensorfile {a:.3} s (peak {:.0} MiB), numpy {b:.3} s (peak {:.0} MiB): {:.2}x",
        peaks[0], peaks[1], b / a
    );
    println!(
        "npz -> safetensors: tensorfile {c:.3} s (peak {:.0} MiB), numpy {d:.3} s (peak {:.0} MiB): {:.2}x",
        peaks[2], peaks[3], d / c
    );
}
