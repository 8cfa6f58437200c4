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

use tensorfile::{Dtype, WriteOptions};
use tensorfile_core::plan::OwnedTensor;
use tensorfile_core::writer::TensorSpec;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(out), Some(mib)) = (args.get(1), args.get(2)) else {
        return Err("usage: make_f32_file OUT MIB [perturbed]".into());
    };
    let mib: usize = mib.parse()?;
    let perturbed = args.get(3).is_some_and(|a| a == "perturbed");
    const PER: usize = 64 << 20;
    let mut rng = tensorfile_testkit::Rng::new(0x9E37_79B9_7F4A_7C15);
    // Which elements change: a second stream, so that the values are the
    // same with and without `perturbed`.
    let mut changes = tensorfile_testkit::Rng::new(7);
    let mut next = move || rng.next_u64();
    let mut left = mib << 20;
    let mut tensors = Vec::new();
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
            if perturbed && changes.below(10) == 0 {
                v += 1e-4;
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
