//! Loading across processes (`tensorfile_core::ranks`): rank plans tile
//! each tensor exactly among the ranks and read only their bytes;
//! cooperative loads cut every byte into exactly one rank's segment, and
//! the segments read by all ranks put together are the tensors.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use tensorfile_core::ranks::{rank_plan, Cooperative, RankRule, RankRules, LLAMA};
use tensorfile_core::set::ShardedTensors;
use tensorfile_core::{ByteSource, Dtype, Error, ReadOptions, SafeTensors};

use crate::common::{self, T};

/// Bytes in memory that count what is read from them.
struct Counting {
    bytes: Vec<u8>,
    read: AtomicU64,
}

impl ByteSource for Counting {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read.fetch_add(buf.len() as u64, Ordering::SeqCst);
        (&self.bytes[..]).read_exact_at(offset, buf)
    }
}

/// A two-layer Llama-like model: column- and row-parallel linear layers,
/// fused qkv and gate_up, norms, embeddings and two experts.
fn model() -> Vec<T> {
    let mut ts = vec![T::new("model.embed_tokens.weight", Dtype::F32, &[64, 16])];
    for l in 0..2 {
        let p = format!("model.layers.{l}");
        ts.push(T::new(
            &format!("{p}.input_layernorm.weight"),
            Dtype::F32,
            &[16],
        ));
        ts.push(T::new(
            &format!("{p}.self_attn.q_proj.weight"),
            Dtype::BF16,
            &[16, 16],
        ));
        ts.push(T::new(
            &format!("{p}.self_attn.q_proj.bias"),
            Dtype::BF16,
            &[16],
        ));
        ts.push(T::new(
            &format!("{p}.self_attn.k_proj.weight"),
            Dtype::BF16,
            &[8, 16],
        ));
        ts.push(T::new(
            &format!("{p}.self_attn.v_proj.weight"),
            Dtype::BF16,
            &[8, 16],
        ));
        ts.push(T::new(
            &format!("{p}.self_attn.qkv_proj.weight"),
            Dtype::F16,
            &[48, 16],
        ));
        ts.push(T::new(
            &format!("{p}.self_attn.o_proj.weight"),
            Dtype::BF16,
            &[16, 16],
        ));
        ts.push(T::new(
            &format!("{p}.mlp.gate_up_proj.weight"),
            Dtype::F32,
            &[64, 16],
        ));
        ts.push(T::new(
            &format!("{p}.mlp.down_proj.weight"),
            Dtype::F32,
            &[16, 32],
        ));
        for e in 0..2 {
            ts.push(T::new(
                &format!("{p}.mlp.experts.{e}.up_proj.weight"),
                Dtype::U8,
                &[6, 5],
            ));
        }
    }
    ts.push(T::new("lm_head.weight", Dtype::F32, &[64, 16]));
    ts
}

fn open(ts: &[T]) -> SafeTensors<Counting> {
    let bytes = common::st_bytes(ts, &[]);
    SafeTensors::from_source(
        Counting {
            bytes,
            read: AtomicU64::new(0),
        },
        &ReadOptions::default(),
    )
    .unwrap()
}

/// Element `idx` (C order) of a tensor of `shape`, as its bytes.
fn element<'a>(t: &'a T, shape: &[u64], idx: &[u64]) -> &'a [u8] {
    let size = (t.dtype.bits() / 8) as usize;
    let mut flat = 0u64;
    for (d, i) in shape.iter().zip(idx) {
        flat = flat * d + i;
    }
    &t.data[flat as usize * size..][..size]
}

/// Every position of `shape`, in C order.
fn positions(shape: &[u64]) -> Vec<Vec<u64>> {
    let mut all = vec![vec![]];
    for &d in shape {
        all = all
            .into_iter()
            .flat_map(|p| {
                (0..d).map(move |i| {
                    let mut q = p.clone();
                    q.push(i);
                    q
                })
            })
            .collect();
    }
    all
}

