//! Torch distributed checkpoints (DCP) saved with the Hugging Face storage
//! writer, and their consolidation into canonical files: [`DcpCheckpoint`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{DcpPiece, Error, Result, ShardError};
use crate::file::SafeTensors;
use crate::header::ReadOptions;
use crate::plan::{Plan, Sink};
use crate::set::Sharding;
use crate::source::{ByteSource, FileSource};
use crate::writer::{TensorSpec, PIECE};
use crate::{Dtype, Metadata};

/// The metadata key holding a rank file's sharding info.
const SHARDING_INFO_KEY: &str = "DCP_SHARDING_INFO";
/// The metadata key holding the DCP format's version.
const VERSION_KEY: &str = "DCP_VERSION";
/// The one version of the Hugging Face DCP format this reads.
const VERSION: &str = "1.0";

/// A rank file's place in the checkpoint, from its name
/// `shard-R-model-K-of-N.safetensors`: `(R, K, N)`, all from 1.
fn parse_name(name: &str) -> Option<(u64, u64, u64)> {
    let rest = name.strip_prefix("shard-")?.strip_suffix(".safetensors")?;
    let (rank, rest) = rest.split_once("-model-")?;
    let (k, n) = rest.split_once("-of-")?;
    let number = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    Some((number(rank)?, number(k)?, number(n)?))
}

/// One rank file, opened for positional reads.
#[derive(Debug)]
struct RankFile {
    name: String,
    file: SafeTensors<FileSource>,
}

/// One piece of a tensor: where it is in the full tensor, and in its file.
#[derive(Debug, Clone)]
struct Piece {
    /// Index into the checkpoint's files.
    file: usize,
    offsets: Vec<u64>,
    shape: Vec<u64>,
    /// The piece's first byte in its file.
    start: u64,
}

/// A tensor of the checkpoint: its full declaration, its output file, its
/// pieces.
#[derive(Debug)]
struct DcpTensor {
    spec: TensorSpec,
    /// Output file, from 0.
    output: usize,
    pieces: Vec<Piece>,
}

/// The rank files of a torch distributed checkpoint (DCP) saved with the
/// Hugging Face storage writer, read and checked.
///
/// `torch.distributed.checkpoint.HuggingFaceStorageWriter(save_distributed=True)`
/// has every rank write the pieces it holds of each tensor (row slices,
/// column slices, whole tensors) into its own safetensors files,
/// `shard-0000R-model-0000K-of-0000N.safetensors` (rank R from 1, output
/// file K of N from the writer's `fqn_to_index_mapping`), whose metadata
/// holds `DCP_SHARDING_INFO`: the JSON text of an object from tensor name
/// to `{"saved_offsets": [...]}`, where the piece starts in the full
/// tensor. Nothing records the full shape: as torch's own consolidation
/// does, it is the pieces' extent (the largest offset plus size in each
/// dimension).
///
/// [`DcpCheckpoint::open`] reads every rank file's header and checks the
/// checkpoint before anything is written: the pieces of each tensor agree
/// on dtype and dimensions, do not overlap and cover the whole tensor, and
/// each tensor goes to one output file. [`DcpCheckpoint::plan`] is then a
/// [`Plan`] whose jobs copy the pieces into their places: each job makes
/// one slab of at most [`PIECE`] bytes of one tensor (a run of rows), read
/// from the pieces with positional reads and written with one positional
/// write, so that no whole tensor is held and a column slice (not
/// contiguous in the full tensor) costs a copy in memory, not a write per
/// row. The set writer ([`save_set`](crate::set::save_set), with
/// [`DcpCheckpoint::sharding`]) or [`save_plan`](crate::save_plan) writes
/// it atomically.
#[derive(Debug)]
pub struct DcpCheckpoint {
    dir: PathBuf,
    files: Vec<RankFile>,
    /// By output file, then name.
    tensors: Vec<DcpTensor>,
    outputs: usize,
    ranks: usize,
    metadata: Metadata,
    /// Slab buffers (a slab, a piece's rows) reused from job to job.
    buffers: std::sync::Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
}

