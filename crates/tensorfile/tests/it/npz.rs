//! `.npy` and `.npz` against the files numpy 2.4.6 wrote
//! (`tests/fixtures/npz`, see its manifest), and hostile files.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tensorfile::npz::{
    npz_to_safetensors, save_npy, save_npz, FromNpzOptions, NpzError, NpzFile, NpzLimits,
    NpzWriteOptions,
};
use tensorfile::{Dtype, SafeTensors, TensorData, TensorRef, WriteOptions};

/// `tests/fixtures/npz`.
fn npz_fixtures() -> PathBuf {
    tensorfile_testkit::fixture("npz")
}

fn manifest() -> serde_json::Value {
    let text = std::fs::read(npz_fixtures().join("manifest.json")).unwrap();
    serde_json::from_slice(&text).unwrap()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// All of a tensor's bytes, through `produce`; checks that `read_at` of
/// an odd range gives the same bytes.
fn bytes_of(t: &impl TensorData<tensorfile::Error>) -> Vec<u8> {
    let mut all = vec![0u8; t.byte_len() as usize];
    t.produce(&mut |at, piece| {
        all[at as usize..at as usize + piece.len()].copy_from_slice(piece);
        Ok(())
    })
    .unwrap();
    if all.len() > 3 {
        let mut mid = vec![0u8; all.len() - 3];
        t.read_at(1, &mut mid[..all.len() - 3]).unwrap();
        assert_eq!(mid, all[1..all.len() - 2], "{}", t.name());
    }
    all
}

fn quick() -> WriteOptions {
    WriteOptions::default().with_sync(false)
}

fn npz_opts(compress: bool) -> NpzWriteOptions {
    NpzWriteOptions::default()
        .with_compress(compress)
        .with_sync(false)
}

#[test]
fn every_npy_fixture_reads_as_np_load_gives_it() {
    let mut checked = 0;
    for (key, e) in manifest()["npy"].as_object().unwrap() {
        if e["expect"] != "ok" {
            continue;
        }
        let path = npz_fixtures().join(e["file"].as_str().unwrap());
        let file = NpzFile::open(&path).unwrap();
        let tensors = file.tensors(None).unwrap();
        assert_eq!(tensors.len(), 1);
        let t = &tensors[0];
        assert_eq!(t.name(), key);
        assert_eq!(t.dtype().name(), e["safetensors_dtype"], "{key}");
        let shape: Vec<u64> = serde_json::from_value(e["shape"].clone()).unwrap();
        assert_eq!(t.shape(), shape, "{key}");
        assert_eq!(sha(&bytes_of(t)), e["data_sha256_le_c"], "{key}");
        checked += 1;
    }
    assert!(checked >= 29, "{checked}");
}

#[test]
fn opaque_arrays_say_they_need_a_dtype_and_read_as_the_one_given() {
    let m = manifest();
    let cases = [
        ("mldtypes_bfloat16", Dtype::BF16),
        ("mldtypes_float8_e4m3fn", Dtype::F8_E4M3),
        ("mldtypes_float8_e5m2", Dtype::F8_E5M2),
        ("mldtypes_float8_e8m0fnu", Dtype::F8_E8M0),
        ("mldtypes_float4_e2m1fn", Dtype::F4),
    ];
    for (key, dtype) in cases {
        let e = &m["npy"][key];
        let path = npz_fixtures().join(e["file"].as_str().unwrap());
        let file = NpzFile::open(&path).unwrap();
        let err = file.tensors(None).unwrap_err();
        assert!(matches!(err.npz(), Some(NpzError::Opaque { .. })), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(e["descr"].as_str().unwrap()) && text.contains("--dtype"),
            "{text}"
        );
        assert!(text.contains(path.to_str().unwrap()), "{text}");
        let t = &file.tensors(Some(dtype)).unwrap()[0];
        assert_eq!(t.dtype(), dtype);
        let stored =
            std::fs::read(&path).unwrap()[e["data_offset"].as_u64().unwrap() as usize..].to_vec();
        let got = bytes_of(t);
        if dtype == Dtype::F4 {
            // One value per byte (the low nibble), packed two per byte.
            let packed: Vec<u8> = stored
                .chunks(2)
                .map(|c| (c[0] & 15) | (c[1] << 4))
                .collect();
            assert_eq!(got, packed);
        } else {
            assert_eq!(got, stored, "{key}");
        }
        // A dtype its items cannot hold.
        let wrong = if dtype == Dtype::BF16 {
            Dtype::F8_E4M3
        } else {
            Dtype::F16
        };
        let err = file.tensors(Some(wrong)).unwrap_err();
        assert!(
            matches!(err.npz(), Some(NpzError::OpaqueWidth { .. })),
            "{err}"
        );
    }
}

#[test]
fn dtypes_safetensors_has_not_are_refused_by_name() {
    let m = manifest();
    for (key, words) in [
        ("refuse_object_pickle", "pickle"),
        ("refuse_structured", "structured"),
        ("refuse_structured_utf8_v3", "structured"),
        ("refuse_structured_v2_auto", "structured"),
        ("refuse_c128", "complex"),
        ("refuse_unicode", "string"),
        ("refuse_bytes", "string"),
        ("refuse_datetime", "datetime"),
    ] {
        let e = &m["npy"][key];
        let path = npz_fixtures().join(e["file"].as_str().unwrap());
        let err = NpzFile::open(&path).unwrap_err();
        assert!(
            matches!(err.npz(), Some(NpzError::Dtype { .. })),
            "{key}: {err}"
        );
        assert!(err.to_string().contains(words), "{key}: {err}");
    }
    let err = NpzFile::open(npz_fixtures().join("refuse_savez_object.npz")).unwrap_err();
    assert!(
        matches!(err.npz(), Some(NpzError::Dtype { array, reason, .. })
            if array == "obj" && reason.contains("pickle")),
        "{err}"
    );
}

#[test]
fn every_npz_fixture_reads_as_np_load_gives_it() {
    let mut checked = 0;
    for (key, e) in manifest()["npz"].as_object().unwrap() {
        if e["expect"] != "ok" {
            continue;
        }
        let file = NpzFile::open(npz_fixtures().join(e["file"].as_str().unwrap())).unwrap();
        let names: Vec<&str> = file.arrays().iter().map(|a| a.name.as_str()).collect();
        let expected: Vec<&str> = e["np_load_files"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(names, expected, "{key}");
        for t in file.tensors(Some(Dtype::BF16)).unwrap() {
            let member = &e["members"][format!("{}.npy", t.name())];
            assert_eq!(
                sha(&bytes_of(&t)),
                member["data_sha256_le_c"],
                "{key} {}",
                t.name()
            );
        }
        checked += 1;
    }
    assert!(checked >= 6, "{checked}");
}

#[test]
fn np_savez_and_np_save_files_are_written_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest();
    let mut checked = 0;
    for (key, e) in m["npz"].as_object().unwrap() {
        // savez_layouts holds Fortran and big-endian members, which come
        // back C-order little-endian: the same arrays, not the same bytes.
        if e["written_with"] != "np.savez" || e["expect"] != "ok" || key == "savez_layouts" {
            continue;
        }
        let path = npz_fixtures().join(e["file"].as_str().unwrap());
        let file = NpzFile::open(&path).unwrap();
        let out = dir.path().join(format!("{key}.npz"));
        save_npz(&out, &file.tensors(None).unwrap(), &npz_opts(false), &()).unwrap();
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(&path).unwrap(),
            "{key}"
        );
        checked += 1;
    }
    assert!(checked >= 5, "{checked}");
    checked = 0;
    for (key, e) in m["npy"].as_object().unwrap() {
        let plain = e["expect"] == "ok" || e["expect"] == "ambiguous";
        let as_numpy_saves = e["version"] == serde_json::json!([1, 0])
            && e["fortran_order"] == false
            && !e["descr"].as_str().unwrap_or(">").starts_with('>');
        if !plain || !as_numpy_saves || key == "mldtypes_float4_e2m1fn" {
            continue;
        }
        let path = npz_fixtures().join(e["file"].as_str().unwrap());
        let file = NpzFile::open(&path).unwrap();
        let opaque = match key.as_str() {
            "mldtypes_bfloat16" => Some(Dtype::BF16),
            "mldtypes_float8_e5m2" => Some(Dtype::F8_E5M2),
            _ => Some(Dtype::F8_E4M3),
        };
        let t = &file.tensors(opaque).unwrap()[0];
        let out = dir.path().join(format!("{key}.npy"));
        save_npy(&out, t, false, &()).unwrap();
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(&path).unwrap(),
            "{key}"
        );
        checked += 1;
    }
    assert!(checked >= 20, "{checked}");
}

