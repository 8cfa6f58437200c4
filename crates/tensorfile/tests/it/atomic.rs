//! Atomic saves: failures leave the old file and no litter; modes; mapped readers.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tensorfile::{
    save, serialize, Dtype, Metadata, TensorRef, TensorSpec, WriteError, WriteOptions,
};
use tensorfile_core::save_streaming;
use tensorfile_core::Error;
use tensorfile_testkit::entries;

const OLD: &[u8] = b"the old file, which must survive";

/// A directory holding `m.safetensors` with the old contents.
fn with_old_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    fs::write(&path, OLD).unwrap();
    (dir, path)
}

fn assert_untouched(dir: &Path, path: &Path) {
    assert_eq!(fs::read(path).unwrap(), OLD);
    assert_eq!(entries(dir), ["m.safetensors"]);
}

fn specs() -> Vec<TensorSpec> {
    vec![
        TensorSpec::new("a", Dtype::F32, [1024]),
        TensorSpec::new("b", Dtype::U8, [10]),
    ]
}

/// Yields `good` bytes, then fails.
struct BrokenSource {
    good: usize,
}

impl Read for BrokenSource {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.good == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "source vanished",
            ));
        }
        let n = buf.len().min(self.good).min(100);
        buf[..n].fill(1);
        self.good -= n;
        Ok(n)
    }
}

#[test]
fn a_source_that_fails_mid_stream_leaves_the_old_file() {
    let (dir, path) = with_old_file();
    let err = save_streaming(&path, &specs(), None, &WriteOptions::default(), |w| {
        w.write_from("a", BrokenSource { good: 1000 })?;
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(
        &err,
        Error::Write(WriteError::Input { tensor, received: 1000, expected: 4096, .. }) if tensor == "a"
    ));
    assert_untouched(dir.path(), &path);
}

#[test]
fn short_and_long_streams_leave_the_old_file() {
    let (dir, path) = with_old_file();
    // Short: `b` never written.
    let err = save_streaming(&path, &specs(), None, &WriteOptions::default(), |w| {
        w.write(&[0; 4096])
    })
    .unwrap_err();
    assert!(
        matches!(err, Error::Write(WriteError::TooShort { ref tensor, expected: 10, received: 0 }) if tensor == "b")
    );
    assert_untouched(dir.path(), &path);

    // Short inside a tensor.
    let err = save_streaming(&path, &specs(), None, &WriteOptions::default(), |w| {
        w.write(&[0; 4100])
    })
    .unwrap_err();
    assert!(matches!(
        err,
        Error::Write(WriteError::TooShort { received: 4, .. })
    ));
    assert_untouched(dir.path(), &path);

    // Long.
    let err = save_streaming(&path, &specs(), None, &WriteOptions::default(), |w| {
        w.write(&[0; 4096])?;
        w.write_from("b", &[0u8; 11][..])?;
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(
        err,
        Error::Write(WriteError::TooLong {
            expected: 10,
            received: 11,
            ..
        })
    ));
    assert_untouched(dir.path(), &path);

    // A caller's own error, after a complete stream, still aborts.
    let err = save_streaming(&path, &specs(), None, &WriteOptions::default(), |w| {
        w.write(&[0; 4106])?;
        Err(Error::NotFound("changed my mind".into()))
    })
    .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)));
    assert_untouched(dir.path(), &path);
}

#[test]
fn refused_declarations_touch_nothing() {
    let (dir, path) = with_old_file();
    let data = [0u8; 4];
    let t = TensorRef {
        name: "x",
        dtype: Dtype::F32,
        shape: &[1],
        data: &data,
    };
    let err = save(&path, [t, t], None, &WriteOptions::default()).unwrap_err();
    assert!(matches!(
        err,
        Error::Write(WriteError::DuplicateName { .. })
    ));
    let bad = TensorRef { shape: &[2], ..t };
    let err = save(&path, [bad], None, &WriteOptions::default()).unwrap_err();
    assert!(matches!(
        err,
        Error::Write(WriteError::LengthMismatch { .. })
    ));
    assert_untouched(dir.path(), &path);
}

