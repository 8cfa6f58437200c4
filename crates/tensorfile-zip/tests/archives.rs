//! The reader and the writer against the archives numpy 2.4 wrote
//! (`tests/fixtures/npz`, see its manifest): every stored archive is read,
//! and written again member by member gives numpy's bytes exactly; the
//! deflated one reads back the same members with numpy's header layout.

use std::io::{Cursor, Write};
use std::path::PathBuf;

use tensorfile_core::source::{ByteSource, FileSource};
use tensorfile_zip::{Method, ZipError, ZipIndex, ZipWriter};

/// `tests/fixtures/npz`.
fn npz_fixtures() -> PathBuf {
    tensorfile_testkit::fixture("npz")
}

fn manifest() -> serde_json::Value {
    let text = std::fs::read(npz_fixtures().join("manifest.json")).unwrap();
    serde_json::from_slice(&text).unwrap()
}

/// Each member of the archive, read whole.
fn members(bytes: &[u8]) -> Vec<(String, Method, Vec<u8>)> {
    let index = ZipIndex::parse(bytes).unwrap();
    index
        .entries()
        .iter()
        .map(|e| (e.name.clone(), e.method, e.read(&bytes, 1 << 30).unwrap()))
        .collect()
}

fn rewrite(members: &[(String, Method, Vec<u8>)]) -> Vec<u8> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new())).unwrap();
    for (name, method, data) in members {
        let mut m = zip.start(name, *method).unwrap();
        // In uneven pieces, as a streaming writer would.
        for piece in data.chunks(7) {
            m.write_all(piece).unwrap();
        }
        m.finish().unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[test]
fn stored_archives_are_written_byte_for_byte_as_numpy_writes_them() {
    let manifest = manifest();
    let mut checked = 0;
    for (key, entry) in manifest["npz"].as_object().unwrap() {
        if entry["written_with"] != "np.savez" {
            continue;
        }
        let bytes = std::fs::read(npz_fixtures().join(entry["file"].as_str().unwrap())).unwrap();
        let found = members(&bytes);
        let names: Vec<&str> = found.iter().map(|m| m.0.as_str()).collect();
        let expected: Vec<&str> = entry["zip"]
            .as_array()
            .unwrap()
            .iter()
            .map(|z| z["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, expected, "{key}");
        let index = ZipIndex::parse(&bytes).unwrap();
        for (e, z) in index.entries().iter().zip(entry["zip"].as_array().unwrap()) {
            assert_eq!(e.data_offset, z["data_offset"].as_u64().unwrap(), "{key}");
            assert_eq!(format!("0x{:08x}", e.crc32), z["crc32"], "{key}");
        }
        assert_eq!(rewrite(&found), bytes, "{key}: not numpy's bytes");
        checked += 1;
    }
    assert!(checked >= 6, "only {checked} np.savez archives");
}

#[test]
fn deflated_members_are_numpys_bytes() {
    // np.savez_compressed deflates with zlib (level 6, raw, window 15):
    // the same members written again are the same archive, byte for byte.
    let path = npz_fixtures().join("savez_compressed.npz");
    let bytes = std::fs::read(path).unwrap();
    let found = members(&bytes);
    assert!(found.iter().all(|m| m.1 == Method::Deflated));
    let ours = rewrite(&found);
    assert_eq!(members(&ours), found);
    let first = ours.iter().zip(&bytes).position(|(a, b)| a != b);
    assert!(
        ours == bytes,
        "not numpy's bytes: {} against {}, first difference at {first:?}",
        ours.len(),
        bytes.len()
    );
}

#[test]
fn more_than_65535_members_get_the_zip64_end_records() {
    let members: Vec<(String, Method, Vec<u8>)> = (0..70_000)
        .map(|i| (format!("m{i}"), Method::Stored, vec![i as u8]))
        .collect();
    let bytes = rewrite(&members);
    // The ZIP64 end record and locator precede the classic one.
    let eocd = bytes.len() - 22;
    assert_eq!(bytes[eocd - 20..eocd - 16], [0x50, 0x4b, 0x06, 0x07]);
    assert_eq!(bytes[eocd + 8..eocd + 12], [0xff, 0xff, 0xff, 0xff]);
    let index = ZipIndex::parse(&bytes).unwrap();
    assert_eq!(index.entries().len(), 70_000);
    let e = index.get("m69999").unwrap();
    assert_eq!(e.read(&&bytes[..], 1).unwrap(), [(69_999u32 % 256) as u8]);
}

#[test]
fn a_member_name_used_twice_is_refused() {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new())).unwrap();
    zip.start("a", Method::Stored).unwrap().finish().unwrap();
    let e = zip.start("a", Method::Deflated).unwrap_err();
    // ZipError::Write covers every refused write; its text says which.
    assert!(
        matches!(&e, ZipError::Write { what, message }
            if what == "member \"a\"" && message.contains("already written")),
        "{e}"
    );
}

#[test]
fn a_member_over_the_read_limit_is_refused_before_allocating() {
    let bytes = rewrite(&[("big".into(), Method::Deflated, vec![0u8; 100_000])]);
    let index = ZipIndex::parse(&bytes).unwrap();
    let e = index.entries()[0].read(&&bytes[..], 99_999).unwrap_err();
    assert!(
        matches!(
            e,
            ZipError::Limit {
                needed: 100_000,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_file_truncated_after_indexing_is_a_read_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.zip");
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(
        &path,
        rewrite(&[
            ("stored".into(), Method::Stored, data.clone()),
            ("deflated".into(), Method::Deflated, data),
        ]),
    )
    .unwrap();
    let source = FileSource::open(&path).unwrap();
    let index = ZipIndex::read(&source).unwrap();
    assert_eq!(index.archive_len(), source.len());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1000)
        .unwrap();
    for e in index.entries() {
        let err = e.read(&source, 1 << 20).unwrap_err();
        let io = err.io_error().unwrap_or_else(|| panic!("{err}"));
        assert_eq!(io.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
        assert!(
            matches!(&err, ZipError::Read { kind: std::io::ErrorKind::UnexpectedEof, message, .. }
                if message.contains("changed or truncated")),
            "{err}"
        );
    }
}