/// Every dtype, in a safetensors file made in memory.
fn every_dtype() -> Vec<(String, Dtype, Vec<u64>, Vec<u8>)> {
    Dtype::ALL
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            let shape = vec![2u64, 4];
            let len = d.byte_len(8).unwrap() as usize;
            let data = (0..len).map(|k| (k * 37 + i * 11) as u8).collect();
            (format!("t.{}", d.name()), d, shape, data)
        })
        .collect()
}

#[test]
fn safetensors_to_npz_and_back_gives_the_same_tensors() {
    let dir = tempfile::tempdir().unwrap();
    for compress in [false, true] {
        for (name, dtype, shape, data) in every_dtype() {
            let t = TensorRef {
                name: &name,
                dtype,
                shape: &shape,
                data: &data,
            };
            let npz = dir.path().join(format!("{name}.npz"));
            save_npz(&npz, &[t], &npz_opts(compress), &()).unwrap();
            let file = NpzFile::open(&npz).unwrap();
            let back = &file.tensors(Some(dtype)).unwrap()[0];
            assert_eq!(
                (back.name(), back.dtype(), back.shape()),
                (name.as_str(), dtype, &shape[..])
            );
            assert_eq!(bytes_of(back), data, "{name} compress={compress}");
            // And through safetensors, in a plan.
            let st = dir.path().join(format!("{name}.safetensors"));
            let opts = FromNpzOptions::default()
                .with_opaque(Some(dtype))
                .with_write(quick());
            npz_to_safetensors(&file, &st, &opts, &()).unwrap();
            let st = SafeTensors::open(&st).unwrap();
            let got = st.tensor(&name).unwrap();
            assert_eq!(got.data(), &data[..], "{name}");
        }
    }
}

