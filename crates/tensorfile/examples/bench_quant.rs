//! Quantization throughput, file to file, against plain I/O of the same
//! sizes.
//!
//! ```text
//! cargo run --release -p tensorfile --example bench_quant [MiB] [runs] [dir]
//! ```
//!
//! - int4-g32-sym quantization of a `MiB` (default 1024) F32 weight file
//!   ([`quantize_file`], output not synced) against reading the input
//!   (every byte of the mapped file summed);
//! - MLX affine 4-bit, group-64 quantization of the same file;
//! - dequantization of an MLX 4-bit, group-64 file with BF16 scales and
//!   biases into BF16 ([`dequantize_file`], `MiB` of output) against
//!   writing a plain file of the same output size (`save`, not synced).
//!
//! Files go to `dir` (default: the system temporary directory) and are
//! removed at the end. Prints the median of `runs` (default 3) of each,
//! interleaved, and the ratios.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use tensorfile::quant::{
    dequantize_file, quantize_file, DequantizeOptions, QuantConfig, QuantParams, QuantizeOptions,
    Scheme, Selection,
};
use tensorfile::{save, Dtype, SafeTensors, TensorRef, WriteOptions};
use tensorfile_testkit::Rng;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Deterministic bytes from the tests' generator, shaped by `map`.
fn fill(n: usize, mut map: impl FnMut(u64) -> u8) -> Vec<u8> {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    (0..n).map(|_| map(rng.next_u64())).collect()
}

fn read_all(path: &Path) -> u64 {
    let file = SafeTensors::open(path).unwrap();
    let mut sum = 0u64;
    for chunk in file.data().chunks_exact(8) {
        sum = sum.wrapping_add(u64::from_le_bytes(chunk.try_into().unwrap()));
    }
    sum
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(&dir).unwrap();
    let write = WriteOptions::default().with_sync(false);

    // int4 input: `mib` MiB of F32 as one [rows, 4096] weight.
    let cols = 4096u64;
    let rows = (mib as u64) << 20 >> 2 >> 12;
    // Values in [-0.5, 0.5).
    let f32_data: Vec<u8> = Rng::new(1)
        .noise((rows * cols) as usize)
        .iter()
        .flat_map(|v| (v * 0.5).to_le_bytes())
        .collect();
    let f32_path = tmp.path().join("f32.safetensors");
    let shape = [rows, cols];
    let t = TensorRef {
        name: "layer.weight",
        dtype: Dtype::F32,
        shape: &shape,
        data: &f32_data,
    };
    save(&f32_path, [t], None, &write).unwrap();
    drop(f32_data);

    // MLX input: 4-bit codes, BF16 scales and biases, `mib` MiB of BF16 output.
    let out_elems = ((mib as u64) << 20) / 2;
    let mlx_cols = 4096u64;
    let mlx_rows = out_elems / mlx_cols;
    let codes = fill((mlx_rows * mlx_cols / 2) as usize, |s| (s >> 24) as u8);
    let groups = (mlx_rows * mlx_cols / 64) as usize;
    let scales = fill(
        groups * 2,
        |s| if s & 1 == 0 { (s >> 40) as u8 } else { 0x3C },
    );
    let biases = fill(
        groups * 2,
        |s| if s & 1 == 0 { (s >> 40) as u8 } else { 0xBC },
    );
    let (wshape, gshape) = ([mlx_rows, mlx_cols / 8], [mlx_rows, mlx_cols / 64]);
    let mlx_path = tmp.path().join("mlx.safetensors");
    let parts = [
        TensorRef {
            name: "m.weight",
            dtype: Dtype::U32,
            shape: &wshape,
            data: &codes,
        },
        TensorRef {
            name: "m.scales",
            dtype: Dtype::BF16,
            shape: &gshape,
            data: &scales,
        },
        TensorRef {
            name: "m.biases",
            dtype: Dtype::BF16,
            shape: &gshape,
            data: &biases,
        },
    ];
    save(&mlx_path, parts, None, &write).unwrap();
    drop((codes, scales, biases));
    let plain = vec![0x3Cu8; (out_elems * 2) as usize];

    let q_path = tmp.path().join("q.safetensors");
    let d_path = tmp.path().join("d.safetensors");
    let p_path = tmp.path().join("plain.safetensors");
    let qopts = QuantizeOptions::new(Scheme::Int4Sym { group: 32 })
        .with_selection(Selection::default())
        .with_write(write.clone());
    let mlx_qopts = QuantizeOptions::new(Scheme::Mlx(QuantParams::affine(4, 64)))
        .with_selection(Selection::default())
        .with_write(write.clone());
    let dopts = DequantizeOptions::default()
        .with_mlx(Some(QuantConfig::uniform(QuantParams::affine(4, 64))))
        .with_dtype(Some(Dtype::BF16))
        .with_write(write.clone());
    let (mut read, mut quant, mut deq, mut wr) = (vec![], vec![], vec![], vec![]);
    let mut mlx_quant = vec![];
    for _ in 0..runs {
        let t = Instant::now();
        black_box(read_all(&f32_path));
        read.push(t.elapsed());

        let t = Instant::now();
        let input = SafeTensors::open(&f32_path).unwrap();
        quantize_file(&q_path, &input.tensors_by_name(), None, &qopts).unwrap();
        quant.push(t.elapsed());

        let t = Instant::now();
        let input = SafeTensors::open(&f32_path).unwrap();
        quantize_file(&q_path, &input.tensors_by_name(), None, &mlx_qopts).unwrap();
        mlx_quant.push(t.elapsed());

        let t = Instant::now();
        let input = SafeTensors::open(&mlx_path).unwrap();
        dequantize_file(&d_path, &input.tensors_by_name(), None, &dopts).unwrap();
        deq.push(t.elapsed());

        let t = Instant::now();
        let shape = [mlx_rows, mlx_cols];
        let t2 = TensorRef {
            name: "m.weight",
            dtype: Dtype::BF16,
            shape: &shape,
            data: &plain,
        };
        save(&p_path, [t2], None, &write).unwrap();
        wr.push(t.elapsed());
    }
    let (read, quant, deq, wr) = (median(read), median(quant), median(deq), median(wr));
    let mlx_quant = median(mlx_quant);
    println!("{mib} MiB, median of {runs} runs");
    println!(
        "int4-g32-sym quantize of F32: {:.1} ms; reading it: {:.1} ms; ratio {:.2}x",
        ms(quant),
        ms(read),
        ms(quant) / ms(read)
    );
    println!(
        "MLX affine 4-bit g64 quantize of F32: {:.1} ms; ratio to reading {:.2}x",
        ms(mlx_quant),
        ms(mlx_quant) / ms(read)
    );
    println!(
        "MLX 4-bit g64 -> BF16 dequantize: {:.1} ms; writing the output: {:.1} ms; ratio {:.2}x",
        ms(deq),
        ms(wr),
        ms(deq) / ms(wr)
    );
}
