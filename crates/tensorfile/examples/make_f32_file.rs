//! Writes a safetensors file of F32 weights for the `stats`, `diff` and
//! `hash` benchmarks (scripts/bench-looking.sh): MIB mebibytes in tensors
//! of 64 MiB named `model.layers.<i>.mlp.w`, values roughly normal
//! (std 0.02, as trained weights), from a fixed seed. With a third
//! argument `perturbed`, one element in ten gets a small change, so that a
//! diff of the two files has work in every block.
//!
//! ```text
//! cargo run --release -p tensorfile --example make_f32_file -- OUT MIB [perturbed]
//! ```

use tensorfile::plan::OwnedTensor;
use tensorfile::writer::TensorSpec;
use tensorfile::{Dtype, WriteOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(out), Some(mib)) = (args.get(1), args.get(2)) else {
        return Err("usage: make_f32_file OUT MIB [perturbed]".into());
    };
    let mib: usize = mib.parse()?;
    let perturbed = args.get(3).is_some_and(|a| a == "perturbed");
    const PER: usize = 64 << 20;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut left = mib << 20;
    let mut tensors = Vec::new();
    let mut change: u64 = 7;
    while left > 0 {
        let bytes = left.min(PER);
        let n = bytes / 4;
        let mut data = Vec::with_capacity(n * 4);
        for _ in 0..n {
            // The sum of four uniforms: close enough to normal.
            let r = next();
            let s: f32 = (0..4)
                .map(|k| ((r >> (16 * k)) & 0xFFFF) as f32 / 65535.0 - 0.5)
                .sum();
            let mut v = s * 0.02 * 1.732;
            if perturbed {
                change = change.wrapping_mul(6364136223846793005).wrapping_add(1);
                if change >> 60 < 2 {
                    v += 1e-4;
                }
            }
            data.extend_from_slice(&v.to_le_bytes());
        }
        let name = format!("model.layers.{}.mlp.w", tensors.len());
        tensors.push(OwnedTensor {
            spec: TensorSpec::new(name, Dtype::F32, vec![(n / 1024) as u64, 1024]),
            data,
        });
        left -= bytes;
    }
    let options = WriteOptions::default().with_sync(false);
    tensorfile::save(out, &tensors, None, &options)?;
    Ok(())
}
