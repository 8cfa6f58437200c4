//! A layer's error raised inside the core's traits (a tensor's read in
//! `TensorData`, a write in a `Sink`) reaches the caller typed: the npz,
//! PyTorch or GGUF error itself, matchable, with its kind and file.

use tensorfile_testkit::hostile;

use tensorfile::cast::{save_converted, CastOptions};
use tensorfile::gguf::{GgmlType, GgufError, GgufSpec, GgufWriter};
use tensorfile::npz::{NpzError, NpzFile, NpzLimits};
use tensorfile::pytorch::{convert_file as convert, ConvertOptions};
use tensorfile::{Error, ErrorKind, WriteOptions};

#[test]
fn an_npz_array_that_fails_to_read_during_a_conversion_is_an_npz_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("x.npy");
    // Fortran order, with a reordering budget that cannot hold one item:
    // the array opens, and its bytes fail to come when the plan runs.
    let header = "{'descr': '<f4', 'fortran_order': True, 'shape': (64, 64), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0; 64 * 64 * 4]);
    std::fs::write(&input, bytes).unwrap();
    let limits = NpzLimits {
        max_reorder_bytes: 7,
        ..NpzLimits::default()
    };
    let file = NpzFile::open_with(&input, &limits).unwrap();
    let tensors = file.tensors(None).unwrap();
    let output = dir.path().join("out.safetensors");
    let opts = CastOptions::default();
    let err = save_converted(
        &output,
        &tensors,
        None,
        None,
        opts,
        &WriteOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err.detail(),
            Error::Npz(NpzError::Memory { array, limit: 7, .. }) if array == "x"
        ),
        "{err:?}"
    );
    assert!(err.npz().is_some());
    assert_eq!(err.kind(), ErrorKind::Limit);
    assert_eq!(err.path(), Some(input.as_path()));
    assert!(!output.exists());
}

#[test]
fn a_pytorch_tensor_that_fails_to_read_during_a_conversion_is_a_pytorch_error() {
    use hostile::{Record, Storage, Tensor};
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.pt");
    let storages = [Storage::f32("0", 4)];
    let tensors = [Tensor {
        name: "w".into(),
        storage: 0,
        offset: 0,
        shape: vec![4],
        strides: vec![1],
    }];
    let pickle = hostile::state_dict_pickle(&storages, &tensors);
    // A deflated storage whose stream is not deflate: the checkpoint
    // opens, and inflating the storage fails when the plan runs.
    let record = Record {
        name: "archive/data/0".into(),
        data: vec![0xff; 16],
        inflated: Some(16),
    };
    let ckpt = hostile::checkpoint(Record::stored("archive/data.pkl", pickle), vec![record]);
    std::fs::write(&input, ckpt).unwrap();
    tensorfile::pytorch::Checkpoint::open(&input).expect("opens");
    let output = dir.path().join("out.safetensors");
    let err = convert(&input, &output, &ConvertOptions::default(), &()).unwrap_err();
    let Error::Pytorch(inner) = &err else {
        panic!("{err:?}")
    };
    assert!(
        matches!(**inner, tensorfile_pytorch::Error::Zip(_)),
        "{err:?}"
    );
    assert_eq!(err.kind(), inner.kind(), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::Format, "{err:?}");
    assert_eq!(err.tensor(), inner.tensor());
    assert!(!output.exists());
}

#[test]
fn a_gguf_sink_s_error_is_a_gguf_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.gguf");
    let mut w = GgufWriter::new(Vec::new());
    let t = w
        .declare(GgufSpec::from_shape("w", &[4], GgmlType::F32))
        .unwrap();
    // A job that writes past its tensor's 16 bytes: the sink refuses it.
    w.push(
        vec![t],
        move |sink: &dyn tensorfile_core::plan::Sink<Error>| sink.write(t, 8, &[0; 16]),
    );
    let err = w.save(&output, false, &()).unwrap_err();
    assert!(
        matches!(err.detail(), Error::Gguf(GgufError::Write(m)) if m.contains("\"w\"")),
        "{err:?}"
    );
    assert!(err.gguf().is_some());
    assert_eq!(err.kind(), err.gguf().unwrap().kind());
    assert!(!output.exists());
}