#[test]
fn shares_tile_every_tensor_and_read_only_their_bytes() {
    let ts = model();
    let rules = RankRules::parse(LLAMA).unwrap();
    for world in [1usize, 2, 4] {
        // Which rank read each element of each tensor, and how many times.
        let mut seen: Vec<Vec<u32>> = ts
            .iter()
            .map(|t| vec![0; t.data.len() / (t.dtype.bits() / 8) as usize])
            .collect();
        let mut replicated_reads = vec![0usize; ts.len()];
        for rank in 0..world {
            let file = open(&ts);
            let plan = rank_plan(file.header().tensors(), &rules, world, rank).unwrap();
            // Deterministic: the same plan computed again, from another order
            // of calls, is equal.
            assert_eq!(
                plan,
                rank_plan(file.header().tensors(), &rules, world, rank).unwrap()
            );
            let before = file.source().read.load(Ordering::SeqCst);
            let mut total = 0;
            for share in &plan {
                let i = ts.iter().position(|t| t.name == share.name).unwrap();
                let t = &ts[i];
                let mut out = vec![0u8; share.nbytes() as usize];
                share.read_into(&file, &mut out).unwrap();
                total += out.len() as u64;
                if share.rule == RankRule::Replicated
                    || matches!(share.rule, RankRule::Owned { .. })
                {
                    assert_eq!(out, t.data, "{}", t.name);
                    replicated_reads[i] += 1;
                    continue;
                }
                let dim = share.dim.unwrap();
                // Position `p` of the share is position `q` of the tensor:
                // along `dim`, the k-th position of the concatenated parts.
                let size = (t.dtype.bits() / 8) as usize;
                for (n, p) in positions(&share.shape).into_iter().enumerate() {
                    let mut k = p[dim];
                    let mut q = p.clone();
                    for part in &share.parts {
                        let len = part.end - part.start;
                        if k < len {
                            q[dim] = part.start + k;
                            break;
                        }
                        k -= len;
                    }
                    assert_eq!(
                        &out[n * size..][..size],
                        element(t, &t.shape, &q),
                        "{} {p:?}",
                        t.name
                    );
                    let mut flat = 0;
                    for (d, i) in t.shape.iter().zip(&q) {
                        flat = flat * d + i;
                    }
                    seen[i][flat as usize] += 1;
                }
            }
            // Only the shares' bytes leave the source (the header was read
            // before `before`).
            assert_eq!(file.source().read.load(Ordering::SeqCst) - before, total);
        }
        for (i, t) in ts.iter().enumerate() {
            let rule = rules.rule_for(&t.name, world).unwrap();
            match rule {
                RankRule::Split { .. } => {
                    assert!(
                        seen[i].iter().all(|&n| n == 1),
                        "{} with {world}: {:?}",
                        t.name,
                        seen[i]
                    );
                }
                RankRule::Replicated => assert_eq!(replicated_reads[i], world, "{}", t.name),
                RankRule::Owned { .. } => assert_eq!(replicated_reads[i], 1, "{}", t.name),
            }
        }
    }
}

#[test]
fn fused_sections_along_an_inner_dimension_interleave() {
    // [4, 8] split along 1 into sections 2:1:1 (4, 2, 2 columns) over two
    // ranks: rank 1 reads columns 2..4, 5, 7.
    let t = T::new("w", Dtype::U8, &[4, 8]);
    let file = open(std::slice::from_ref(&t));
    let rules = RankRules::parse("w = split(1, sections=[2, 1, 1])").unwrap();
    let plan = rank_plan(file.header().tensors(), &rules, 2, 1).unwrap();
    assert_eq!(plan[0].parts, [2..4, 5..6, 7..8]);
    assert_eq!(plan[0].shape, [4, 4]);
    let mut out = vec![0; 16];
    plan[0].read_into(&file, &mut out).unwrap();
    let want: Vec<u8> = (0..4)
        .flat_map(|r| [2, 3, 5, 7].map(|c| t.data[r * 8 + c]))
        .collect();
    assert_eq!(out, want);
}