impl DcpCheckpoint {
    /// Whether `dir` is a local directory holding the rank files of a DCP
    /// checkpoint (`shard-R-model-K-of-N.safetensors`): what `merge`
    /// consolidates.
    pub fn is_checkpoint(dir: &Path) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| parse_name(n).is_some())
        })
    }

    /// Reads the header of every rank file in `dir` and checks the
    /// checkpoint (see [`DcpCheckpoint`]). Files are read with positional
    /// reads, never mapped, so a file truncated later is an error, not a
    /// signal. Every `*.safetensors` file in `dir` must be a rank file;
    /// other files are ignored.
    ///
    /// # Errors
    /// A file that cannot be read or breaks a reader rule (naming it);
    /// [`ShardError::DcpFile`] for a file that is not a rank file or whose
    /// sharding info is missing or malformed; [`ShardError::DcpDisagree`],
    /// [`ShardError::DcpOverlap`], [`ShardError::DcpNotCovered`] for
    /// pieces that do not make whole tensors; [`Error::UnsupportedDtype`]
    /// for a dtype under a byte; [`crate::WriteError`]s for sizes past the
    /// format's caps.
    pub fn open(dir: impl AsRef<Path>, options: &ReadOptions) -> Result<DcpCheckpoint> {
        let dir = dir.as_ref();
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".safetensors") {
                names.push(name.to_string());
            }
        }
        names.sort();
        let mut files = Vec::with_capacity(names.len());
        let mut places = Vec::with_capacity(names.len());
        for name in names {
            let path = dir.join(&name);
            let bad = |problem: String| Error::from(ShardError::DcpFile { problem }).at(&path);
            let Some((rank, k, n)) = parse_name(&name) else {
                return Err(bad(
                    "its name is not shard-R-model-K-of-N.safetensors".to_string()
                ));
            };
            if rank == 0 || k == 0 || k > n {
                return Err(bad(format!(
                    "its name says rank {rank}, file {k} of {n}: ranks and files count from 1"
                )));
            }
            let source = FileSource::open(&path).map_err(|e| Error::io(&path, e))?;
            let file = SafeTensors::from_source(source, options)?;
            places.push((rank, k, n));
            files.push(RankFile { name, file });
        }
        let Some(&(_, _, n)) = places.first() else {
            return Err(Error::from(ShardError::DcpFile {
                problem: "the directory holds no shard-R-model-K-of-N.safetensors file".to_string(),
            })
            .at(dir));
        };
        for (i, &(_, _, other)) in places.iter().enumerate() {
            if other != n {
                return Err(disagree(
                    None,
                    &files[0].name,
                    &files[i].name,
                    format!("{n} output files or {other}"),
                )
                .at(dir));
            }
        }
        check_ranks(&places, &files).map_err(|e| e.at(dir))?;
        let metadata = common_metadata(&files).map_err(|e| e.at(dir))?;
        let mut tensors = gather(&files, &places, dir)?;
        for t in &mut tensors {
            check_pieces(t, &files).map_err(|e| e.at(dir))?;
        }
        // Output files in use, numbered from 0 in order (an index no tensor
        // maps to gets no file).
        let used: std::collections::BTreeSet<u64> = places.iter().map(|p| p.1).collect();
        let number: HashMap<u64, usize> = used.iter().enumerate().map(|(i, &k)| (k, i)).collect();
        for t in &mut tensors {
            t.output = number[&(t.output as u64)];
        }
        tensors.sort_by(|a, b| (a.output, &a.spec.name).cmp(&(b.output, &b.spec.name)));
        Ok(DcpCheckpoint {
            dir: dir.to_path_buf(),
            files,
            tensors,
            outputs: used.len(),
            ranks: places.iter().map(|p| p.0).max().unwrap_or(0) as usize,
            metadata,
            buffers: Default::default(),
        })
    }

    /// The directory read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The rank files, in name order.
    pub fn files(&self) -> impl Iterator<Item = &Path> + '_ {
        self.files.iter().filter_map(|f| f.file.path())
    }

    /// The full tensors, ordered by output file, then name.
    pub fn specs(&self) -> impl ExactSizeIterator<Item = &TensorSpec> + '_ {
        self.tensors.iter().map(|t| &t.spec)
    }

    /// Number of output files the checkpoint maps its tensors to (torch's
    /// `fqn_to_index_mapping`, read from the files' names).
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Number of ranks that wrote the checkpoint (the largest rank in the
    /// files' names; ranks 1 to it all have files).
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The data bytes of the full tensors.
    pub fn data_len(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.spec.byte_len().unwrap_or(0))
            .sum()
    }

    /// The output's metadata: the rank files' own keys (`format`), without
    /// the DCP keys.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Which output file each tensor of [`DcpCheckpoint::plan`] goes to,
    /// as torch's mapping says.
    pub fn sharding(&self) -> Sharding {
        Sharding::Given {
            parts: self.tensors.iter().map(|t| t.output).collect(),
            count: self.outputs,
        }
    }

    /// A plan making every full tensor (in [`DcpCheckpoint::specs`]
    /// order) from its pieces, with [`DcpCheckpoint::metadata`]: one job
    /// per slab of at most [`PIECE`] bytes (see [`DcpCheckpoint`]).
    pub fn plan(&self) -> Plan<'_> {
        let metadata = (!self.metadata.is_empty()).then(|| self.metadata.clone());
        let mut plan = Plan::new(metadata);
        for t in &self.tensors {
            let out = plan.declare(t.spec.clone());
            let slabs = Slabs::new(t);
            if slabs.count == 0 {
                plan.push(vec![out], |_: &dyn Sink| Ok::<(), Error>(()));
                continue;
            }
            for k in 0..slabs.count {
                let slabs = slabs.clone();
                plan.push(vec![out], move |sink: &dyn Sink| {
                    self.write_slab(t, &slabs, k, out, sink)
                });
            }
        }
        plan
    }

    /// Makes slab `k` of `t` from the pieces it meets and writes it.
    fn write_slab(
        &self,
        t: &DcpTensor,
        slabs: &Slabs,
        k: u64,
        out: usize,
        sink: &dyn Sink,
    ) -> Result<()> {
        let full = &t.spec.shape;
        let e = t.spec.dtype.size().unwrap_or(1) as u64;
        let (prefix, a, b) = slabs.slab(full, k);
        let inner = slabs.inner;
        let len = ((b - a) * inner * e) as usize;
        let offset = slabs.offset(full, &prefix, a) * e;
        if let Some((p, src)) = self.whole_in_one(t, slabs, (&prefix, a, b)) {
            let file = self.files[p.file].file.source();
            return sink.copy_file(out, offset, file, src, len as u64);
        }
        // Buffers go back to the checkpoint's pool for the next job (as
        // many pairs as jobs ran at once; freed with the checkpoint).
        let (mut buf, mut scratch) = crate::plan::lock(&self.buffers).pop().unwrap_or_default();
        buf.resize(len, 0);
        let done = self
            .fill_slab(t, slabs, (&prefix, a, b), &mut buf[..len], &mut scratch)
            .and_then(|()| sink.write(out, offset, &buf[..len]));
        crate::plan::lock(&self.buffers).push((buf, scratch));
        done
    }

    /// The piece holding all of a slab when it is one contiguous range of
    /// its file (a row piece), and where that range starts.
    fn whole_in_one<'t>(
        &self,
        t: &'t DcpTensor,
        slabs: &Slabs,
        (prefix, a, b): (&[u64], u64, u64),
    ) -> Option<(&'t Piece, u64)> {
        let full = &t.spec.shape;
        let s = slabs.dim;
        if full.is_empty() {
            return t.pieces.first().map(|p| (p, p.start));
        }
        let e = t.spec.dtype.size().unwrap_or(1) as u64;
        let p = t.pieces.iter().find(|p| {
            (0..s).all(|d| p.offsets[d] <= prefix[d] && prefix[d] < p.offsets[d] + p.shape[d])
                && p.offsets[s] <= a
                && b <= p.offsets[s] + p.shape[s]
        })?;
        if !(s + 1..full.len()).all(|d| p.shape[d] == full[d]) {
            return None;
        }
        let first = (0..s).fold(0u64, |at, d| at * p.shape[d] + (prefix[d] - p.offsets[d]));
        let row = first * p.shape[s] + (a - p.offsets[s]);
        Some((p, p.start + row * slabs.inner * e))
    }

    /// Fills `buf` with the slab `(prefix, a, b)` of `t`: every piece
    /// meeting it read into its place (through `scratch` when its rows are
    /// not whole in the slab).
    fn fill_slab(
        &self,
        t: &DcpTensor,
        slabs: &Slabs,
        (prefix, a, b): (&[u64], u64, u64),
        buf: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let full = &t.spec.shape;
        let e = t.spec.dtype.size().unwrap_or(1) as u64;
        let s = slabs.dim;
        let inner = slabs.inner;
        for p in &t.pieces {
            if p.shape.contains(&0) {
                continue;
            }
            if (0..s).any(|d| prefix[d] < p.offsets[d] || prefix[d] >= p.offsets[d] + p.shape[d]) {
                continue;
            }
            // Rows of dimension s this piece holds within the slab.
            let (lo, hi) = if full.is_empty() {
                (0, 1)
            } else {
                (a.max(p.offsets[s]), b.min(p.offsets[s] + p.shape[s]))
            };
            if lo >= hi {
                continue;
            }
            let piece_inner: u64 = p.shape.iter().skip(s + 1).product();
            let first = (0..s).fold(0u64, |at, d| at * p.shape[d] + (prefix[d] - p.offsets[d]));
            let rows_before = if full.is_empty() {
                0
            } else {
                first * p.shape[s] + (lo - p.offsets[s])
            };
            let src = p.start + rows_before * piece_inner * e;
            let count = ((hi - lo) * piece_inner * e) as usize;
            let file = &self.files[p.file].file;
            let read = |buf: &mut [u8]| {
                file.source()
                    .read_exact_at(src, buf)
                    .map_err(|err| Error::io(file.path().unwrap_or(&self.dir), err))
            };
            let spans_inner = (s + 1..full.len()).all(|d| p.shape[d] == full[d]);
            if spans_inner {
                let at = ((lo - a) * inner * e) as usize;
                read(&mut buf[at..at + count])?;
                continue;
            }
            scratch.resize(count, 0);
            read(&mut scratch[..count])?;
            scatter(&scratch[..count], buf, full, p, s, lo - a, hi - lo, e);
        }
        Ok(())
    }
}