#[test]
fn a_panicking_body_leaves_no_litter() {
    let (dir, path) = with_old_file();
    let result = std::panic::catch_unwind(|| {
        let _ = save_streaming(&path, &specs(), None, &WriteOptions::default(), |w| {
            w.write(&[0; 100])?;
            panic!("caller bug");
        });
    });
    assert!(result.is_err());
    assert_untouched(dir.path(), &path);
}

fn tensors(value: u8) -> (Vec<u8>, Metadata) {
    (
        vec![value; 4096],
        Metadata::from([("format".to_string(), "tinyllm".to_string())]),
    )
}

fn save_u8(path: &Path, data: &[u8], metadata: &Metadata, sync: bool) {
    let t = TensorRef {
        name: "x",
        dtype: Dtype::U8,
        shape: &[data.len() as u64],
        data,
    };
    let options = WriteOptions::default().with_sync(sync);
    save(path, [t], Some(metadata), &options).unwrap();
}

#[test]
fn saves_over_and_beside() {
    let (dir, path) = with_old_file();
    let (data, metadata) = tensors(3);
    for sync in [true, false] {
        save_u8(&path, &data, &metadata, sync);
        let t = TensorRef {
            name: "x",
            dtype: Dtype::U8,
            shape: &[4096],
            data: &data,
        };
        assert_eq!(
            fs::read(&path).unwrap(),
            serialize([t], Some(&metadata)).unwrap()
        );
        assert_eq!(entries(dir.path()), ["m.safetensors"]);
    }
}

#[test]
fn a_new_file_gets_the_mode_of_a_plain_create() {
    let dir = tempfile::tempdir().unwrap();
    // What open(2) with 0666 gives under the current umask (and any default ACL).
    let plain = dir.path().join("plain");
    fs::File::create(&plain).unwrap();
    let expected = fs::metadata(&plain).unwrap().permissions().mode() & 0o7777;

    let path = dir.path().join("new.safetensors");
    let (data, metadata) = tensors(1);
    save_u8(&path, &data, &metadata, true);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        expected
    );
}

#[test]
fn a_replaced_file_keeps_its_mode() {
    let (_dir, path) = with_old_file();
    for mode in [0o640, 0o600, 0o755] {
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        let (data, metadata) = tensors(2);
        save_u8(&path, &data, &metadata, true);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
            mode
        );
    }
}

#[test]
fn a_mapped_reader_keeps_the_old_bytes() {
    let (_dir, path) = with_old_file();
    let (old_data, metadata) = tensors(5);
    save_u8(&path, &old_data, &metadata, true);
    let old_bytes = fs::read(&path).unwrap();
    let file = fs::File::open(&path).unwrap();
    // SAFETY: the test alone touches this file, and only by atomic saves,
    // which never modify the mapped inode.
    let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
    assert_eq!(&map[..], &old_bytes[..]);

    let (new_data, _) = tensors(9);
    save_u8(&path, &new_data, &metadata, false);
    assert_eq!(
        &map[..],
        &old_bytes[..],
        "the mapping changed under its reader"
    );
    let new_bytes = fs::read(&path).unwrap();
    assert_ne!(new_bytes, old_bytes);
    assert_eq!(new_bytes.len(), old_bytes.len());
}

#[test]
fn a_path_without_a_file_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (data, metadata) = tensors(1);
    let t = TensorRef {
        name: "x",
        dtype: Dtype::U8,
        shape: &[4096],
        data: &data,
    };
    let err = save(
        dir.path().join(".."),
        [t],
        Some(&metadata),
        &WriteOptions::default(),
    );
    assert!(matches!(err, Err(Error::Io { .. })));
    // A directory in the way: the rename fails, the temporary file goes.
    let sub = dir.path().join("sub");
    fs::create_dir(&sub).unwrap();
    assert!(save(&sub, [t], Some(&metadata), &WriteOptions::default()).is_err());
    assert_eq!(entries(dir.path()), ["sub"]);
}