#[test]
fn rules_resolve_in_order_with_captures_and_owners() {
    let rules = RankRules::parse(
        "# experts by blocks\n*.experts.{E}.* = owner(E, blocks=8)\n\
         shared.{N} = owner(N)\nfixed = owner(5)\n*.w = split(1)\n",
    )
    .unwrap();
    let owner = |name: &str, world| rules.rule_for(name, world).unwrap();
    assert_eq!(owner("m.experts.5.w", 4), RankRule::Owned { rank: 2 });
    assert_eq!(owner("m.experts.7.w", 2), RankRule::Owned { rank: 1 });
    assert_eq!(owner("m.experts.3.w", 2), RankRule::Owned { rank: 0 });
    assert_eq!(owner("shared.7", 4), RankRule::Owned { rank: 3 });
    assert_eq!(owner("fixed", 4), RankRule::Owned { rank: 1 });
    assert_eq!(
        owner("a.w", 4),
        RankRule::Split {
            dim: 1,
            sections: vec![1]
        }
    );
    assert_eq!(owner("a.v", 4), RankRule::Replicated);
    // A capture is digits only.
    assert_eq!(owner("shared.x", 4), RankRule::Replicated);
    let llama = RankRules::preset("llama").unwrap();
    assert_eq!(
        llama
            .rule_for("model.layers.3.mlp.experts.6.down_proj.weight", 4)
            .unwrap(),
        RankRule::Owned { rank: 2 }
    );
    assert_eq!(
        llama
            .rule_for("model.layers.3.mlp.down_proj.weight", 4)
            .unwrap(),
        RankRule::Split {
            dim: 1,
            sections: vec![1]
        }
    );
    assert_eq!(
        llama.rule_for("model.norm.weight", 4).unwrap(),
        RankRule::Replicated
    );
}

#[test]
fn bad_rules_and_uneven_splits_are_refused_by_name() {
    for (text, line, what) in [
        ("a = split(0)\nb split(0)", 2, "is not `pattern = rule`"),
        ("a = split(x)", 1, "the dimension \"x\""),
        ("a = split(0, parts=2)", 1, "sections="),
        ("a = split(0, sections=[1,0])", 1, "positive"),
        ("a.{E} = owner(F)", 1, "neither a number"),
        ("a = owner(1, blocks=0)", 1, "positive"),
        ("a = scatter", 1, "is not `replicated`"),
        ("a b = replicated", 1, "space"),
        ("a.{} = replicated", 1, "capture"),
    ] {
        let err = RankRules::parse(text).unwrap_err();
        assert!(
            matches!(err, Error::RankRules { line: l, .. } if l == line),
            "{text}: {err}"
        );
        assert!(err.to_string().contains(what), "{text}: {err}");
        assert_eq!(err.kind(), tensorfile_core::ErrorKind::InvalidArgument);
    }
    assert!(RankRules::preset("gpt")
        .unwrap_err()
        .to_string()
        .contains("llama"));
    let file = open(&[
        T::new("w", Dtype::F32, &[6, 4]),
        T::new("b", Dtype::F32, &[6]),
    ]);
    let split = |text: &str, world| {
        rank_plan(
            file.header().tensors(),
            &RankRules::parse(text).unwrap(),
            world,
            0,
        )
    };
    let err = split("w = split(0)", 4).unwrap_err();
    assert_eq!(err.tensor(), Some("w"));
    assert!(
        err.to_string().contains("does not divide among 4 ranks"),
        "{err}"
    );
    let err = split("b = split(1)", 2).unwrap_err();
    assert_eq!(err.tensor(), Some("b"));
    assert!(
        err.to_string()
            .contains("split(1) of a tensor of 1 dimensions"),
        "{err}"
    );
    let err = split("w = split(0, sections=[1,1,2,1])", 1).unwrap_err();
    assert!(
        err.to_string().contains("does not divide into sections"),
        "{err}"
    );
    assert!(split("w = split(0)", 2).is_ok());
    let err = rank_plan(file.header().tensors(), &RankRules::default(), 2, 2).unwrap_err();
    assert!(
        err.to_string().contains("rank 2 is outside a world of 2"),
        "{err}"
    );
    let err = Cooperative::new(file.header().tensors(), 0).unwrap_err();
    assert!(matches!(err, Error::RankRules { .. }));
}