/// How a tensor is cut into slabs: fixed indices on the dimensions before
/// `dim`, a run of at most `rows` indices on `dim`, everything after it.
#[derive(Debug, Clone)]
struct Slabs {
    dim: usize,
    rows: u64,
    /// Elements after `dim` (one index of `dim`).
    inner: u64,
    /// Slabs along `dim`, per prefix.
    per_prefix: u64,
    count: u64,
}

impl Slabs {
    fn new(t: &DcpTensor) -> Slabs {
        let full = &t.spec.shape;
        let e = t.spec.dtype.size().unwrap_or(1) as u64;
        let numel: u64 = full.iter().product();
        if numel == 0 {
            return Slabs {
                dim: 0,
                rows: 1,
                inner: 1,
                per_prefix: 0,
                count: 0,
            };
        }
        if full.is_empty() {
            return Slabs {
                dim: 0,
                rows: 1,
                inner: 1,
                per_prefix: 1,
                count: 1,
            };
        }
        let target = PIECE as u64;
        // The outermost dimension one index of which fits the target.
        let mut dim = 0;
        let mut inner: u64 = full[1..].iter().product();
        while inner * e > target && dim + 1 < full.len() {
            dim += 1;
            inner /= full[dim];
        }
        let rows = (target / (inner * e)).clamp(1, full[dim]);
        let per_prefix = full[dim].div_ceil(rows);
        let prefixes: u64 = full[..dim].iter().product();
        Slabs {
            dim,
            rows,
            inner,
            per_prefix,
            count: prefixes * per_prefix,
        }
    }

