//! `tensorfile::Error`: each layer's errors have their kind, file, tensor
//! and rule, and a layer's error from a plan's job comes back as itself.

use tensorfile::cast::{self, CastError};
use tensorfile::{
    save_plan, CoreError, Dtype, Error, ErrorKind, Plan, PytorchError, SafeTensors, TensorRef,
    TensorSpec, WriteError, WriteOptions,
};
use tensorfile_core::plan::Sink;
use tensorfile_core::ShardedTensors;

#[test]
fn each_layer_s_errors_have_their_kind() {
    let dir = tempfile::tempdir().unwrap();
    let no_weights = ShardedTensors::open(dir.path()).unwrap_err();
    assert_eq!(no_weights.kind(), ErrorKind::Format, "{no_weights}");

    let missing = ShardedTensors::open(dir.path().join("x.safetensors")).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Io, "{missing}");

    let odd = cast::decode_f32_vec(Dtype::F32, &[0, 0, 0]).unwrap_err();
    assert_eq!(odd.kind(), ErrorKind::InvalidArgument, "{odd}");
    let no_decoding = cast::decode_f32_vec(Dtype::BOOL, &[1]).unwrap_err();
    assert_eq!(no_decoding.kind(), ErrorKind::Unsupported, "{no_decoding}");
}

/// A job that refuses to cast its tensor, with this library's error.
fn refusing_plan(dir: &std::path::Path) -> (Plan<'static, Error>, std::path::PathBuf) {
    let mut plan = Plan::with_error(None);
    let w = plan.declare(TensorSpec::new("w", Dtype::I8, [1]));
    plan.push(
        vec![w],
        |_: &dyn Sink<tensorfile::Error>| -> tensorfile::Result<()> {
            Err(Error::Cast {
                tensor: "w".into(),
                source: CastError::Unsupported {
                    from: Dtype::F32,
                    to: Dtype::I8,
                    reason: "integers need allow_int",
                },
            })
        },
    );
    (plan, dir.join("out.safetensors"))
}

