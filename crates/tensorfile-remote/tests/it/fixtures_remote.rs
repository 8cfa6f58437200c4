//! Every safetensors fixture served over HTTP gives exactly what the local
//! reader gives: the same verdict (the same error, rule and detail), the
//! same header, and the same bytes for every tensor; every set of the
//! fixtures opens remotely as it does locally.

use crate::common;

use tensorfile_core::set::Want;
use tensorfile_core::{ByteSource, ReadOptions, SafeTensors, ShardedTensors};
use tensorfile_testkit::serve::Server;

#[test]
fn every_fixture_reads_remotely_as_locally() {
    let server = Server::start().unwrap();
    let root = common::fixtures();
    let files = common::files_under(&root);
    for rel in &files {
        let path = format!("/fx/{}", rel.display());
        server.put(&path, std::fs::read(root.join(rel)).unwrap());
    }
    let client = common::client();
    let options = ReadOptions::default();
    let mut checked = 0;
    for rel in files
        .iter()
        .filter(|r| r.extension().is_some_and(|e| e == "safetensors"))
    {
        let url = format!("{}/fx/{}", server.url(), rel.display());
        let local = SafeTensors::from_source(
            tensorfile_core::FileSource::open(root.join(rel)).unwrap(),
            &options,
        );
        let remote = tensorfile_remote::open_file(&url, &client, &options);
        match (local, remote) {
            (Ok(l), Ok(r)) => {
                assert_eq!(l.header().len(), r.header().len(), "{url}");
                assert_eq!(l.metadata(), r.metadata(), "{url}");
                // Every tensor's bytes, asked for at once (coalesced into
                // few requests).
                let start = r.header().data_start();
                let mut bufs: Vec<Vec<u8>> = r
                    .header()
                    .tensors()
                    .map(|t| vec![0u8; t.nbytes() as usize])
                    .collect();
                let mut ranges: Vec<(u64, &mut [u8])> = r
                    .header()
                    .tensors()
                    .zip(bufs.iter_mut())
                    .map(|(t, b)| (start + t.data_offsets.0, &mut b[..]))
                    .collect();
                r.source().read_ranges(&mut ranges).unwrap();
                for ((a, b), bytes) in l.header().tensors().zip(r.header().tensors()).zip(&bufs) {
                    assert_eq!(a, b, "{url}");
                    let la = l.read_tensor(&a).unwrap();
                    assert!(*la == bytes[..], "{url}: tensor {} differs", a.name);
                }
                // One tensor alone, through the reader's own path.
                if let Some(t) = r.header().tensors().last() {
                    assert_eq!(r.read_tensor(&t).unwrap(), l.read_tensor(&t).unwrap());
                }
            }
            (Err(l), Err(r)) => {
                assert_eq!(l.rule(), r.rule(), "{url}: {l} / {r}");
                assert_eq!(l.detail().to_string(), r.detail().to_string(), "{url}");
                assert!(r.to_string().starts_with(&url), "{r}");
            }
            (l, r) => panic!("{url}: local {:?}, remote {:?}", l.err(), r.err()),
        }
        checked += 1;
    }
    assert!(checked > 100, "only {checked} fixtures");
    // Sets: every directory holding an index or a single model file.
    let mut dirs: Vec<_> = files
        .iter()
        .filter(|r| {
            let n = r.file_name().unwrap().to_string_lossy();
            n == "model.safetensors.index.json"
                || n == "model.safetensors"
                || n == "diffusion_pytorch_model.safetensors.index.json"
        })
        .map(|r| r.parent().unwrap().to_path_buf())
        .collect();
    dirs.dedup();
    assert!(dirs.len() >= 6, "{dirs:?}");
    for dir in dirs {
        let url = format!("{}/fx/{}/", server.url(), dir.display());
        let local = ShardedTensors::open_pread(root.join(&dir), &options);
        let remote = tensorfile_remote::open_set(&url, &client, &options);
        match (local, remote) {
            (Ok(l), Ok(r)) => {
                assert_eq!(l.len(), r.len(), "{url}");
                assert_eq!(l.shards().len(), r.shards().len(), "{url}");
                assert_eq!(l.warnings(), r.warnings(), "{url}");
                let wants: Vec<Want> = l.infos().map(|(_, t)| Want::tensor(t.name)).collect();
                let loaded = r.load(&wants, u64::MAX).unwrap();
                for ((shard, info), got) in l.infos().zip(loaded) {
                    assert_eq!(info, r.info(info.name).unwrap(), "{url}");
                    assert_eq!(got.shape, info.shape, "{url}");
                    assert!(
                        *l.read_tensor(info.name).unwrap() == got.bytes[..],
                        "{url} {} in {}",
                        info.name,
                        shard.name()
                    );
                }
            }
            (Err(l), Err(r)) => {
                assert_eq!(l.rule(), r.rule(), "{url}: {l} / {r}");
            }
            (l, r) => panic!("{url}: local {:?}, remote {:?}", l.err(), r.err()),
        }
    }
}