    /// Slab `k`: its indices on the dimensions before `dim`, and its rows
    /// `[a, b)` of `dim`.
    fn slab(&self, full: &[u64], k: u64) -> (Vec<u64>, u64, u64) {
        if full.is_empty() {
            return (Vec::new(), 0, 1);
        }
        let mut rest = k / self.per_prefix;
        let a = (k % self.per_prefix) * self.rows;
        let b = (a + self.rows).min(full[self.dim]);
        let mut prefix = vec![0; self.dim];
        for d in (0..self.dim).rev() {
            prefix[d] = rest % full[d];
            rest /= full[d];
        }
        (prefix, a, b)
    }

    /// The element offset of row `a` of the slab at `prefix`.
    fn offset(&self, full: &[u64], prefix: &[u64], a: u64) -> u64 {
        if full.is_empty() {
            return 0;
        }
        let mut at = 0u64;
        for (d, &i) in prefix.iter().enumerate() {
            at = at * full[d] + i;
        }
        (at * full[self.dim] + a) * self.inner
    }
}

/// Copies a piece's rows (`rows` indices of dimension `s`, all of its
/// dimensions after `s`, contiguous in `src`) into their places in the
/// slab `dst`, starting at slab row `row0`: in runs as long as the piece
/// is contiguous in the full tensor.
#[allow(clippy::too_many_arguments)]
fn scatter(
    src: &[u8],
    dst: &mut [u8],
    full: &[u64],
    p: &Piece,
    s: usize,
    row0: u64,
    rows: u64,
    e: u64,
) {
    let n = full.len();
    // Full-tensor strides (elements) of the dimensions after s.
    let mut stride = vec![1u64; n];
    for d in (0..n.saturating_sub(1)).rev() {
        stride[d] = stride[d + 1] * full[d + 1];
    }
    // The run: the last dimensions, up to and including the first partial
    // one from the end (dimensions after it are whole, so contiguous).
    let mut top = n;
    let mut run = 1u64;
    while top > s + 1 {
        top -= 1;
        run *= p.shape[top];
        if p.shape[top] != full[top] {
            break;
        }
    }
    let run_bytes = (run * e) as usize;
    // Runs per row of s: every index of the dimensions s+1..top.
    let outer: Vec<u64> = p.shape[s + 1..top].to_vec();
    let runs_per_row: u64 = outer.iter().product();
    let row_elems = stride[s];
    let mut idx = vec![0u64; outer.len()];
    let mut from = 0usize;
    for r in 0..rows {
        idx.iter_mut().for_each(|i| *i = 0);
        for _ in 0..runs_per_row {
            let mut at = (row0 + r) * row_elems;
            for (j, &i) in idx.iter().enumerate() {
                let d = s + 1 + j;
                at += (i + p.offsets[d]) * stride[d];
            }
            at += (top..n).map(|d| p.offsets[d] * stride[d]).sum::<u64>();
            let at = (at * e) as usize;
            dst[at..at + run_bytes].copy_from_slice(&src[from..from + run_bytes]);
            from += run_bytes;
            // Next index, last dimension fastest.
            for j in (0..idx.len()).rev() {
                idx[j] += 1;
                if idx[j] < outer[j] {
                    break;
                }
                idx[j] = 0;
            }
        }
    }
}

fn disagree(tensor: Option<&str>, first: &str, second: &str, problem: String) -> Error {
    ShardError::DcpDisagree {
        tensor: tensor.map(str::to_string),
        first: first.to_string(),
        second: second.to_string(),
        problem,
    }
    .into()
}

/// Refuses a checkpoint whose ranks are not 1 to the largest (a rank's
/// files missing entirely: the whole tensors it alone held would be lost
/// without a gap to show it).
fn check_ranks(places: &[(u64, u64, u64)], files: &[RankFile]) -> Result<()> {
    let ranks: std::collections::BTreeSet<u64> = places.iter().map(|p| p.0).collect();
    let last = ranks.iter().next_back().copied().unwrap_or(0);
    if let Some(missing) = (1..=last).find(|r| !ranks.contains(r)) {
        return Err(ShardError::DcpFile {
            problem: format!(
                "rank {missing} has no file, but rank {last} has ({})",
                files
                    .iter()
                    .zip(places)
                    .find(|(_, p)| p.0 == last)
                    .map_or("", |(f, _)| f.name.as_str())
            ),
        }
        .into());
    }
    Ok(())
}

/// The rank files' metadata without the DCP keys, which must agree.
fn common_metadata(files: &[RankFile]) -> Result<Metadata> {
    let mut out = Metadata::new();
    let mut from: BTreeMap<String, &str> = BTreeMap::new();
    for f in files {
        for (k, v) in f.file.metadata().into_iter().flatten() {
            if k == SHARDING_INFO_KEY || k == VERSION_KEY {
                continue;
            }
            match out.get(k) {
                Some(first) if first != v => {
                    return Err(ShardError::MetadataConflict {
                        key: k.clone(),
                        first: first.clone(),
                        first_shard: from[k].to_string(),
                        second: v.clone(),
                        second_shard: f.name.clone(),
                    }
                    .into())
                }
                Some(_) => {}
                None => {
                    out.insert(k.clone(), v.clone());
                    from.insert(k.clone(), &f.name);
                }
            }
        }
    }
    Ok(out)
}

