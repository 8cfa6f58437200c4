//! Arbitrary bytes and mutated valid files never make the reader or the
//! slicer panic: every input gets a value or a typed error.

use std::fs;
use std::path::Path;
use tensorfile::Decode;
use tensorfile_testkit::Rng;

use tensorfile::{ReadOptions, SafeTensors, SliceArg};

/// Reads `bytes` every way and slices every tensor with random arguments;
/// returns how many slices were made and checked.
fn exercise(bytes: &[u8], rng: &mut Rng) -> usize {
    let _ = tensorfile::read_header(std::io::Cursor::new(bytes), &ReadOptions::default());
    let Ok(file) = SafeTensors::from_source(bytes.to_vec(), &Default::default()) else {
        return 0;
    };
    let mut checked = 0;
    for t in file.tensors() {
        let _ = t.to_f32_vec();
        let _ = t.as_slice::<f32>();
        let args: Vec<SliceArg> = (0..rng.below(4))
            .map(|_| {
                let [a, b, c, d, e] = [(); 5].map(|()| rng.next_u64());
                let v = |x: u64| (x as i64) % 9 - 4;
                if a % 3 == 0 {
                    SliceArg::Index(v(b))
                } else {
                    let start = (c % 2 == 0).then(|| v(b));
                    let stop = (d % 2 == 0).then(|| v(e));
                    SliceArg::Range {
                        start,
                        stop,
                        step: rng.next_u64() % 4,
                    }
                }
            })
            .collect();
        if let Ok(s) = t.slice(&args) {
            assert_eq!(s.to_vec().len() as u64, s.nbytes());
            checked += 1;
        }
    }
    checked
}

/// Mutates a file: flips, overwrites with JSON-significant bytes, inserts,
/// deletes, truncates, or rewrites the length prefix.
fn mutate(original: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = original.to_vec();
    const TOKENS: &[u8] = b"{}[]\",:0123456789-.eE \\u\x00\xff";
    for _ in 0..1 + rng.below(4) {
        let len = b.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                b[i] = TOKENS[rng.below(TOKENS.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                b.insert(i, TOKENS[rng.below(TOKENS.len())]);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                b.remove(i);
            }
            4 => b.truncate(rng.below(len + 1)),
            5 if len >= 8 => {
                let n = match rng.below(3) {
                    0 => rng.next_u64(),
                    1 => (len as u64)
                        .wrapping_sub(8)
                        .wrapping_add(rng.below(5) as u64)
                        .wrapping_sub(2),
                    _ => u64::from_le_bytes(b[..8].try_into().unwrap()) ^ (1 << rng.below(64)),
                };
                b[..8].copy_from_slice(&n.to_le_bytes());
            }
            _ => {}
        }
    }
    b
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let len = rng.below(64);
        let mut b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        if len >= 8 && rng.next_u64().is_multiple_of(2) {
            // A plausible length prefix, so the JSON parser gets exercised.
            b[..8].copy_from_slice(&((len - 8) as u64).to_le_bytes());
        }
        // Random bytes exercise the header parser; few are files whose
        // tensors slice, so none is required here.
        exercise(&b, &mut rng);
    }
}

#[test]
fn mutated_valid_files_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/valid");
    let mut rng = Rng::new(0x1234_5678_9abc_def1);
    let mut seeds = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors")
            && fs::metadata(&path).unwrap().len() < 64 * 1024
        {
            seeds.push(fs::read(&path).unwrap());
        }
    }
    assert!(!seeds.is_empty());
    let mut sliced = 0;
    for round in 0..4000 {
        let seed = &seeds[round % seeds.len()];
        let mutated = mutate(seed, &mut rng);
        sliced += exercise(&mutated, &mut rng);
    }
    // Many mutations still read: their slices were checked, not skipped.
    assert!(sliced > 500, "{sliced} slices checked");
}