/// Tensors of several sizes (zero-size included) and their bytes.
fn positional_tensors() -> (Vec<TensorSpec>, Vec<Vec<u8>>) {
    let sizes = [4096usize, 0, 17, 1 << 20, 3, 65_536, 1];
    let specs: Vec<TensorSpec> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| TensorSpec::new(format!("t{i}"), Dtype::U8, [n as u64]))
        .collect();
    let data: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    (specs, data)
}

#[test]
fn positional_writes_from_two_threads_give_the_canonical_bytes() {
    use tensorfile_core::writer::Layout;
    let (specs, data) = positional_tensors();
    let refs: Vec<TensorRef> = specs
        .iter()
        .zip(&data)
        .map(|(s, d)| TensorRef {
            name: &s.name,
            dtype: s.dtype,
            shape: &s.shape,
            data: d,
        })
        .collect();
    let metadata = Metadata::from([("format".to_string(), "pt".to_string())]);
    let expected = serialize(&refs, Some(&metadata)).unwrap();
    let (dir, path) = with_old_file();
    let options = WriteOptions::default();
    let layout = Layout::new(&specs, Some(&metadata), &options).unwrap();
    tensorfile_core::save_positional(&path, layout, &options, |w| {
        let order: Vec<usize> = w.layout().slots().map(|s| s.declared()).collect();
        std::thread::scope(|scope| {
            for parity in 0..2 {
                let (order, data) = (&order, &data);
                scope.spawn(move || {
                    // Each thread writes every other piece of 1000 bytes of
                    // every tensor, last first: any order makes the file.
                    for (index, &declared) in order.iter().enumerate() {
                        let pieces = data[declared].chunks(1000).enumerate();
                        for (k, piece) in pieces.rev().filter(|(k, _)| k % 2 == parity) {
                            w.write(index, k as u64 * 1000, piece).unwrap();
                        }
                    }
                });
            }
        });
        Ok(())
    })
    .unwrap();
    assert_eq!(fs::read(&path).unwrap(), expected);
    assert_eq!(entries(dir.path()), ["m.safetensors"]);
}

#[test]
fn positional_writes_refuse_overlaps_overruns_and_missing_bytes() {
    use tensorfile_core::writer::Layout;
    let (specs, _) = positional_tensors();
    let options = WriteOptions::default();
    let (dir, path) = with_old_file();
    // A piece past the start is fine; one over bytes already written, one
    // that runs past the tensor, and a save that leaves a tensor short are
    // each refused, and the old file is kept.
    let layout = Layout::new(&specs, None, &options).unwrap();
    let result = tensorfile_core::save_positional(&path, layout, &options, |w| {
        w.write(0, 5, &[1, 2, 3]).unwrap();
        let again = w.write(0, 7, &[4, 5]);
        assert!(
            matches!(
                again,
                Err(Error::Write(WriteError::Overlap {
                    range: (7, 9),
                    written: (5, 8),
                    ..
                }))
            ),
            "{again:?}"
        );
        let before = w.write(0, 0, &[0; 6]);
        assert!(
            matches!(before, Err(Error::Write(WriteError::Overlap { .. }))),
            "{before:?}"
        );
        let len = w.layout().slot(0).unwrap().byte_len();
        let over = w.write(0, 0, &vec![0; len as usize + 1]);
        assert!(
            matches!(over, Err(Error::Write(WriteError::TooLong { .. }))),
            "{over:?}"
        );
        // Filling the gap before and everything after completes the
        // tensor, whatever the order.
        w.write(0, 8, &vec![0; len as usize - 8]).unwrap();
        w.write(0, 0, &[0; 5]).unwrap();
        Ok(())
    });
    assert!(
        matches!(result, Err(Error::Write(WriteError::TooShort { .. }))),
        "{result:?}"
    );
    assert_untouched(dir.path(), &path);
    // An error from the body: the old file is kept, no litter.
    let layout = Layout::new(&specs, None, &options).unwrap();
    let result = tensorfile_core::save_positional(&path, layout, &options, |_| {
        Err(Error::Write(WriteError::Poisoned))
    });
    assert!(result.is_err());
    assert_untouched(dir.path(), &path);
}
