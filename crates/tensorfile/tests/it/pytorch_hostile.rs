//! The hostile checkpoints of issue 12 (`tensorfile-pytorch/tests/common/
//! hostile.rs`) through the conversion: refused before anything is
//! written, or converted in bounded memory.

use tensorfile_testkit::hostile;

use tensorfile::pytorch::{
    convert_checkpoint, convert_file as convert, Checkpoint, ConvertOptions,
};
use tensorfile::Error;

#[test]
fn convert_refuses_expansions_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("expansions.pt");
    std::fs::write(&input, hostile::expansions(16, 1 << 22)).unwrap();
    let output = dir.path().join("out.safetensors");
    let e = convert(&input, &output, &ConvertOptions::default(), &()).unwrap_err();
    let Error::Pytorch(e) = e else { panic!("{e}") };
    assert!(
        matches!(
            *e,
            tensorfile_pytorch::Error::Budget {
                budget: "max_expanded_total_bytes",
                ..
            }
        ),
        "{e}"
    );
    assert!(!output.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no file left"
    );
}

#[test]
fn convert_inflates_each_deflated_storage_once_and_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("views.pt");
    std::fs::write(&input, hostile::deflated_views(1000, 16 << 20, true)).unwrap();
    let ckpt = Checkpoint::open(&input).unwrap();
    let output = dir.path().join("views.safetensors");
    let mut options = ConvertOptions::default();
    options.write.sync = false;
    let report = convert_checkpoint(&ckpt, &output, &options, &()).unwrap();
    assert_eq!(report.tensors, 1000);
    let stats = ckpt.inflate_stats();
    assert_eq!((stats.passes, stats.inflated), (1, 16 << 20));
    assert_eq!((stats.held, stats.peak), (0, 4000));
    let st = tensorfile::SafeTensors::open(&output).unwrap();
    assert_eq!(st.len(), 1000);
    assert!(st.tensors().all(|t| t.data() == [0u8; 4]));
}
