//! `Error::kind`: a representative error of each kind, made by the
//! operations that produce it, and the kind kept through the wrappers
//! (`Error::File`, `Error::Set`).

use std::io;

use tensorfile_core::{
    save, serialize, Accept, Dtype, DtypeSet, Error, ErrorKind, Metadata, ReadOptions, SafeTensors,
    TensorRef, WriteError, WriteOptions,
};

fn one_f32(name: &str) -> Vec<u8> {
    let data = [0u8; 4];
    let shape = [1u64];
    serialize(
        [TensorRef {
            name,
            dtype: Dtype::F32,
            shape: &shape,
            data: &data,
        }],
        None,
    )
    .unwrap()
}

#[test]
fn format_io_and_not_found() {
    let broken = SafeTensors::from_source(vec![1, 2, 3], &Default::default()).unwrap_err();
    assert_eq!(broken.kind(), ErrorKind::Format, "{broken}");

    let dir = tempfile::tempdir().unwrap();
    let missing = SafeTensors::open(dir.path().join("missing.safetensors")).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Io, "{missing}");

    // A malformed file named by its path keeps its kind.
    let path = dir.path().join("broken.safetensors");
    std::fs::write(&path, [1u8, 2, 3]).unwrap();
    let named = SafeTensors::open(&path).unwrap_err();
    assert!(named.file().is_some(), "{named}");
    assert_eq!(named.kind(), ErrorKind::Format, "{named}");

    let file = SafeTensors::from_source(one_f32("w"), &Default::default()).unwrap();
    let absent = file.tensor("nope").unwrap_err();
    assert_eq!(absent.kind(), ErrorKind::NotFound, "{absent}");
}

#[test]
fn invalid_argument_unsupported_and_limit() {
    let file = SafeTensors::from_source(one_f32("w"), &Default::default()).unwrap();
    let wrong_type = file.tensor("w").unwrap().as_slice::<u16>().unwrap_err();
    assert_eq!(
        wrong_type.kind(),
        ErrorKind::InvalidArgument,
        "{wrong_type}"
    );

    let data = [0u8; 4];
    let shape = [1u64];
    let t = TensorRef {
        name: "w",
        dtype: Dtype::F32,
        shape: &shape,
        data: &data,
    };
    let twice = serialize([t, t], None).unwrap_err();
    assert_eq!(twice.kind(), ErrorKind::InvalidArgument, "{twice}");

    let only_bf16 = Accept::new("bf16 only", DtypeSet::of(&[Dtype::BF16]));
    let refused = ReadOptions::default().accept(only_bf16);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f32.safetensors");
    std::fs::write(&path, one_f32("w")).unwrap();
    let unsupported = SafeTensors::open_with(&path, &refused).unwrap_err();
    assert_eq!(unsupported.kind(), ErrorKind::Unsupported, "{unsupported}");

    let options = WriteOptions::default().with_max_header_len(64);
    let mut metadata = Metadata::new();
    metadata.insert("k".into(), "v".repeat(100));
    let too_large = save(
        dir.path().join("big.safetensors"),
        [t],
        Some(&metadata),
        &options,
    )
    .unwrap_err();
    assert!(
        matches!(too_large, Error::Write(WriteError::HeaderTooLarge { .. })),
        "{too_large:?}"
    );
    assert_eq!(too_large.kind(), ErrorKind::Limit, "{too_large}");
}

#[test]
fn output_and_carried_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let data = [0u8; 4];
    let shape = [1u64];
    let t = TensorRef {
        name: "w",
        dtype: Dtype::F32,
        shape: &shape,
        data: &data,
    };
    let directory = save(dir.path(), [t], None, &WriteOptions::default()).unwrap_err();
    assert_eq!(directory.kind(), ErrorKind::Output, "{directory}");

    let oom = Error::Stream(io::Error::from(io::ErrorKind::OutOfMemory));
    assert_eq!(oom.kind(), ErrorKind::OutOfMemory);
    assert_eq!(oom.at("x").kind(), ErrorKind::OutOfMemory);

    let in_a_set = Error::Set {
        path: "a".into(),
        source: Box::new(Error::NotFound("x".into())),
        kept: Vec::new(),
    };
    assert_eq!(in_a_set.kind(), ErrorKind::NotFound);
}