/// Reads each file's sharding info and collects the pieces of every tensor.
fn gather(files: &[RankFile], places: &[(u64, u64, u64)], dir: &Path) -> Result<Vec<DcpTensor>> {
    let mut tensors: Vec<DcpTensor> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (i, f) in files.iter().enumerate() {
        let path = f.file.path().unwrap_or(dir);
        let bad = |problem: String| Error::from(ShardError::DcpFile { problem }).at(path);
        let metadata = f.file.metadata();
        let get = |key: &str| metadata.and_then(|m| m.get(key));
        if let Some(version) = get(VERSION_KEY) {
            if version != VERSION {
                return Err(bad(format!(
                    "{VERSION_KEY} is {version:?}; this reads version {VERSION:?}"
                )));
            }
        }
        let Some(info) = get(SHARDING_INFO_KEY) else {
            return Err(bad(format!("its metadata has no {SHARDING_INFO_KEY}")));
        };
        let info: serde_json::Value = serde_json::from_str(info)
            .map_err(|e| bad(format!("{SHARDING_INFO_KEY} is not JSON: {e}")))?;
        let Some(info) = info.as_object() else {
            return Err(bad(format!("{SHARDING_INFO_KEY} is not a JSON object")));
        };
        let header = f.file.header();
        if let Some(extra) = info.keys().find(|k| header.get(k).is_none()) {
            return Err(bad(format!(
                "{SHARDING_INFO_KEY} lists tensor {extra:?}, which the file does not hold"
            )));
        }
        for t in header.tensors() {
            let offsets = info
                .get(t.name)
                .and_then(|v| v.get("saved_offsets"))
                .and_then(|v| v.as_array())
                .ok_or_else(|| {
                    bad(format!(
                        "tensor {:?} has no saved_offsets array in {SHARDING_INFO_KEY}",
                        t.name
                    ))
                })?;
            let offsets = offsets
                .iter()
                .map(serde_json::Value::as_u64)
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(|| {
                    bad(format!(
                        "tensor {:?}: saved_offsets are not all non-negative integers",
                        t.name
                    ))
                })?;
            if offsets.len() != t.shape.len() {
                return Err(bad(format!(
                    "tensor {:?}: {} saved_offsets for a shape of {} dimensions",
                    t.name,
                    offsets.len(),
                    t.shape.len()
                )));
            }
            if offsets
                .iter()
                .zip(t.shape)
                .any(|(o, s)| o.checked_add(*s).is_none())
            {
                return Err(bad(format!(
                    "tensor {:?}: saved_offsets {offsets:?} plus shape {:?} overflow 64 bits",
                    t.name, t.shape
                )));
            }
            let piece = Piece {
                file: i,
                offsets,
                shape: t.shape.to_vec(),
                start: header.data_start() + t.data_offsets.0,
            };
            let output = places[i].1 as usize;
            match by_name.get(t.name) {
                None => {
                    by_name.insert(t.name.to_string(), tensors.len());
                    tensors.push(DcpTensor {
                        spec: TensorSpec::new(t.name, t.dtype, t.shape),
                        output,
                        pieces: vec![piece],
                    });
                }
                Some(&j) => {
                    let known = &mut tensors[j];
                    let first = &files[known.pieces[0].file].name;
                    let differ =
                        |problem: String| disagree(Some(t.name), first, &f.name, problem).at(dir);
                    if known.spec.dtype != t.dtype {
                        return Err(differ(format!("dtype {} or {}", known.spec.dtype, t.dtype)));
                    }
                    if known.spec.shape.len() != t.shape.len() {
                        return Err(differ(format!(
                            "{} dimensions or {}",
                            known.spec.shape.len(),
                            t.shape.len()
                        )));
                    }
                    if known.output != output {
                        return Err(differ(format!("output file {} or {output}", known.output)));
                    }
                    known.pieces.push(piece);
                }
            }
        }
    }
    Ok(tensors)
}

