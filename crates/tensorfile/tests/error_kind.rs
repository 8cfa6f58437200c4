//! `tensorfile::Error::kind`: each layer's errors have their kind, and a
//! layer's error carried through the core (a plan's job) keeps it.

use tensorfile::cast::{self, CastError};
use tensorfile::{Dtype, Error, ErrorKind, ShardedTensors};

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

#[test]
fn a_kind_survives_the_trip_through_the_core() {
    let cast = Error::Cast {
        tensor: "w".into(),
        source: CastError::Unsupported {
            from: Dtype::F32,
            to: Dtype::I8,
            reason: "integers need allow_int",
        },
    };
    assert_eq!(cast.kind(), ErrorKind::Unsupported);
    let through: tensorfile_core::Error = cast.into();
    assert_eq!(through.kind(), ErrorKind::Unsupported, "{through}");
    let back = Error::from(through);
    assert!(matches!(back, Error::Cast { .. }), "{back:?}");
    assert_eq!(back.at("model.safetensors").kind(), ErrorKind::Unsupported);
}
