//! Bounded random runs of the `gguf_convert` and `dcp` targets, for
//! machines without cargo-fuzz: the corpus seeds, each mutated many times
//! (bytes replaced, inserted, removed), through the target's body.

use std::path::Path;

/// xorshift64*: a fixed, dependency-free sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `runs` inputs (the variable `env` can raise it) made by mutating the
/// seeds of `fuzz/corpus/<name>/`, each through `target`: none may panic.
fn mutated_seeds_pass(name: &str, target: fn(&[u8]), env: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name);
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the {name} corpus: {e}"))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty());
    let runs: usize = std::env::var(env)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..runs {
        let mut input = seeds[i % seeds.len()].clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(input.len() + 1);
            match rng.below(3) {
                0 if at < input.len() => input[at] = rng.next() as u8,
                1 => input.insert(at, rng.next() as u8),
                _ if at < input.len() => {
                    input.remove(at);
                }
                _ => input.push(rng.next() as u8),
            }
        }
        let result = std::panic::catch_unwind(|| target(&input));
        assert!(result.is_ok(), "{name}: input {input:?} panicked");
    }
}

#[test]
fn mutated_seeds_of_gguf_convert_pass() {
    mutated_seeds_pass(
        "gguf_convert",
        tensorfile_fuzz_targets::gguf_convert,
        "GGUF_CONVERT_RUNS",
    );
}

#[test]
fn mutated_seeds_of_dcp_pass() {
    mutated_seeds_pass("dcp", tensorfile_fuzz_targets::dcp, "DCP_RUNS");
}
