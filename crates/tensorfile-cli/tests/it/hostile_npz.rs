//! Hostile `.npz` archives through `convert`, each built here: deflate
//! bombs in Fortran order (reordered in bounded memory) and members whose
//! bytes do not match their CRC-32 (refused, as `np.load` refuses them).

use std::fs;
use std::io::Write;
use std::path::Path;

use tensorfile_testkit::{entries, run_limited, Limits};

/// Decompression bombs: 1.2 GiB peak RSS under a 2 GiB address-space
/// limit (the point), and 180 s per 2 GiB of output, a guard against a
/// hang rather than a speed test: about 10 s on a quiet machine, 65-75 s
/// seen with the 2 cores shared by other builds (60 s failed there).
const BOMB: Limits = Limits {
    seconds: 180.0,
    max_rss: 1229 << 20,
    address_space: 2 << 30,
};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A `.npy` header (format 1.0) for `descr`, order and shape.
fn npy_header(descr: &str, fortran: bool, shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let order = if fortran { "True" } else { "False" };
    let mut dict = format!(
        "{{'descr': '{descr}', 'fortran_order': {order}, 'shape': ({},), }}",
        dims.join(", ")
    );
    // Padded to 64 bytes with spaces and a newline, as numpy does.
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h
}

/// A zip archive of one member (no ZIP64: every size under 4 GiB).
fn zip_one(name: &str, method: u16, crc: u32, data: &[u8], size: u64) -> Vec<u8> {
    let size = u32::try_from(size).unwrap();
    let packed = u32::try_from(data.len()).unwrap();
    let name_len = name.len() as u16;
    let mut local = Vec::new();
    local.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    for v in [20u16, 0, method, 0, 0] {
        local.extend_from_slice(&v.to_le_bytes());
    }
    for v in [crc, packed, size] {
        local.extend_from_slice(&v.to_le_bytes());
    }
    local.extend_from_slice(&name_len.to_le_bytes());
    local.extend_from_slice(&0u16.to_le_bytes());
    local.extend_from_slice(name.as_bytes());
    let mut central = Vec::new();
    central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
    for v in [20u16, 20, 0, method, 0, 0] {
        central.extend_from_slice(&v.to_le_bytes());
    }
    for v in [crc, packed, size] {
        central.extend_from_slice(&v.to_le_bytes());
    }
    for v in [name_len, 0, 0, 0, 0] {
        central.extend_from_slice(&v.to_le_bytes());
    }
    central.extend_from_slice(&0u32.to_le_bytes());
    central.extend_from_slice(&0u32.to_le_bytes());
    central.extend_from_slice(name.as_bytes());
    let cd_offset = (local.len() + data.len()) as u32;
    let mut out = local;
    out.extend_from_slice(data);
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    for v in [0u16, 0, 1, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// The raw deflate stream of `header` then `mib` MiB of zeros, and its
/// CRC-32, built fast: the encoding of one MiB of zeros after zeros,
/// ended by a sync flush (byte-aligned, referring only to zeros), is
/// repeated.
fn deflated_zeros(header: &[u8], mib: u64) -> (Vec<u8>, u32) {
    let zeros = vec![0u8; 1 << 20];
    let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(header).unwrap();
    enc.flush().unwrap();
    enc.write_all(&zeros).unwrap();
    enc.flush().unwrap();
    let first = enc.get_ref().len();
    enc.write_all(&zeros).unwrap();
    enc.flush().unwrap();
    let second = enc.get_ref().len();
    let all = enc.finish().unwrap();
    let (head, repeat, tail) = (&all[..first], &all[first..second], &all[second..]);
    let mut out = head.to_vec();
    for _ in 1..mib {
        out.extend_from_slice(repeat);
    }
    out.extend_from_slice(tail);
    let mut crc = flate2::Crc::new();
    crc.update(header);
    for _ in 0..mib {
        crc.update(&zeros);
    }
    (out, crc.sum())
}

/// An `.npz` of one deflated Fortran-order f32 member `w` of `shape`
/// (zeros), written to `path`; returns its data bytes.
fn fortran_bomb(path: &Path, shape: &[u64]) -> u64 {
    let bytes: u64 = 4 * shape.iter().product::<u64>();
    assert_eq!(bytes % (1 << 20), 0);
    let header = npy_header("<f4", true, shape);
    let (data, crc) = deflated_zeros(&header, bytes >> 20);
    let size = header.len() as u64 + bytes;
    fs::write(path, zip_one("w.npy", 8, crc, &data, size)).unwrap();
    bytes
}

/// The data section of a safetensors file is all zeros after its header.
fn assert_zeros_after_header(path: &Path, data_len: u64) {
    let file = fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    let mut n = [0u8; 8];
    std::io::Read::read_exact(&mut &file, &mut n).unwrap();
    let header = u64::from_le_bytes(n);
    assert_eq!(len, 8 + header + data_len, "{}", path.display());
    // Spot checks: the first and last MiB of the data, and one between.
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    for at in [8 + header, 8 + header + data_len / 3, len - (1 << 20)] {
        file.read_exact_at(&mut buf, at).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "non-zero data at {at}");
    }
}

/// Writes 2 GiB twice (removed between): about 10 s each in a debug build,
/// against 180 s allowed (see `BOMB`).
#[test]
fn a_fortran_order_deflate_bomb_converts_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let bomb = tmp.path().join("bomb.npz");
    // 2 GiB of zeros in about 2 MB: a 2-D and a 3-D Fortran array.
    for (shape, set) in [
        (&[32768u64, 16384][..], false),
        (&[8, 4096, 16384][..], true),
    ] {
        let bytes = fortran_bomb(&bomb, shape);
        assert!(fs::metadata(&bomb).unwrap().len() < 8 << 20);
        let out = tmp.path().join(if set { "set" } else { "w.safetensors" });
        let mut args = vec!["convert", "--no-sync", p(&bomb), p(&out)];
        if set {
            args.extend(["--max-shard-size", "1GB"]);
        }
        let r = run_limited(env!("CARGO_BIN_EXE_tensorfile"), &args, BOMB);
        r.assert_within(BOMB, &format!("Fortran bomb {shape:?}"));
        assert_eq!(r.code, Some(0), "{shape:?}: {}", r.stderr);
        eprintln!(
            "Fortran bomb {shape:?}: {:.1} s, peak RSS {} MiB",
            r.seconds,
            r.max_rss >> 20
        );
        let written = if set {
            let files: Vec<_> = entries(&out)
                .into_iter()
                .filter(|n| n.ends_with(".safetensors"))
                .collect();
            assert_eq!(files.len(), 1, "{files:?}");
            out.join(&files[0])
        } else {
            out.clone()
        };
        assert_zeros_after_header(&written, bytes);
        if set {
            fs::remove_dir_all(&out).unwrap();
        } else {
            fs::remove_file(&out).unwrap();
        }
    }
}