#[test]
fn cooperative_segments_cover_every_byte_once_and_balance() {
    let ts = model();
    let data: u64 = ts.iter().map(|t| t.data.len() as u64).sum();
    for world in [1usize, 2, 3, 4, 7] {
        let file = open(&ts);
        let coop = Cooperative::new(file.header().tensors(), world).unwrap();
        assert_eq!(
            coop,
            Cooperative::new(file.header().tensors(), world).unwrap()
        );
        assert_eq!(coop.len % world as u64, 0);
        let mut buf = vec![0u8; coop.len as usize];
        let before = file.source().read.load(Ordering::SeqCst);
        let mut covered = vec![0u8; coop.len as usize];
        for rank in 0..world {
            let seg = coop.segment(rank);
            assert_eq!(seg.end - seg.start, coop.len / world as u64);
            for p in coop.pieces(rank) {
                assert!(seg.start <= p.at && p.at + p.len <= seg.end);
                for b in &mut covered[p.at as usize..(p.at + p.len) as usize] {
                    *b += 1;
                }
            }
            let read = coop.read_share(rank, &file, &mut buf).unwrap();
            assert_eq!(read, coop.share_bytes(rank));
            // Balanced: a segment's bytes less its padding.
            assert!(read <= coop.len / world as u64);
        }
        // Each byte leaves the source once in all.
        assert_eq!(file.source().read.load(Ordering::SeqCst) - before, data);
        for placed in &coop.tensors {
            assert_eq!(placed.at % 64, 0);
            let t = ts.iter().find(|t| t.name == placed.name).unwrap();
            assert_eq!(
                &buf[placed.at as usize..][..t.data.len()],
                &t.data[..],
                "{}",
                t.name
            );
            assert!(covered[placed.at as usize..][..t.data.len()]
                .iter()
                .all(|&n| n == 1));
        }
    }
}

#[test]
fn cooperative_loads_of_a_set_cut_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let ts = model();
    let (a, b) = ts.split_at(ts.len() / 2);
    common::write_st(&dir.path().join("model-00001-of-00002.safetensors"), a, &[]);
    common::write_st(&dir.path().join("model-00002-of-00002.safetensors"), b, &[]);
    let weight_map: serde_json::Map<String, serde_json::Value> = a
        .iter()
        .map(|t| (t.name.clone(), "model-00001-of-00002.safetensors".into()))
        .chain(
            b.iter()
                .map(|t| (t.name.clone(), "model-00002-of-00002.safetensors".into())),
        )
        .collect();
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let set = ShardedTensors::open_pread(dir.path(), &ReadOptions::default()).unwrap();
    let coop = Cooperative::new(set.infos().map(|(_, t)| t), 3).unwrap();
    let mut buf = vec![0u8; coop.len as usize];
    for rank in 0..3 {
        coop.read_share(rank, &set, &mut buf).unwrap();
    }
    for placed in &coop.tensors {
        assert_eq!(
            &buf[placed.at as usize..][..placed.nbytes as usize],
            &set.read_tensor(&placed.name).unwrap()[..]
        );
    }
    let mut small = vec![0u8; 3];
    let err = coop.read_share(0, &set, &mut small).unwrap_err();
    assert!(matches!(err, Error::DestinationLength { .. }));
    // Rank plans read sets too.
    let plan = rank_plan(
        set.infos().map(|(_, t)| t),
        &RankRules::parse(LLAMA).unwrap(),
        2,
        1,
    )
    .unwrap();
    let share = plan.iter().find(|s| s.name == "lm_head.weight").unwrap();
    let mut out = vec![0u8; share.nbytes() as usize];
    share.read_into(&set, &mut out).unwrap();
    let full = set.read_tensor("lm_head.weight").unwrap();
    assert_eq!(out, full[full.len() / 2..]);
}