#[test]
fn npz_to_safetensors_casts_and_shards_like_any_conversion() {
    let dir = tempfile::tempdir().unwrap();
    let file = NpzFile::open(npz_fixtures().join("savez_compressed.npz")).unwrap();
    let out = dir.path().join("bf16.safetensors");
    let opts = FromNpzOptions::default()
        .with_dtype(Some(Dtype::BF16))
        .with_write(quick());
    let s = npz_to_safetensors(&file, &out, &opts, &()).unwrap();
    assert_eq!(s.convert.tensors, file.arrays().len());
    let st = SafeTensors::open(&out).unwrap();
    assert_eq!(st.tensor("weight").unwrap().dtype(), Dtype::BF16);
    assert_eq!(st.tensor("ids").unwrap().dtype(), Dtype::I64);
    let sharded = dir.path().join("set");
    let opts = FromNpzOptions::default()
        .with_max_shard_size(Some(64))
        .with_write(quick());
    let s = npz_to_safetensors(&file, &sharded, &opts, &()).unwrap();
    assert!(s.files.len() > 1 && s.index.is_some(), "{:?}", s.files);
}

// ------------------------------------------------------------ hostile files

fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(data);
    b
}

fn open_bytes(bytes: Vec<u8>) -> tensorfile::Result<NpzFile<Vec<u8>>> {
    NpzFile::from_source(bytes, "x", &NpzLimits::default())
}

fn refused(bytes: Vec<u8>) -> NpzError {
    let err = open_bytes(bytes).map(|_| ()).unwrap_err();
    err.npz()
        .cloned()
        .unwrap_or_else(|| panic!("not an npz error: {err}"))
}