#[test]
fn a_job_s_error_comes_back_from_the_plan_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (plan, out) = refusing_plan(dir.path());
    let is_cast = |e: &Error| {
        matches!(
            e,
            Error::Cast {
                source: CastError::Unsupported { .. },
                ..
            }
        )
    };
    let saved = save_plan(&out, &plan, &WriteOptions::default(), &()).unwrap_err();
    assert!(is_cast(&saved), "{saved:?}");
    assert_eq!(saved.kind(), ErrorKind::Unsupported);
    assert_eq!(saved.tensor(), Some("w"));
    assert!(!out.exists());
    let in_memory = plan.to_bytes(&WriteOptions::default()).unwrap_err();
    assert!(is_cast(&in_memory), "{in_memory:?}");
    let owned = plan.into_tensors().unwrap_err();
    assert!(is_cast(&owned), "{owned:?}");

    // The sink's own refusal (a byte written twice) is the core's.
    let mut plan: Plan<'_, Error> = Plan::with_error(None);
    let x = plan.declare(TensorSpec::new("x", Dtype::U8, [2]));
    plan.push(
        vec![x],
        move |s: &dyn Sink<tensorfile::Error>| -> tensorfile::Result<()> {
            s.write(x, 0, &[1, 2])?;
            s.write(x, 1, &[3])
        },
    );
    let twice = save_plan(&out, &plan, &WriteOptions::default(), &()).unwrap_err();
    assert!(
        matches!(
            twice,
            Error::Core(CoreError::Write(WriteError::Overlap { .. }))
        ),
        "{twice:?}"
    );
    assert_eq!(twice.tensor(), Some("x"));
    assert_eq!(twice.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn each_layer_s_errors_say_kind_path_tensor_and_rule() {
    let dir = tempfile::tempdir().unwrap();

    // The core: a reader rule, about a file and a tensor.
    let bad = dir.path().join("bad.safetensors");
    let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[0; 4]);
    std::fs::write(&bad, &bytes).unwrap();
    let rule4 = Error::from(SafeTensors::open(&bad).unwrap_err());
    assert_eq!(rule4.kind(), ErrorKind::Format, "{rule4}");
    assert_eq!(rule4.rule(), Some(4), "{rule4}");
    assert_eq!(rule4.path(), Some(bad.as_path()));
    assert_eq!(rule4.tensor(), Some("w"));

    // The core: a missing tensor, and a missing file.
    let good = dir.path().join("good.safetensors");
    tensorfile::save(
        &good,
        [TensorRef {
            name: "a",
            dtype: Dtype::U8,
            shape: &[1],
            data: &[7],
        }],
        None,
        &WriteOptions::default(),
    )
    .unwrap();
    let file = SafeTensors::open(&good).unwrap();
    let missing = Error::from(file.tensor("nope").unwrap_err());
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    assert_eq!((missing.tensor(), missing.rule()), (Some("nope"), None));
    let absent = dir.path().join("absent.safetensors");
    let no_file = Error::from(SafeTensors::open(&absent).unwrap_err());
    assert_eq!(no_file.kind(), ErrorKind::Io);
    assert_eq!(no_file.path(), Some(absent.as_path()));
    assert!(no_file.is_not_found_file());

    // A cast, named after its file.
    let cast = Error::Cast {
        tensor: "w".into(),
        source: CastError::Unsupported {
            from: Dtype::F32,
            to: Dtype::I8,
            reason: "integers need allow_int",
        },
    }
    .at("model.safetensors");
    assert_eq!(cast.kind(), ErrorKind::Unsupported);
    assert_eq!(cast.tensor(), Some("w"));
    assert_eq!(cast.path(), Some(std::path::Path::new("model.safetensors")));
    assert_eq!(cast.rule(), None);

    // A set: no weights in a directory.
    let no_weights = ShardedTensors::open(dir.path().join("empty")).unwrap_err();
    assert_eq!(no_weights.rule(), None, "{no_weights}");

    // GGUF: not a GGUF file, named.
    let gguf = tensorfile::gguf::GgufFile::open(&good).unwrap_err();
    assert_eq!(gguf.kind(), ErrorKind::Format, "{gguf}");
    assert!(matches!(gguf.detail(), Error::Gguf(_)), "{gguf:?}");
    assert_eq!(gguf.path(), Some(good.as_path()));
    assert_eq!((gguf.tensor(), gguf.rule()), (None, None));

    // npz: not an array, named.
    let npy = dir.path().join("x.npy");
    std::fs::write(&npy, b"not numpy at all").unwrap();
    let npz = tensorfile::npz::NpzFile::open(&npy).unwrap_err();
    assert_eq!(npz.kind(), ErrorKind::Format, "{npz}");
    assert!(npz.npz().is_some(), "{npz:?}");
    assert_eq!(npz.path(), Some(npy.as_path()));

    // PyTorch: a safetensors file given as a checkpoint.
    let pytorch = Error::from(tensorfile::pytorch::Checkpoint::open(&good).unwrap_err());
    assert!(matches!(pytorch, Error::Pytorch(_)), "{pytorch:?}");
    assert_eq!(pytorch.kind(), ErrorKind::Unsupported, "{pytorch}");
    assert_eq!(pytorch.rule(), None);
    let torch_tensor = Error::from(PytorchError::Tensor {
        name: "layer.w".into(),
        reason: "its view starts before its window".into(),
    });
    assert_eq!(torch_tensor.tensor(), Some("layer.w"));
    assert_eq!(torch_tensor.kind(), ErrorKind::Format);
}

#[test]
fn a_refused_request_is_an_invalid_argument_about_no_file() {
    let e = Error::request("--bits needs --group-size");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(e.to_string(), "--bits needs --group-size");
    assert_eq!((e.path(), e.tensor(), e.rule()), (None, None, None));
    assert!(matches!(e.detail(), Error::Request { message } if message.starts_with("--bits")));
}