#[test]
fn a_member_whose_bytes_do_not_match_its_crc_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut data = npy_header("<f4", false, &[1000]);
    data.extend((0..1000u32).flat_map(|i| (i as f32).to_le_bytes()));
    let mut crc = flate2::Crc::new();
    crc.update(&data);
    let crc = crc.sum();
    let mut deflated = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    deflated.write_all(&data).unwrap();
    let deflated = deflated.finish().unwrap();
    let size = data.len() as u64;
    // One data byte flipped: in the stored bytes, and in the deflated
    // member's inflated bytes (a flipped literal in the stream would be
    // refused as invalid deflate data before its CRC is computed).
    let mut flipped = data.clone();
    flipped[600] ^= 0x01;
    let mut flipped_deflated =
        flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    flipped_deflated.write_all(&flipped).unwrap();
    let flipped_deflated = flipped_deflated.finish().unwrap();
    for (what, method, bytes) in [
        ("stored", 0u16, &flipped),
        ("deflated", 8, &flipped_deflated),
    ] {
        let npz = tmp.path().join(format!("{what}.npz"));
        fs::write(&npz, zip_one("w.npy", method, crc, bytes, size)).unwrap();
        let out_dir = tmp.path().join(format!("out-{what}"));
        fs::create_dir(&out_dir).unwrap();
        for dtype in [None, Some("bf16")] {
            let out = out_dir.join("w.safetensors");
            let mut args = vec!["convert", p(&npz), p(&out)];
            if let Some(d) = dtype {
                args.extend(["--dtype", d]);
            }
            let r = run_limited(env!("CARGO_BIN_EXE_tensorfile"), &args, Limits::HOSTILE);
            r.assert_within(Limits::HOSTILE, what);
            assert_eq!(r.code, Some(1), "{what} {dtype:?}: {}", r.stderr);
            assert!(
                r.stderr.contains("CRC-32")
                    && r.stderr.contains(&format!("{crc:08x}"))
                    && r.stderr.contains("w.npy")
                    && r.stderr.contains(&format!("{what}.npz")),
                "{what}: {}",
                r.stderr
            );
            assert!(
                entries(&out_dir).is_empty(),
                "{what}: {:?}",
                entries(&out_dir)
            );
        }
    }
    // The same archives with the right bytes convert.
    for (method, bytes) in [(0u16, &data), (8, &deflated)] {
        let npz = tmp.path().join("good.npz");
        fs::write(&npz, zip_one("w.npy", method, crc, bytes, size)).unwrap();
        let out = tmp.path().join("good.safetensors");
        let r = run_limited(
            env!("CARGO_BIN_EXE_tensorfile"),
            ["convert", p(&npz), p(&out)],
            Limits::HOSTILE,
        );
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        fs::remove_file(&out).unwrap();
    }
}