fn archive(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = tensorfile_zip::ZipWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    for (name, data) in members {
        let mut m = zip.start(name, tensorfile_zip::Method::Stored).unwrap();
        m.write_all(data).unwrap();
        m.finish().unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[test]
fn hostile_npy_files_are_refused_by_name_and_place() {
    let h = |shape: &str| format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    // A header length past the end of the file.
    let mut b = npy(&h("(2,)"), &[0; 8]);
    b[8..10].copy_from_slice(&60000u16.to_le_bytes());
    assert!(matches!(refused(b), NpzError::Truncated { .. }));
    // A 4 GiB header (version 2.0) is refused before it is read.
    let mut b = b"\x93NUMPY\x02\x00".to_vec();
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(refused(b), NpzError::HeaderTooLong { .. }));
    // Counts that overflow, and shapes the data does not fill.
    assert!(matches!(
        refused(npy(&h("(4294967296, 4294967296)"), &[])),
        NpzError::Shape { .. }
    ));
    assert!(matches!(
        refused(npy(&h("(4611686018427387904,)"), &[])),
        NpzError::Shape { .. }
    ));
    assert!(matches!(
        refused(npy(&h("(1073741824,)"), &[0; 8])),
        NpzError::DataLength { .. }
    ));
    assert!(matches!(
        refused(npy(&h("(1,)"), &[0; 8])),
        NpzError::DataLength { .. }
    ));
    // Not an array, an unknown version, a header that is code.
    assert!(matches!(
        refused(b"\x93NUMPY\x09\x00\x00\x00".to_vec()),
        NpzError::Version { .. }
    ));
    let code = "{'descr': __import__('os').system('x'), 'fortran_order': False, 'shape': ()}";
    assert!(matches!(refused(npy(code, &[])), NpzError::Header { .. }));
    let deep = format!(
        "{{'descr': {}, 'fortran_order': False, 'shape': ()}}",
        "[".repeat(100_000)
    );
    assert!(matches!(refused(npy(&deep, &[])), NpzError::Header { .. }));
    // Fortran order with a reordering budget that cannot hold a block of
    // one item and its output piece.
    let b = npy(
        "{'descr': '<f4', 'fortran_order': True, 'shape': (64, 64), }",
        &[0; 64 * 64 * 4],
    );
    let limits = NpzLimits {
        max_reorder_bytes: 7,
        ..NpzLimits::default()
    };
    let file = NpzFile::from_source(b, "x", &limits).unwrap();
    let t = &file.tensors(None).unwrap()[0];
    // Through the core's trait the error comes back typed: the npz error
    // itself, with its kind.
    let err = t.produce(&mut |_, _| Ok(())).unwrap_err();
    let expected = NpzError::Memory {
        array: "x".into(),
        bytes: 16384,
        limit: 7,
    };
    assert!(
        matches!(
            &err,
            tensorfile::Error::Npz(e @ NpzError::Memory { array, bytes: 16384, limit: 7 })
                if array == "x" && e.to_string() == expected.to_string()
        ),
        "{err:?}"
    );
    assert_eq!(err.kind(), tensorfile::ErrorKind::Limit);
}

#[test]
fn hostile_archives_are_refused() {
    let ok = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
        &[0; 8],
    );
    // A member that is not an array.
    let err = refused(archive(&[
        ("a.npy", ok.clone()),
        ("notes.txt", b"hi".to_vec()),
    ]));
    assert!(matches!(err, NpzError::NotArray { .. }), "{err}");
    // Members whose bytes overlap: the first one's sizes stretched over
    // the second (central directory entry, sizes at +20 and +24).
    let mut b = archive(&[("a.npy", ok.clone()), ("b.npy", ok.clone())]);
    let cd = b.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    let stretched = (ok.len() as u32 + 100).to_le_bytes();
    b[cd + 20..cd + 24].copy_from_slice(&stretched);
    b[cd + 24..cd + 28].copy_from_slice(&stretched);
    let err = refused(b);
    assert!(matches!(err, NpzError::Overlap { .. }), "{err}");
    // A deflated member that claims to inflate to a terabyte.
    let mut zip = tensorfile_zip::ZipWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let mut m = zip
        .start("bomb.npy", tensorfile_zip::Method::Deflated)
        .unwrap();
    m.write_all(&ok).unwrap();
    m.finish().unwrap();
    let mut b = zip.finish().unwrap().into_inner();
    let cd = b.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    b[cd + 24..cd + 28].copy_from_slice(&(u32::MAX - 1).to_le_bytes());
    let err = refused(b);
    // ZipError::Inflate covers every member that does not inflate as
    // declared; its text says this one was refused before inflating.
    assert!(
        matches!(&err, NpzError::Zip(tensorfile_zip::ZipError::Inflate { entry, what })
            if entry == "bomb.npy" && what.contains("more than deflate can produce")),
        "{err}"
    );
    // A member whose header's shape says more than its bytes hold.
    let lie = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }",
        &[0; 8],
    );
    let err = refused(archive(&[("lie.npy", lie)]));
    assert!(matches!(err, NpzError::DataLength { .. }), "{err}");
}