/// Sets a tensor's full shape from its pieces and checks they tile it:
/// no two overlap, and together they hold every element.
fn check_pieces(t: &mut DcpTensor, files: &[RankFile]) -> Result<()> {
    let name = t.spec.name.clone();
    let dtype: Dtype = t.spec.dtype;
    if dtype.size().is_none() {
        return Err(Error::UnsupportedDtype {
            tensor: name,
            operation: "DCP consolidation",
            dtype,
        });
    }
    let n = t.spec.shape.len();
    let mut full = vec![0u64; n];
    for p in &t.pieces {
        for (d, extent) in full.iter_mut().enumerate() {
            *extent = (*extent).max(p.offsets[d] + p.shape[d]);
        }
    }
    t.spec.shape = full;
    // The caps of the format (element and byte counts fit 64 bits).
    let numel = crate::dtype::numel(&t.spec.shape).ok_or_else(|| {
        Error::from(crate::WriteError::ShapeOverflow {
            tensor: name.clone(),
            shape: t.spec.shape.clone(),
            dtype,
        })
    })?;
    t.spec.byte_len()?;
    // Overlaps: sorted by the first dimension, each piece is compared with
    // those starting before it ends there.
    let mut live: Vec<&Piece> = t.pieces.iter().filter(|p| !p.shape.contains(&0)).collect();
    live.sort_by_key(|p| p.offsets.first().copied().unwrap_or(0));
    for (i, a) in live.iter().enumerate() {
        for b in &live[i + 1..] {
            if n > 0 && b.offsets[0] >= a.offsets[0] + a.shape[0] {
                break;
            }
            let meet = (0..n).all(|d| {
                a.offsets[d] < b.offsets[d] + b.shape[d] && b.offsets[d] < a.offsets[d] + a.shape[d]
            });
            if meet {
                let piece = |p: &Piece| DcpPiece {
                    file: files[p.file].name.clone(),
                    offsets: p.offsets.clone(),
                    shape: p.shape.clone(),
                };
                return Err(ShardError::DcpOverlap {
                    tensor: name,
                    pieces: Box::new([piece(a), piece(b)]),
                }
                .into());
            }
        }
    }
    // Disjoint pieces inside the extent: they tile it when their elements
    // add up to it. Each piece's count fits (its file holds it).
    let covered = live
        .iter()
        .map(|p| p.shape.iter().product::<u64>())
        .fold(0u64, u64::saturating_add);
    if covered != numel {
        return Err(ShardError::DcpNotCovered {
            tensor: name,
            shape: t.spec.shape.clone(),
            covered,
            numel,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{serialize, TensorRef, WriteOptions};

    #[test]
    fn rank_file_names() {
        assert_eq!(
            parse_name("shard-00002-model-00001-of-00003.safetensors"),
            Some((2, 1, 3))
        );
        assert_eq!(
            parse_name("shard-1-model-1-of-1.safetensors"),
            Some((1, 1, 1))
        );
        for bad in [
            "model-00001-of-00002.safetensors",
            "shard--model-1-of-1.safetensors",
            "shard-1-model-1-of-1.safetensors.tmp",
            "shard-+1-model-1-of-1.safetensors",
            "shard-1-model-1-of-99999999999999999999999.safetensors",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }

    /// A full tensor: name, dtype, shape, C-order bytes.
    struct Full {
        name: &'static str,
        dtype: Dtype,
        shape: Vec<u64>,
        data: Vec<u8>,
    }

    fn full(name: &'static str, dtype: Dtype, shape: &[u64], seed: u32) -> Full {
        let len = shape.iter().product::<u64>() * dtype.size().unwrap() as u64;
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        let data = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        Full {
            name,
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    /// The box `offsets`/`shape` of `t`, in C order.
    fn cut(t: &Full, offsets: &[u64], shape: &[u64]) -> Vec<u8> {
        let e = t.dtype.size().unwrap() as u64;
        let n = shape.len();
        let numel: u64 = shape.iter().product();
        let mut out = Vec::new();
        for i in 0..numel {
            let (mut rest, mut at) = (i, 0u64);
            let mut idx = vec![0; n];
            for d in (0..n).rev() {
                idx[d] = rest % shape[d];
                rest /= shape[d];
            }
            for d in 0..n {
                at = at * t.shape[d] + idx[d] + offsets[d];
            }
            out.extend_from_slice(&t.data[(at * e) as usize..((at + 1) * e) as usize]);
        }
        out
    }

    /// Cuts `t` into `parts` even pieces along `dim` (None: whole, held by
    /// rank 1), one per rank: `(rank, offsets, shape, bytes)`.
    fn split(t: &Full, dim: Option<usize>, parts: u64) -> Vec<RankPiece> {
        let Some(dim) = dim else {
            let zero = vec![0; t.shape.len()];
            return vec![(1, zero.clone(), t.shape.clone(), t.data.clone())];
        };
        let per = t.shape[dim].div_ceil(parts);
        (0..parts)
            .map(|r| {
                let mut offsets = vec![0; t.shape.len()];
                let mut shape = t.shape.clone();
                offsets[dim] = (r * per).min(t.shape[dim]);
                shape[dim] = per.min(t.shape[dim] - offsets[dim]);
                let bytes = cut(t, &offsets, &shape);
                (r as usize + 1, offsets, shape, bytes)
            })
            .collect()
    }

    type RankPieces = Vec<(String, Dtype, Vec<u64>, Vec<u64>, Vec<u8>)>;
    /// A piece for a rank: rank (from 1), offsets, shape, bytes.
    type RankPiece = (usize, Vec<u64>, Vec<u64>, Vec<u8>);

    /// Writes rank files as torch's writer does: `ranks[r][k]` is what rank
    /// r + 1 holds for output file k + 1 of `n`.
    fn write_ranks(dir: &Path, ranks: &[Vec<RankPieces>], n: usize) {
        for (r, outputs) in ranks.iter().enumerate() {
            for (k, pieces) in outputs.iter().enumerate() {
                if pieces.is_empty() {
                    continue;
                }
                let info: serde_json::Map<String, serde_json::Value> = pieces
                    .iter()
                    .map(|(name, _, offsets, _, _)| {
                        (
                            name.clone(),
                            serde_json::json!({ "saved_offsets": offsets }),
                        )
                    })
                    .collect();
                let metadata = Metadata::from([
                    ("format".to_string(), "pt".to_string()),
                    (VERSION_KEY.to_string(), VERSION.to_string()),
                    (
                        SHARDING_INFO_KEY.to_string(),
                        serde_json::Value::Object(info).to_string(),
                    ),
                ]);
                let refs = pieces
                    .iter()
                    .map(|(name, dtype, _, shape, data)| TensorRef {
                        name,
                        dtype: *dtype,
                        shape,
                        data,
                    });
                let bytes = serialize(refs, Some(&metadata)).unwrap();
                let name = format!(
                    "shard-{:05}-model-{:05}-of-{n:05}.safetensors",
                    r + 1,
                    k + 1
                );
                std::fs::write(dir.join(name), bytes).unwrap();
            }
        }
    }

    /// A checkpoint of `tensors`, each cut along its dim over `world`
    /// ranks, all in output file 1.
    fn checkpoint(dir: &Path, tensors: &[(&Full, Option<usize>)], world: usize) {
        let mut ranks: Vec<Vec<RankPieces>> = vec![vec![Vec::new()]; world];
        for (t, dim) in tensors {
            for (r, offsets, shape, bytes) in split(t, *dim, world as u64) {
                ranks[r - 1][0].push((t.name.to_string(), t.dtype, offsets, shape, bytes));
            }
        }
        write_ranks(dir, &ranks, 1);
    }

    fn consolidated(dir: &Path) -> Result<Vec<u8>> {
        let c = DcpCheckpoint::open(dir, &ReadOptions::default())?;
        let bytes = c.plan().to_bytes(&WriteOptions::default());
        bytes
    }

    fn expected(tensors: &[&Full]) -> Vec<u8> {
        let refs = tensors.iter().map(|t| TensorRef {
            name: t.name,
            dtype: t.dtype,
            shape: &t.shape,
            data: &t.data,
        });
        let metadata = Metadata::from([("format".to_string(), "pt".to_string())]);
        serialize(refs, Some(&metadata)).unwrap()
    }

    #[test]
    fn pieces_in_every_direction_make_the_full_tensors() {
        // Tensors over PIECE bytes, so that they are cut into several
        // slabs, along the first, a middle and the last dimension.
        let rows = full("rows", Dtype::F32, &[1500, 1000], 1);
        let cols = full("cols", Dtype::BF16, &[1300, 2100], 2);
        let mid = full("mid", Dtype::F16, &[3, 1100, 700], 3);
        let last = full("last", Dtype::I64, &[2, 300, 1500], 4);
        let wide = full("wide", Dtype::U8, &[1, 5 << 20], 5);
        let whole = full("whole", Dtype::F64, &[7, 3], 6);
        let scalar = full("scalar", Dtype::F32, &[], 7);
        let empty = full("empty", Dtype::F32, &[0, 4], 8);
        for world in [2, 3] {
            let dir = tempfile::tempdir().unwrap();
            checkpoint(
                dir.path(),
                &[
                    (&rows, Some(0)),
                    (&cols, Some(1)),
                    (&mid, Some(1)),
                    (&last, Some(2)),
                    (&wide, Some(1)),
                    (&whole, None),
                    (&scalar, None),
                    (&empty, Some(0)),
                ],
                world,
            );
            assert!(DcpCheckpoint::is_checkpoint(dir.path()));
            let got = consolidated(dir.path()).unwrap();
            let want = expected(&[&rows, &cols, &mid, &last, &wide, &whole, &scalar, &empty]);
            assert!(got == want, "{world} ranks: the consolidated file differs");
            // Saved to a file: row slabs copied within the kernel.
            let out = tempfile::tempdir().unwrap();
            let path = out.path().join("out.safetensors");
            let c = DcpCheckpoint::open(dir.path(), &ReadOptions::default()).unwrap();
            crate::save_plan(&path, &c.plan(), &WriteOptions::default(), &()).unwrap();
            assert!(
                std::fs::read(&path).unwrap() == want,
                "{world} ranks: the saved file differs"
            );
            // A rank file cut short after it was opened: an error naming
            // it, and no output.
            let rank2 = dir
                .path()
                .join("shard-00002-model-00001-of-00001.safetensors");
            let len = std::fs::metadata(&rank2).unwrap().len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&rank2)
                .unwrap()
                .set_len(len / 2)
                .unwrap();
            let again = out.path().join("again.safetensors");
            let e = crate::save_plan(&again, &c.plan(), &WriteOptions::default(), &()).unwrap_err();
            assert_eq!(e.file(), Some(rank2.as_path()), "{e}");
            assert!(!again.exists());
        }
    }

    #[test]
    fn blocks_of_a_two_dimensional_mesh() {
        // Four ranks holding the four quarters (uneven) of a matrix.
        let t = full("w", Dtype::F32, &[1025, 1537], 9);
        let mut ranks: Vec<Vec<RankPieces>> = Vec::new();
        for (r0, r1) in [(0, 600), (600, 1025)] {
            for (c0, c1) in [(0, 1000), (1000, 1537)] {
                let (o, s) = (vec![r0, c0], vec![r1 - r0, c1 - c0]);
                let bytes = cut(&t, &o, &s);
                ranks.push(vec![vec![("w".to_string(), t.dtype, o, s, bytes)]]);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        write_ranks(dir.path(), &ranks, 1);
        assert!(consolidated(dir.path()).unwrap() == expected(&[&t]));
    }

    /// A two-rank checkpoint of one [4, 6] F32 tensor cut in rows, whose
    /// second piece is `second` (offsets, shape, dtype).
    fn two_pieces(dir: &Path, second: (Vec<u64>, Vec<u64>, Dtype)) {
        let t = full("w", Dtype::F32, &[4, 6], 10);
        let (o, s, d) = second;
        let len = s.iter().product::<u64>() as usize * d.size().unwrap();
        let ranks = vec![
            vec![vec![(
                "w".to_string(),
                Dtype::F32,
                vec![0, 0],
                vec![2, 6],
                cut(&t, &[0, 0], &[2, 6]),
            )]],
            vec![vec![("w".to_string(), d, o, s, vec![1; len])]],
        ];
        write_ranks(dir, &ranks, 1);
    }

    #[test]
    fn pieces_that_do_not_tile_are_refused() {
        let open = |second| {
            let dir = tempfile::tempdir().unwrap();
            two_pieces(dir.path(), second);
            DcpCheckpoint::open(dir.path(), &ReadOptions::default()).unwrap_err()
        };
        let e = open((vec![1, 0], vec![2, 6], Dtype::F32));
        assert!(
            e.file()
                .is_some_and(|f| f.starts_with(std::env::temp_dir())),
            "{e}"
        );
        assert!(
            matches!(e.shard(), Some(ShardError::DcpOverlap { tensor, .. }) if tensor == "w"),
            "{e}"
        );
        assert!(
            e.to_string().contains("at offsets [1, 0] (shape [2, 6])"),
            "{e}"
        );
        let e = open((vec![3, 0], vec![1, 6], Dtype::F32));
        assert!(
            matches!(
                e.shard(),
                Some(ShardError::DcpNotCovered {
                    covered: 18,
                    numel: 24,
                    ..
                })
            ),
            "{e}"
        );
        // An offset past the end shows as a gap: nothing records the shape.
        let e = open((vec![2, 6], vec![2, 6], Dtype::F32));
        assert!(
            matches!(e.shard(), Some(ShardError::DcpNotCovered { .. })),
            "{e}"
        );
        let e = open((vec![2, 0], vec![2, 6], Dtype::F16));
        assert!(
            matches!(e.shard(), Some(ShardError::DcpDisagree { problem, .. }) if problem == "dtype F32 or F16"),
            "{e}"
        );
        let e = open((vec![2, 0, 0], vec![2, 6, 1], Dtype::F32));
        assert!(
            matches!(e.shard(), Some(ShardError::DcpDisagree { .. })),
            "{e}"
        );
        // Offsets whose extent overflows the format's caps.
        let e = open((vec![u64::MAX / 4, 0], vec![2, 6], Dtype::F32));
        assert!(
            matches!(
                e.detail(),
                Error::Write(crate::WriteError::ShapeOverflow { .. })
            ),
            "{e}"
        );
    }

    #[test]
    fn rank_files_that_are_not_what_torch_writes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let t = full("w", Dtype::F32, &[4, 6], 11);
        checkpoint(dir.path(), &[(&t, Some(0))], 2);
        let path = |r: usize| {
            dir.path()
                .join(format!("shard-{r:05}-model-00001-of-00001.safetensors"))
        };
        let original = std::fs::read(path(2)).unwrap();
        let rewrite = |metadata: Option<Metadata>| {
            let f = SafeTensors::from_slice(&original).unwrap();
            let v = f.tensor("w").unwrap();
            let bytes = serialize(
                [TensorRef {
                    name: "w",
                    dtype: v.dtype(),
                    shape: v.shape(),
                    data: v.data(),
                }],
                metadata.as_ref(),
            )
            .unwrap();
            std::fs::write(path(2), bytes).unwrap();
        };
        let problem = |e: Error| match e.shard() {
            Some(ShardError::DcpFile { problem }) => problem.clone(),
            _ => panic!("{e}"),
        };
        let open = || DcpCheckpoint::open(dir.path(), &ReadOptions::default());
        rewrite(None);
        let e = open().unwrap_err();
        assert_eq!(e.file(), Some(path(2).as_path()));
        assert!(problem(e).contains("no DCP_SHARDING_INFO"));
        let with = |info: &str| {
            Some(Metadata::from([(
                SHARDING_INFO_KEY.to_string(),
                info.to_string(),
            )]))
        };
        for (info, says) in [
            ("[1]", "not a JSON object"),
            ("{", "not JSON"),
            (r#"{"w": {"saved_offsets": [2]}}"#, "1 saved_offsets"),
            (r#"{"w": {"saved_offsets": [2, -1]}}"#, "non-negative"),
            (r#"{"w": {}}"#, "no saved_offsets"),
            (
                r#"{"w": {"saved_offsets": [2, 0]}, "v": {"saved_offsets": [0]}}"#,
                "\"v\"",
            ),
        ] {
            rewrite(with(info));
            assert!(problem(open().unwrap_err()).contains(says), "{info}");
        }
        std::fs::write(path(2), &original).unwrap();
        // A truncated rank file is refused by the reader, naming it.
        std::fs::write(path(2), &original[..original.len() - 3]).unwrap();
        let e = open().unwrap_err();
        assert_eq!(e.file(), Some(path(2).as_path()), "{e}");
        assert_eq!(e.rule(), Some(5), "{e}");
        std::fs::write(path(2), &original).unwrap();
        // A stray safetensors file, a rank missing in the middle.
        std::fs::write(dir.path().join("model.safetensors"), &original).unwrap();
        assert!(problem(open().unwrap_err()).contains("shard-R-model-K-of-N"));
        std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
        std::fs::rename(path(2), path(3)).unwrap();
        assert!(problem(open().unwrap_err()).contains("rank 2 has no file"));
        std::fs::rename(path(3), path(2)).unwrap();
        assert_eq!(open().unwrap().ranks(), 2);
    }
}
