//! Cast throughput against `memcpy` of the output size.
//!
//! ```text
//! cargo run --release -p tensorfile --example bench_casts [MiB of F32] [runs]
//! ```
//!
//! Buffers of `MiB` (default 1024) of F32, the same count of BF16 and F8
//! values; every run times, interleaved: a memcpy of each output size and
//! the casts BF16 -> F32, F32 -> BF16, F32 -> F8_E4M3 through
//! `tensorfile::cast::cast_slice` into preallocated buffers. Prints the
//! median of each and the ratio to its memcpy.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tensorfile::cast::{cast_slice, CastOptions};
use tensorfile::Dtype;

fn time(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let n = mib << 18; // F32 values in `mib` MiB

    // Values of every magnitude: a cheap deterministic generator of f32s
    // in the normal range.
    let mut rng = tensorfile_testkit::Rng::new(0x9E37_79B9_7F4A_7C15);
    let f32s: Vec<u8> = (0..n)
        .flat_map(|_| {
            let state = rng.next_u64();
            let bits = (state as u32 & 0x807F_FFFF) | ((100 + (state >> 32) as u32 % 56) << 23);
            bits.to_le_bytes()
        })
        .collect();
    let opts = CastOptions::default();
    let mut bf16s = vec![0u8; n * 2];
    cast_slice(Dtype::F32, &f32s, Dtype::BF16, &mut bf16s, opts).expect("F32 -> BF16");
    let mut out32 = vec![0u8; n * 4];
    let mut out8 = vec![0u8; n];
    let src8 = vec![1u8; n];
    let mut out16 = vec![0u8; n * 2];

    let mut t: [Vec<Duration>; 6] = Default::default();
    for _ in 0..runs {
        t[0].push(time(|| out32.copy_from_slice(black_box(&f32s))));
        t[1].push(time(|| {
            cast_slice(Dtype::BF16, black_box(&bf16s), Dtype::F32, &mut out32, opts).expect("cast")
        }));
        t[2].push(time(|| out16.copy_from_slice(black_box(&bf16s))));
        t[3].push(time(|| {
            cast_slice(Dtype::F32, black_box(&f32s), Dtype::BF16, &mut out16, opts).expect("cast")
        }));
        t[4].push(time(|| out8.copy_from_slice(black_box(&src8))));
        t[5].push(time(|| {
            cast_slice(
                Dtype::F32,
                black_box(&f32s),
                Dtype::F8_E4M3,
                &mut out8,
                opts,
            )
            .expect("cast")
        }));
        black_box((&out32, &out16, &out8));
    }
    let [m32, bf_f32, m16, f32_bf, m8, f32_f8] = t.map(median);
    let gib = |bytes: usize, d: Duration| bytes as f64 / d.as_secs_f64() / f64::from(1u32 << 30);
    println!("{n} values ({mib} MiB of F32), median of {runs} interleaved runs");
    let rows = [
        ("BF16 -> F32", bf_f32, m32, n * 4),
        ("F32 -> BF16", f32_bf, m16, n * 2),
        ("F32 -> F8_E4M3", f32_f8, m8, n),
    ];
    println!(
        "{:<16} {:>10} {:>14} {:>16} {:>7}",
        "cast", "time", "output GiB/s", "memcpy(output)", "ratio"
    );
    for (name, cast, copy, out_bytes) in rows {
        println!(
            "{name:<16} {:>8.1}ms {:>14.2} {:>14.1}ms {:>6.2}x",
            cast.as_secs_f64() * 1e3,
            gib(out_bytes, cast),
            copy.as_secs_f64() * 1e3,
            cast.as_secs_f64() / copy.as_secs_f64()
        );
    }
}