#[test]
fn every_truncation_of_an_archive_and_an_array_is_an_error() {
    for name in [
        "savez_mixed.npz",
        "savez_compressed.npz",
        "v1_f32_fortran.npy",
        "be_f8_fortran.npy",
    ] {
        let full = std::fs::read(npz_fixtures().join(name)).unwrap();
        // Every proper prefix is refused when opened (an archive's central
        // directory and an array's data are at the end): none is skipped.
        let opened: Vec<usize> = (0..full.len())
            .filter(|&len| open_bytes(full[..len].to_vec()).is_ok())
            .collect();
        assert!(opened.is_empty(), "{name}: prefixes that open: {opened:?}");
    }
}

#[test]
fn errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p: &Path = &dir.path().join("bad.npy");
    std::fs::write(p, npy("{'descr': '<f4'}", &[])).unwrap();
    let err = NpzFile::open(p).unwrap_err();
    assert_eq!(err.path(), Some(p));
}

/// The C-order bytes of a Fortran-order array of `shape` whose item at
/// Fortran position `f` is `item(f)`, by the definition.
fn c_order_model(shape: &[u64], item: impl Fn(u64) -> [u8; 2]) -> Vec<u8> {
    let numel: u64 = shape.iter().product();
    let mut out = Vec::with_capacity(numel as usize * 2);
    for c in 0..numel {
        // C index -> multi-index -> Fortran position.
        let (mut rest, mut f, mut stride) = (c, 0u64, 1u64);
        let mut index = vec![0u64; shape.len()];
        for k in (0..shape.len()).rev() {
            index[k] = rest % shape[k];
            rest /= shape[k];
        }
        for k in 0..shape.len() {
            f += index[k] * stride;
            stride *= shape[k];
        }
        out.extend_from_slice(&item(f));
    }
    out
}

#[test]
fn fortran_arrays_reorder_within_any_budget() {
    let item = |f: u64| (f as u16).wrapping_mul(7).wrapping_add(1).to_le_bytes();
    for shape in [
        vec![5u64, 7],
        vec![3, 4, 5],
        vec![2, 3, 1, 4, 3],
        vec![1, 9, 1],
        vec![40, 1, 3],
        vec![2, 200],
    ] {
        let numel: u64 = shape.iter().product();
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let header = format!(
            "{{'descr': '<u2', 'fortran_order': True, 'shape': ({},), }}",
            dims.join(", ")
        );
        let data: Vec<u8> = (0..numel).flat_map(item).collect();
        let one = npy(&header, &data);
        let expected = c_order_model(&shape, item);
        for method in [
            tensorfile_zip::Method::Stored,
            tensorfile_zip::Method::Deflated,
        ] {
            let mut zip = tensorfile_zip::ZipWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
            let mut m = zip.start("a.npy", method).unwrap();
            m.write_all(&one).unwrap();
            m.finish().unwrap();
            let bytes = zip.finish().unwrap().into_inner();
            // Budgets from one item per block to the whole array at once.
            for budget in [8u64, 12, 30, 100, 1000, 1 << 30] {
                let limits = NpzLimits {
                    max_reorder_bytes: budget,
                    ..NpzLimits::default()
                };
                let file = NpzFile::from_source(bytes.clone(), "x", &limits).unwrap();
                let t = &file.tensors(None).unwrap()[0];
                assert_eq!(
                    bytes_of(t),
                    expected,
                    "shape {shape:?}, {method:?}, budget {budget}"
                );
            }
        }
    }
}
