//! Mutated fixtures never panic the zip reader, the pickle interpreter or
//! the checkpoint loader: every outcome is a value or an error. (The cargo
//! fuzz targets in `fuzz/` do the same, unbounded.)

use std::path::PathBuf;
use tensorfile_testkit::Rng;

use tensorfile_core::source::ByteSource;
use tensorfile_pytorch::fuzzing::pickle;
use tensorfile_pytorch::{Checkpoint, LoadOptions};
use tensorfile_zip::ZipIndex;

/// Bytes that are not lent: the loader reads them by range, as from a file.
struct Unlent(Vec<u8>);

impl ByteSource for Unlent {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.as_slice().read_exact_at(offset, buf)
    }
}

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/pytorch"
    ));
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pt"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    match rng.below(4) {
        0 => v.truncate(rng.below(v.len() + 1)),
        1 => {
            for _ in 0..1 + rng.below(4) {
                if !v.is_empty() {
                    let i = rng.below(v.len());
                    v[i] = [0, 0xff, 0x7f, 0x80, rng.next_u64() as u8][rng.below(5)];
                }
            }
        }
        2 => {
            // Overwrite a little-endian length-like field with a big value.
            if v.len() >= 4 {
                let i = rng.below(v.len() - 3);
                let big = [0xff, 0xff, 0xff, 0x7f];
                v[i..i + 4].copy_from_slice(&big);
            }
        }
        _ => {
            // Duplicate a chunk.
            if !v.is_empty() {
                let a = rng.below(v.len());
                let b = (a + 1 + rng.below(64)).min(v.len());
                let chunk = v[a..b].to_vec();
                let at = rng.below(v.len());
                v.splice(at..at, chunk);
            }
        }
    }
    v
}

fn options() -> LoadOptions {
    LoadOptions::default().with_max_expanded_bytes(1 << 20)
}

fn load_everything(bytes: Vec<u8>) {
    let lent = Checkpoint::from_bytes(bytes.clone(), &options());
    let read = Checkpoint::from_source(Unlent(bytes), "mutated", &options());
    assert_eq!(lent.is_ok(), read.is_ok());
    let (Ok(lent), Ok(read)) = (lent, read) else {
        return;
    };
    for (t, u) in lent.tensors().zip(read.tensors()) {
        let (a, b) = (t.bytes(), u.bytes());
        if let (Ok(a), Ok(b)) = (&a, &b) {
            assert_eq!(a.len() as u64, t.nbytes(), "{}", t.name());
            assert!(a == b, "{}: read and lent bytes differ", t.name());
        }
    }
}

#[test]
fn mutated_checkpoints_never_panic() {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    for (_, bytes) in fixtures() {
        let rounds = if bytes.len() > 100_000 { 30 } else { 300 };
        for _ in 0..rounds {
            let m = mutate(&mut rng, &bytes);
            load_everything(m.clone());
            if let Ok(zip) = ZipIndex::parse(&m) {
                for e in zip.entries() {
                    let _ = e.read(&&m[..], 64 << 20);
                }
            }
        }
    }
}

#[test]
fn mutated_pickles_never_panic() {
    let mut rng = Rng::new(42);
    // Legacy checkpoints are not zips: counted, so that a fixture set
    // without a zip pickle cannot pass without mutating one.
    let mut pickles = 0;
    for (_, bytes) in fixtures() {
        let Ok(zip) = ZipIndex::parse(&bytes) else {
            continue;
        };
        for e in zip.entries().iter().filter(|e| e.name.ends_with(".pkl")) {
            let Ok(pkl) = e.read(&&bytes[..], 64 << 20) else {
                continue;
            };
            pickles += 1;
            for _ in 0..200 {
                let m = mutate(&mut rng, &pkl);
                let _ = pickle(&m);
            }
        }
    }
    assert!(pickles >= 10, "{pickles} pickles mutated");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng::new(7);
    for len in [0usize, 1, 8, 15, 22, 64, 300, 4096] {
        for _ in 0..50 {
            let mut v: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            load_everything(v.clone());
            let _ = pickle(&v);
            // With a valid-looking start, so the deeper paths run too.
            if len >= 4 {
                v[..4].copy_from_slice(b"PK\x03\x04");
                load_everything(v.clone());
                v[0] = 0x80;
                v[1] = 2;
                load_everything(v);
            }
        }
    }
}
