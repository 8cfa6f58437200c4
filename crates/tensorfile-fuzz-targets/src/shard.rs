//! The shard index: [`ShardIndex::parse`] on arbitrary text, its
//! round trip through [`ShardIndex::to_json`], and the set checks of
//! [`ShardedTensors::open`] on shards written to match the index, or to
//! break it in one known way.

use std::path::{Path, PathBuf};

use tensorfile::set::{ShardError, ShardIndex, ShardedTensors, INDEX_NAME};
use tensorfile::{serialize, Dtype, TensorRef};
use tensorfile_core::Error;

use crate::input::Input;

/// Most tensors of an index whose shards the target writes.
const MAX_TENSORS: usize = 32;

/// How the written set breaks the index, if it does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Break {
    /// Every shard holds exactly its tensors.
    None,
    /// The last shard (in name order) is not written.
    MissingShard,
    /// The first tensor of the map is left out of its shard.
    NotInShard,
    /// The first shard holds a tensor the map does not list.
    NotInMap,
}

/// The first byte picks how to break the set; the rest is the index's
/// text. A parsed index survives its own JSON; a set written to match it
/// opens with every tensor in its shard; a set broken one way fails that
/// way; a shard name the rules refuse is refused before any file is read.
pub fn shard(data: &[u8]) {
    let mut input = Input::new(data);
    let how = input.pick(&[
        Break::None,
        Break::None,
        Break::MissingShard,
        Break::NotInShard,
        Break::NotInMap,
    ]);
    let text = input.rest();
    let Ok(index) = ShardIndex::parse(text) else {
        return;
    };
    let _ = index.total_size();
    let json = index.to_json();
    let again = ShardIndex::parse(json.as_bytes())
        .unwrap_or_else(|e| panic!("the index's own JSON does not parse: {e}: {json}"));
    assert_eq!(again, index, "the index changed through its JSON: {json}");
    assert_eq!(again.to_json(), json, "to_json is not stable");
    if index.weight_map.len() > MAX_TENSORS
        || index
            .weight_map
            .iter()
            .any(|(t, s)| t.len() > 200 || s.len() > 200 || t == "__metadata__")
    {
        return;
    }
    let dir = fresh_dir();
    std::fs::write(dir.join(INDEX_NAME), text).expect("write the index");
    let opened = || ShardedTensors::open(dir.join(INDEX_NAME));
    if index.weight_map.is_empty() {
        assert!(shard_error(opened()).is_some_and(|e| matches!(e, ShardError::BadIndex { .. })));
        return;
    }
    if let Some((tensor, shard)) = index.weight_map.iter().find(|(_, s)| !plain(s)) {
        let e = shard_error(opened());
        assert!(
            matches!(e, Some(ShardError::BadShardName { .. })),
            "{tensor:?} in shard {shard:?}: {e:?}"
        );
        return;
    }
    // Shard name -> its tensors, in map order.
    let mut shards: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (tensor, shard) in &index.weight_map {
        shards.entry(shard).or_default().push(tensor);
    }
    let first_tensor = index.weight_map.keys().next().map(String::as_str);
    let first_shard = shards.keys().next().copied();
    let last_shard = shards.keys().next_back().copied();
    let extra = "\u{1}not in the map";
    if index.weight_map.contains_key(extra) {
        return;
    }
    for (&shard, tensors) in &shards {
        if how == Break::MissingShard && Some(shard) == last_shard {
            continue;
        }
        let mut names: Vec<&str> = tensors
            .iter()
            .copied()
            .filter(|&t| !(how == Break::NotInShard && Some(t) == first_tensor))
            .collect();
        if how == Break::NotInMap && Some(shard) == first_shard {
            names.push(extra);
        }
        let one = [7u8];
        let file = serialize(
            names.iter().map(|&name| TensorRef {
                name,
                dtype: Dtype::U8,
                shape: &[1],
                data: &one,
            }),
            None,
        )
        .expect("a shard serializes");
        std::fs::write(dir.join(shard), file).expect("write a shard");
    }
    let result = opened();
    match how {
        Break::None => {
            let set = result.unwrap_or_else(|e| panic!("a matching set does not open: {e}"));
            assert_eq!(set.len(), index.weight_map.len());
            for (tensor, shard) in &index.weight_map {
                let s = set
                    .shard_of(tensor)
                    .unwrap_or_else(|| panic!("{tensor:?} has no shard"));
                assert_eq!(s.name(), shard, "{tensor:?}");
                assert_eq!(set.tensor(tensor).expect("reads").data(), [7]);
            }
            let _ = set.metadata();
        }
        Break::MissingShard => {
            let e = shard_error(result);
            assert!(
                matches!(&e, Some(ShardError::MissingShard { shard, .. }) if Some(shard.as_str()) == last_shard),
                "{e:?}"
            );
        }
        Break::NotInShard => {
            let e = shard_error(result);
            assert!(
                matches!(&e, Some(ShardError::NotInShard { tensor, .. }) if Some(tensor.as_str()) == first_tensor),
                "{e:?}"
            );
        }
        Break::NotInMap => {
            let e = shard_error(result);
            assert!(
                matches!(&e, Some(ShardError::NotInMap { tensor, .. }) if tensor == extra),
                "{e:?}"
            );
        }
    }
}

/// Whether a shard name is one the rules take: a bare file name ending in
/// `.safetensors` (and more than that).
fn plain(name: &str) -> bool {
    !name.contains(['/', '\\', '\0']) && name.ends_with(".safetensors") && name != ".safetensors"
}

/// The shard error of a result, if it is one.
fn shard_error(result: Result<ShardedTensors, Error>) -> Option<ShardError> {
    match result {
        Err(Error::Shard(e)) => Some(*e),
        _ => None,
    }
}

/// An empty directory of the process's own, emptied again for each input.
fn fresh_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let root = DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
    let dir = root.path().join("set");
    clear(&dir);
    dir
}

fn clear(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir(dir).expect("create the set's directory");
}
