//! One set, many writers: a set of shards planned once, written by several
//! processes (on one machine or several sharing a file system), and
//! committed by one.
//!
//! The processes share nothing but the file system:
//!
//! 1. **Plan.** [`StagedPlan`] says which tensor goes to which file, and which
//!    writer writes each file. [`StagedSet::prepare`] stages it as
//!    `OUTDIR/.tensorfile-set-<id>/plan.json`, where `<id>` is a hash of
//!    the plan's text: every process computing the same plan agrees on the
//!    folder, and preparing a different plan for the same prefix while one
//!    is staged is refused. Any number of processes may prepare the same
//!    plan at once.
//! 2. **Write.** Each writer writes its parts ([`StagedSet::write_part`])
//!    into the staging folder, each atomically (as [`crate::save`] writes a
//!    file: unnamed while written, or a hidden temporary named with this
//!    host and PID, which only a sweep on this host, once the PID is gone,
//!    removes). A part appears under its final name inside the folder only
//!    when it is complete. Writing a part again (a rerun of a writer that
//!    failed) replaces that part only.
//! 3. **Commit.** One process, after every writer has finished
//!    ([`StagedSet::commit`]), checks every part (present, of the planned
//!    length, with exactly the header the plan gives), renames the parts
//!    into `OUTDIR` under their final names, syncs the directory, writes
//!    the index last (atomically), and removes the staging folder.
//!    [`StagedSet::abort`] removes the staging folder instead.
//!
//! Until the commit nothing is visible under `OUTDIR`'s own names (only the
//! hidden staging folder). The commit's renames then make the shards
//! visible one by one and the index last, as [`crate::atomic::AtomicSet`]
//! does: a set's index never names a shard that is not there. A commit
//! interrupted midway (a crash, a kill) leaves some shards in place, no
//! index and the staging folder; committing again finishes it (a shard
//! already in place is checked there), and aborting takes it back: what is
//! staged and the shards already renamed (found with the plan's length and
//! header) are removed, leaving `OUTDIR` as it was.
//!
//! Commit and abort take an exclusive lock (`flock`) on the staged plan,
//! and refuse at once while a writer holds it shared (a writer is still
//! writing); writers take it shared, so two committers never race and a
//! commit never removes a part being written. (`flock` works across
//! machines on NFS where the server supports locks; where it does not,
//! keep the order by the protocol: commit only after every writer is done.)
//!
//! Where parts are staged and published is behind [`SetStage`]; the local
//! file system's is [`LocalStage`].

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic::{save_layout, AtomicFile, FileSink, NewDirs};
use crate::error::OutputError;
use crate::set::write::{check_out_dir, index_name, set_index, shard_name};
use crate::set::{ShardIndex, Sharding, SplitSummary};
use crate::writer::{plan_tensors, write_tensors, Align, Layout, StreamWriter, TensorSpec};
use crate::{Dtype, Error, Metadata, Result, TensorData, WriteOptions};

/// The start of a staging folder's name, before the plan's id.
pub const STAGING_PREFIX: &str = ".tensorfile-set-";

/// The staged plan's file name inside the staging folder.
const PLAN_FILE: &str = "plan.json";

/// What a plan file says it is.
const PLAN_FORMAT: &str = "tensorfile-set-plan";

/// The largest plan file read, in bytes (names and shapes only).
const MAX_PLAN_LEN: u64 = 256 << 20;

/// A step of writing a staged set, as a program running one step per
/// process names it (the command's `shard --plan/--write-part/--commit/
/// --abort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetStep {
    /// Stage the plan, its files dealt to this many writers.
    Plan {
        /// How many writers.
        writers: usize,
    },
    /// Write the files the plan gives this writer (0-based).
    WritePart {
        /// The writer.
        writer: usize,
    },
    /// Check every file, publish them and write the index last.
    Commit,
    /// Remove what is staged.
    Abort,
}

/// One file of a planned set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanPart {
    /// The file's name in the output directory
    /// (`<prefix>-00001-of-00004.safetensors`).
    pub file: String,
    /// The writer that writes it (a rank: 0, 1, ...).
    pub writer: usize,
    /// Its tensors.
    pub tensors: Vec<TensorSpec>,
}

/// A set planned for several writers: its files, the tensors of each and
/// which writer writes it, and the metadata every file carries. Its text
/// ([`StagedPlan::to_json`]) is the same for the same plan in every process,
/// and [`StagedPlan::id`] is a hash of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedPlan {
    prefix: String,
    align: Align,
    metadata: Option<Metadata>,
    parts: Vec<PlanPart>,
}

/// The plan file's JSON.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanJson {
    format: String,
    version: u32,
    prefix: String,
    align: u64,
    metadata: Option<Metadata>,
    parts: Vec<PartJson>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartJson {
    file: String,
    writer: usize,
    tensors: Vec<(String, String, Vec<u64>)>,
}

impl StagedPlan {
    /// A plan of the set of `specs` split by `sharding` (huggingface_hub's
    /// greedy rule over sizes, or given files), with the files dealt to
    /// `writers` writers round-robin (file `k` to writer `k % writers`).
    ///
    /// # Errors
    /// As [`StagedPlan::from_parts`].
    pub fn new(
        prefix: &str,
        specs: &[TensorSpec],
        metadata: Option<&Metadata>,
        sharding: &Sharding,
        writers: usize,
        options: &WriteOptions,
    ) -> Result<StagedPlan> {
        let (part_of, count) = sharding.resolve_specs(specs)?;
        if part_of.len() != specs.len() || part_of.iter().any(|&k| k >= count) {
            return Err(staging(format!(
                "invalid split: {} tensors, {} assignments into {count} files",
                specs.len(),
                part_of.len()
            )));
        }
        let mut groups = vec![Vec::new(); count];
        for (spec, &k) in specs.iter().zip(&part_of) {
            groups[k].push(spec.clone());
        }
        let writers = writers.max(1);
        let groups = groups
            .into_iter()
            .enumerate()
            .map(|(k, g)| (k % writers, g))
            .collect();
        StagedPlan::from_parts(prefix, groups, metadata, options)
    }

    /// A plan where each writer's own tensors (`per_writer[r]` for writer
    /// `r`, as each rank of a job holds its part of a model) are split
    /// into files of at most `max_shard_size` data bytes by
    /// huggingface_hub's rule; the files are numbered writer by writer.
    ///
    /// # Errors
    /// As [`StagedPlan::from_parts`].
    pub fn per_writer(
        prefix: &str,
        per_writer: &[Vec<TensorSpec>],
        max_shard_size: u64,
        metadata: Option<&Metadata>,
        options: &WriteOptions,
    ) -> Result<StagedPlan> {
        let mut groups = Vec::new();
        for (writer, specs) in per_writer.iter().enumerate() {
            let (part_of, count) = Sharding::MaxSize(max_shard_size).resolve_specs(specs)?;
            if specs.is_empty() {
                continue;
            }
            let mut mine = vec![Vec::new(); count];
            for (spec, &k) in specs.iter().zip(&part_of) {
                mine[k].push(spec.clone());
            }
            groups.extend(mine.into_iter().map(|g| (writer, g)));
        }
        if groups.is_empty() {
            groups.push((0, Vec::new()));
        }
        StagedPlan::from_parts(prefix, groups, metadata, options)
    }

    /// A plan of explicit files: `(writer, tensors)` for each, in file
    /// order, named as [`crate::set::split`] names them.
    ///
    /// # Errors
    /// [`Error::Output`] ([`OutputError::Staging`]) for a prefix that is
    /// not a file name's, no files, or a tensor in two files;
    /// [`Error::Write`] when a file's tensors cannot be laid out (see
    /// [`Layout::new`]).
    pub fn from_parts(
        prefix: &str,
        parts: Vec<(usize, Vec<TensorSpec>)>,
        metadata: Option<&Metadata>,
        options: &WriteOptions,
    ) -> Result<StagedPlan> {
        let count = parts.len();
        let plan = StagedPlan {
            prefix: prefix.to_string(),
            align: options.align,
            metadata: metadata.filter(|m| !m.is_empty()).cloned(),
            parts: parts
                .into_iter()
                .enumerate()
                .map(|(k, (writer, tensors))| PlanPart {
                    file: shard_name(prefix, k, count),
                    writer,
                    tensors,
                })
                .collect(),
        };
        plan.check()?;
        Ok(plan)
    }

    /// Checks what [`StagedPlan::from_parts`] promises (also of a plan read
    /// from a file).
    fn check(&self) -> Result<()> {
        let prefix = &self.prefix;
        if prefix.is_empty()
            || prefix.contains(['/', '\\', '\0'])
            || prefix == "."
            || prefix == ".."
        {
            return Err(staging(format!("`{prefix}` is not a file name prefix")));
        }
        if self.parts.is_empty() {
            return Err(staging("a set plan needs at least one file".into()));
        }
        let mut names = BTreeSet::new();
        let count = self.parts.len();
        for (k, part) in self.parts.iter().enumerate() {
            if part.file != shard_name(prefix, k, count) {
                return Err(staging(format!(
                    "file {} of the plan is named {:?}, not {:?}",
                    k + 1,
                    part.file,
                    shard_name(prefix, k, count)
                )));
            }
            for spec in &part.tensors {
                if !names.insert(spec.name.as_str()) {
                    return Err(staging(format!(
                        "tensor {:?} is planned in two files",
                        spec.name
                    )));
                }
            }
            self.layout(k)?;
        }
        Ok(())
    }

    /// The file name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The files, in order.
    pub fn parts(&self) -> &[PlanPart] {
        &self.parts
    }

    /// The metadata every file carries.
    pub fn metadata(&self) -> Option<&Metadata> {
        self.metadata.as_ref()
    }

    /// How many writers the plan names (the largest writer number, plus 1).
    pub fn writers(&self) -> usize {
        self.parts.iter().map(|p| p.writer + 1).max().unwrap_or(1)
    }

    /// The files writer `writer` writes, by position.
    pub fn parts_of(&self, writer: usize) -> Vec<usize> {
        (0..self.parts.len())
            .filter(|&k| self.parts[k].writer == writer)
            .collect()
    }

    /// The write options the plan's files are laid out with.
    fn options(&self) -> WriteOptions {
        WriteOptions::default().with_align(self.align)
    }

    /// File `k`'s layout: its header is what the written file must begin
    /// with.
    ///
    /// # Errors
    /// `k` is not a file of the plan, or the layout is refused.
    pub fn layout(&self, k: usize) -> Result<Layout> {
        let part = self.part(k)?;
        Layout::new(&part.tensors, self.metadata.as_ref(), &self.options())
    }

    fn part(&self, k: usize) -> Result<&PlanPart> {
        self.parts.get(k).ok_or_else(|| {
            staging(format!(
                "the plan has {} files (0 to {}), not file {k}",
                self.parts.len(),
                self.parts.len().saturating_sub(1)
            ))
        })
    }

    /// The set's index (`None` for a set of one file, which has none).
    ///
    /// # Errors
    /// A shape's byte count overflows (refused when planning).
    pub fn index(&self) -> Result<Option<ShardIndex>> {
        let count = self.parts.len();
        if count < 2 {
            return Ok(None);
        }
        let tensors: Vec<(&TensorSpec, usize)> = self
            .parts
            .iter()
            .enumerate()
            .flat_map(|(k, p)| p.tensors.iter().map(move |t| (t, k)))
            .collect();
        set_index(tensors.iter().map(|(t, k)| (*t, k)), &self.prefix, count).map(Some)
    }

    /// The data bytes of the whole set.
    pub fn total_size(&self) -> u64 {
        self.parts
            .iter()
            .flat_map(|p| &p.tensors)
            .map(|t| t.byte_len().unwrap_or(0))
            .fold(0u64, u64::saturating_add)
    }

    /// The plan's text: JSON, the same for the same plan everywhere.
    pub fn to_json(&self) -> String {
        let json = PlanJson {
            format: PLAN_FORMAT.into(),
            version: 1,
            prefix: self.prefix.clone(),
            align: self.align.bytes(),
            metadata: self.metadata.clone(),
            parts: self
                .parts
                .iter()
                .map(|p| PartJson {
                    file: p.file.clone(),
                    writer: p.writer,
                    tensors: p
                        .tensors
                        .iter()
                        .map(|t| (t.name.clone(), t.dtype.name().to_string(), t.shape.clone()))
                        .collect(),
                })
                .collect(),
        };
        let mut text = serde_json::to_string(&json).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Reads a plan's text back, checking it as [`StagedPlan::from_parts`]
    /// does.
    ///
    /// # Errors
    /// [`Error::Output`] ([`OutputError::Staging`]) saying what is wrong.
    pub fn from_json(text: &[u8]) -> Result<StagedPlan> {
        let json: PlanJson =
            serde_json::from_slice(text).map_err(|e| staging(format!("not a set plan: {e}")))?;
        if json.format != PLAN_FORMAT || json.version != 1 {
            return Err(staging(format!(
                "not a set plan of this version: {:?} version {}",
                json.format, json.version
            )));
        }
        let align = Align::from_bytes(json.align)
            .ok_or_else(|| staging(format!("alignment {} is not 8, 64 or 4096", json.align)))?;
        let mut parts = Vec::with_capacity(json.parts.len());
        for p in json.parts {
            let mut tensors = Vec::with_capacity(p.tensors.len());
            for (name, dtype, shape) in p.tensors {
                let dtype = Dtype::from_name(&dtype).ok_or_else(|| {
                    staging(format!("tensor {name:?} has an unknown dtype {dtype:?}"))
                })?;
                tensors.push(TensorSpec::new(name, dtype, shape));
            }
            parts.push(PlanPart {
                file: p.file,
                writer: p.writer,
                tensors,
            });
        }
        let plan = StagedPlan {
            prefix: json.prefix,
            align,
            metadata: json.metadata.filter(|m| !m.is_empty()),
            parts,
        };
        plan.check()?;
        Ok(plan)
    }

    /// The plan's id: 16 hex digits of a hash of its text.
    pub fn id(&self) -> String {
        let text = self.to_json();
        // Two FNV-1a passes with different offsets: 64 bits each, ample
        // to tell plans apart (the whole text is compared anyway).
        let fnv = |seed: u64| {
            text.bytes().fold(seed, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
        };
        format!(
            "{:016x}",
            fnv(0xcbf2_9ce4_8422_2325) ^ fnv(0x8422_2325).rotate_left(32)
        )
    }
}

/// An [`Error::Output`] about a staged set, naming nothing in particular
/// (the caller names the path when it has one).
fn staging(problem: String) -> Error {
    Error::Output {
        path: PathBuf::new(),
        problem: OutputError::Staging { problem },
    }
}

/// [`staging`], naming `path`.
fn staging_at(path: &Path, problem: String) -> Error {
    Error::Output {
        path: path.to_path_buf(),
        problem: OutputError::Staging { problem },
    }
}

/// The start of a file as found where a part is staged or published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartHead {
    /// Up to the bytes asked for, from offset 0.
    pub head: Vec<u8>,
    /// The file's whole length.
    pub len: u64,
}

/// Where a staged set's plan and parts are kept until the commit, and how
/// they are published: the protocol of [`StagedSet`] over a place to store
/// files. [`LocalStage`] is the local file system's (a hidden folder
/// inside the output directory); another (a bucket's) can be added without
/// changing the protocol.
pub trait SetStage {
    /// What a part's bytes are written to.
    type Sink: Write;
    /// A held lock (released when dropped).
    type Lock;

    /// Stages `plan` (its text and id): creates the staging area if it is
    /// not there and puts the plan in it, or checks the plan already
    /// staged is this one. Refuses when another plan for the same files is
    /// staged, or, when the area is new, when files with the set's names
    /// are already published.
    ///
    /// # Errors
    /// As said, or the store fails.
    fn put_plan(&self, plan: &StagedPlan) -> Result<()>;

    /// The staged plan's text, `None` when nothing is staged.
    ///
    /// # Errors
    /// The store fails.
    fn plan_text(&self) -> Result<Option<Vec<u8>>>;

    /// Locks the staged set: shared for a writer, exclusive for a commit
    /// or an abort (refused at once, not waited for, while held).
    ///
    /// # Errors
    /// Nothing is staged, or the lock is held and `exclusive`.
    fn lock(&self, exclusive: bool) -> Result<Self::Lock>;

    /// Writes the part `name` (laid out as `layout`, its bytes given by
    /// `body`) into the staging area, atomically: it replaces any part of
    /// that name, and appears only when complete.
    ///
    /// # Errors
    /// `body`'s error, or the write fails.
    fn put_part<F>(&self, name: &str, layout: Layout, sync: bool, body: F) -> Result<()>
    where
        F: FnOnce(&mut StreamWriter<Self::Sink>) -> Result<()>;

    /// The first `len` bytes (or fewer) and the length of the part `name`,
    /// staged (`published` false) or under its final name; `None` when
    /// there is no such file.
    ///
    /// # Errors
    /// The store fails.
    fn part_head(&self, name: &str, published: bool, len: usize) -> Result<Option<PartHead>>;

    /// Moves the staged part `name` to its final name (replacing a file of
    /// that name).
    ///
    /// # Errors
    /// The store fails.
    fn publish_part(&self, name: &str, sync: bool) -> Result<()>;

    /// Makes everything published so far durable (before the index).
    ///
    /// # Errors
    /// The store fails.
    fn sync_published(&self) -> Result<()>;

    /// Writes the index `bytes` under its final name `name`, atomically.
    ///
    /// # Errors
    /// The store fails.
    fn publish_index(&self, name: &str, bytes: &[u8], sync: bool) -> Result<()>;

    /// Removes the published file `name` (a part an interrupted commit
    /// published, taken back by an abort); no such file is not an error.
    ///
    /// # Errors
    /// The store fails.
    fn remove_published(&self, name: &str) -> Result<()>;

    /// Removes the staging area and all it holds.
    ///
    /// # Errors
    /// The store fails.
    fn remove_staging(&self) -> Result<()>;

    /// Where the published file `name` is, for reports.
    fn published_path(&self, name: &str) -> PathBuf;
}

/// The local file system's [`SetStage`]: parts are staged in
/// `OUTDIR/.tensorfile-set-<id>/` and renamed into `OUTDIR`.
#[derive(Debug, Clone)]
pub struct LocalStage {
    out_dir: PathBuf,
    staging: PathBuf,
    prefix: String,
}

impl LocalStage {
    /// The staging folder of `plan` in `out_dir`.
    pub fn new(out_dir: impl Into<PathBuf>, plan: &StagedPlan) -> LocalStage {
        let out_dir = out_dir.into();
        let staging = out_dir.join(format!("{STAGING_PREFIX}{}", plan.id()));
        LocalStage {
            out_dir,
            staging,
            prefix: plan.prefix().to_string(),
        }
    }

    /// The staging folder.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// The staged sets in `out_dir` for files named with `prefix`: each
    /// staging folder and its plan.
    ///
    /// # Errors
    /// `out_dir` cannot be listed, or a staged plan cannot be read.
    pub fn find(out_dir: &Path, prefix: &str) -> Result<Vec<(PathBuf, StagedPlan)>> {
        let entries = match fs::read_dir(out_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(out_dir, e)),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(out_dir, e))?;
            let name = entry.file_name();
            let is_staging = name.to_str().is_some_and(|n| n.starts_with(STAGING_PREFIX));
            if !is_staging || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let dir = entry.path();
            let Some(text) = read_plan(&dir.join(PLAN_FILE))? else {
                continue; // being made, or being removed
            };
            let plan = StagedPlan::from_json(&text).map_err(|e| at(&dir.join(PLAN_FILE), e))?;
            if plan.prefix() == prefix {
                found.push((dir, plan));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }
}

/// Names `path` in an error that names nothing yet.
fn at(path: &Path, e: Error) -> Error {
    match e {
        Error::Output { path: p, problem } if p.as_os_str().is_empty() => Error::Output {
            path: path.to_path_buf(),
            problem,
        },
        other => other,
    }
}

/// A plan file's text, `None` if it is not there. Never follows a
/// symbolic link.
fn read_plan(path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match open_nofollow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut text = Vec::new();
    file.take(MAX_PLAN_LEN + 1)
        .read_to_end(&mut text)
        .map_err(|e| Error::io(path, e))?;
    if text.len() as u64 > MAX_PLAN_LEN {
        return Err(staging_at(
            path,
            format!("longer than {MAX_PLAN_LEN} bytes: not a plan"),
        ));
    }
    Ok(Some(text))
}

/// Opens a regular file for reading, refusing a symbolic link.
fn open_nofollow(path: &Path) -> io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// A `flock` held on the staged plan.
#[derive(Debug)]
pub struct StageLock {
    _file: fs::File,
}

#[cfg(unix)]
fn flock(file: &fs::File, exclusive: bool) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let op = if exclusive {
        libc::LOCK_EX | libc::LOCK_NB
    } else {
        libc::LOCK_SH
    };
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            // No locks on this file system: the protocol's order holds.
            Some(libc::ENOLCK | libc::EOPNOTSUPP) => return Ok(true),
            _ => return Err(e),
        }
    }
}

#[cfg(not(unix))]
fn flock(_file: &fs::File, _exclusive: bool) -> io::Result<bool> {
    Ok(true)
}

impl SetStage for LocalStage {
    type Sink = FileSink;
    type Lock = StageLock;

    fn put_plan(&self, plan: &StagedPlan) -> Result<()> {
        let text = plan.to_json();
        let plan_path = self.staging.join(PLAN_FILE);
        let fresh = !self.staging.exists();
        if fresh {
            for (dir, other) in LocalStage::find(&self.out_dir, &self.prefix)? {
                if dir != self.staging {
                    return Err(staging_at(
                        &dir,
                        format!(
                            "another plan (id {}) is staged for files named {:?}: commit or abort it first",
                            other.id(),
                            self.prefix
                        ),
                    ));
                }
            }
            check_out_dir(&self.out_dir, &self.prefix)?;
            NewDirs::create(&self.out_dir)?.keep();
            match fs::create_dir(&self.staging) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(&self.staging, e)),
            }
        }
        if !fs::symlink_metadata(&self.staging).is_ok_and(|m| m.is_dir()) {
            return Err(staging_at(
                &self.staging,
                "is not a directory: not a staging folder of ours".into(),
            ));
        }
        match read_plan(&plan_path)? {
            Some(staged) if staged == text.as_bytes() => Ok(()),
            Some(_) => Err(staging_at(
                &plan_path,
                "holds another plan under this plan's id".into(),
            )),
            // Every process preparing the same plan writes the same text:
            // whichever rename lands last, the file is the same.
            None => {
                let file = AtomicFile::create(&plan_path)?;
                file.write_all_at(text.as_bytes(), 0)?;
                file.commit(true)
            }
        }
    }

    fn plan_text(&self) -> Result<Option<Vec<u8>>> {
        read_plan(&self.staging.join(PLAN_FILE))
    }

    fn lock(&self, exclusive: bool) -> Result<StageLock> {
        let path = self.staging.join(PLAN_FILE);
        let nothing = || {
            staging_at(
                &self.out_dir,
                format!(
                    "no set is staged here for files named {:?} (never planned, or already committed or aborted)",
                    self.prefix
                ),
            )
        };
        let file = match open_nofollow(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(nothing()),
            Err(e) => return Err(Error::io(&path, e)),
        };
        if !flock(&file, exclusive).map_err(|e| Error::io(&path, e))? {
            return Err(staging_at(
                &self.staging,
                "a writer is still writing a part (the staged plan is locked); wait for it or stop it first".into(),
            ));
        }
        // A commit or abort that held the lock before us may have removed
        // the folder: the file we locked must still be the plan.
        let same = match (file.metadata(), fs::symlink_metadata(&path)) {
            (Ok(a), Ok(b)) => same_file(&a, &b),
            _ => false,
        };
        if !same {
            return Err(nothing());
        }
        Ok(StageLock { _file: file })
    }

    fn put_part<F>(&self, name: &str, layout: Layout, sync: bool, body: F) -> Result<()>
    where
        F: FnOnce(&mut StreamWriter<FileSink>) -> Result<()>,
    {
        let options = WriteOptions::default().with_sync(sync);
        save_layout(self.staging.join(name), layout, &options, body)
    }

    fn part_head(&self, name: &str, published: bool, len: usize) -> Result<Option<PartHead>> {
        let dir = if published {
            &self.out_dir
        } else {
            &self.staging
        };
        let path = dir.join(name);
        let file = match open_nofollow(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let total = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        let mut head = Vec::with_capacity(len.min(total as usize));
        file.take(len as u64)
            .read_to_end(&mut head)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Some(PartHead { head, len: total }))
    }

    fn publish_part(&self, name: &str, _sync: bool) -> Result<()> {
        // Parts were synced when written; the directory is synced once,
        // before the index.
        let from = self.staging.join(name);
        fs::rename(&from, self.out_dir.join(name)).map_err(|e| Error::io(&from, e))
    }

    fn sync_published(&self) -> Result<()> {
        fs::File::open(&self.out_dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(&self.out_dir, e))
    }

    fn publish_index(&self, name: &str, bytes: &[u8], sync: bool) -> Result<()> {
        let file = AtomicFile::create(self.out_dir.join(name))?;
        file.write_all_at(bytes, 0)?;
        file.commit(sync)
    }

    fn remove_published(&self, name: &str) -> Result<()> {
        let path = self.out_dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    fn remove_staging(&self) -> Result<()> {
        // Only files are expected inside; the folder itself is never a
        // link (checked when staged), and remove_dir_all does not follow
        // links inside it.
        match fs::remove_dir_all(&self.staging) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&self.staging, e)),
        }
    }

    fn published_path(&self, name: &str) -> PathBuf {
        self.out_dir.join(name)
    }
}

#[cfg(unix)]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(not(unix))]
fn same_file(_a: &fs::Metadata, _b: &fs::Metadata) -> bool {
    true
}

/// A set being written by several processes: its plan and where it is
/// staged. The protocol and its guarantees: `docs/saves.md`, "One set,
/// many writers".
///
/// ```
/// use tensorfile_core::set::{Sharding, StagedPlan, StagedSet};
/// use tensorfile_core::{Dtype, TensorRef, TensorSpec, WriteOptions};
/// let dir = tempfile::tempdir()?;
/// let out = dir.path().join("out");
/// let specs = [TensorSpec::new("a", Dtype::U8, [4]), TensorSpec::new("b", Dtype::U8, [4])];
/// let options = WriteOptions::default().with_sync(false);
/// let plan = StagedPlan::new("model", &specs, None, &Sharding::MaxSize(4), 2, &options)?;
/// // Every process prepares the same plan; each writer writes its parts.
/// let set = StagedSet::prepare(&out, plan)?;
/// for (rank, name) in [(0, "a"), (1, "b")] {
///     let t = TensorRef { name, dtype: Dtype::U8, shape: &[4], data: &[rank as u8; 4] };
///     set.write_parts_of(rank, &[t], false)?;
/// }
/// // One process commits.
/// let summary = set.commit(false)?;
/// assert_eq!(summary.files.len(), 2);
/// assert!(out.join("model.safetensors.index.json").exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct StagedSet<S: SetStage = LocalStage> {
    plan: StagedPlan,
    stage: S,
}

impl StagedSet<LocalStage> {
    /// Stages `plan` in `out_dir` (created if needed): see
    /// [`SetStage::put_plan`]. Every process may call it with the same
    /// plan, at once.
    ///
    /// # Errors
    /// Another plan for these files is staged; `out_dir` already holds
    /// files with the set's names; the plan cannot be written.
    pub fn prepare(out_dir: impl Into<PathBuf>, plan: StagedPlan) -> Result<Self> {
        let stage = LocalStage::new(out_dir, &plan);
        StagedSet::with_stage(stage, plan)
    }

    /// The set staged in `out_dir` for files named with `prefix`.
    ///
    /// # Errors
    /// None is staged, or more than one (naming them).
    pub fn open(out_dir: impl Into<PathBuf>, prefix: &str) -> Result<Self> {
        let out_dir = out_dir.into();
        let mut found = LocalStage::find(&out_dir, prefix)?;
        match found.len() {
            1 => {
                let (_, plan) = found.remove(0);
                let stage = LocalStage::new(out_dir, &plan);
                Ok(StagedSet { plan, stage })
            }
            0 => Err(staging_at(
                &out_dir,
                format!(
                    "no set is staged here for files named {prefix:?} (never planned, or already committed or aborted)"
                ),
            )),
            n => Err(staging_at(
                &out_dir,
                format!("{n} plans are staged here for files named {prefix:?}: abort all but one"),
            )),
        }
    }
}

impl<S: SetStage> StagedSet<S> {
    /// Stages `plan` in `stage`.
    ///
    /// # Errors
    /// As [`SetStage::put_plan`].
    pub fn with_stage(stage: S, plan: StagedPlan) -> Result<Self> {
        stage.put_plan(&plan)?;
        Ok(StagedSet { plan, stage })
    }

    /// The plan.
    pub fn plan(&self) -> &StagedPlan {
        &self.plan
    }

    /// Where it is staged.
    pub fn stage(&self) -> &S {
        &self.stage
    }

    /// Writes file `k` of the plan into the staging area, its tensors'
    /// bytes streamed by `body` in file order (see [`StreamWriter`]);
    /// a part already staged under that name is replaced.
    ///
    /// # Errors
    /// Nothing is staged (committed or aborted meanwhile); `k` is not a
    /// file of the plan; `body` fails or breaks the layout; the write
    /// fails.
    pub fn write_part_streaming<F>(&self, k: usize, sync: bool, body: F) -> Result<()>
    where
        F: FnOnce(&mut StreamWriter<S::Sink>) -> Result<()>,
    {
        let layout = self.plan.layout(k)?;
        let _lock = self.stage.lock(false)?;
        self.stage
            .put_part(&self.plan.parts[k].file, layout, sync, body)
    }

    /// Writes file `k` of the plan from `tensors`, which must hold each of
    /// its tensors (with the planned dtype and shape); others are ignored.
    ///
    /// # Errors
    /// A planned tensor is missing or differs from its plan; otherwise as
    /// [`StagedSet::write_part_streaming`].
    pub fn write_part<T: TensorData>(&self, k: usize, tensors: &[T], sync: bool) -> Result<()> {
        let part = self.plan.part(k)?;
        let mut mine: Vec<&T> = Vec::with_capacity(part.tensors.len());
        for spec in &part.tensors {
            let found = tensors.iter().find(|t| t.name() == spec.name);
            let Some(t) = found else {
                return Err(staging(format!(
                    "tensor {:?} of {} is not among the tensors given",
                    spec.name, part.file
                )));
            };
            if t.dtype() != spec.dtype || t.shape() != spec.shape.as_slice() {
                return Err(staging(format!(
                    "tensor {:?} is {} {:?}, but the plan has {} {:?}",
                    spec.name,
                    t.dtype(),
                    t.shape(),
                    spec.dtype,
                    spec.shape
                )));
            }
            mine.push(t);
        }
        // Checks each tensor's byte length; the layout is the plan's,
        // which the commit checks again.
        plan_tensors(&mine, self.plan.metadata(), &self.plan.options())?;
        self.write_part_streaming(k, sync, |w| write_tensors(w, &mine))
    }

    /// Writes every file the plan gives writer `writer`, from `tensors`
    /// (as [`StagedSet::write_part`]); returns their positions.
    ///
    /// # Errors
    /// As [`StagedSet::write_part`].
    pub fn write_parts_of<T: TensorData>(
        &self,
        writer: usize,
        tensors: &[T],
        sync: bool,
    ) -> Result<Vec<usize>> {
        let parts = self.plan.parts_of(writer);
        for &k in &parts {
            self.write_part(k, tensors, sync)?;
        }
        Ok(parts)
    }

    /// Checks the parts, publishes them, writes the index and removes the
    /// staging area (`docs/saves.md`, "One set, many writers"). Run by one process,
    /// after every writer is done. Committing again after an interrupted
    /// commit finishes it.
    ///
    /// # Errors
    /// A writer still holds the lock; a part is missing, of the wrong
    /// length, or does not begin with the planned header (naming it and
    /// its writer: rerun that writer, then commit again); publishing
    /// fails. Nothing is published unless every part passes.
    pub fn commit(&self, sync: bool) -> Result<SplitSummary> {
        let _lock = self.stage.lock(true)?;
        let mut staged = Vec::with_capacity(self.plan.parts.len());
        for k in 0..self.plan.parts.len() {
            staged.push(self.check_part(k)?);
        }
        for (part, &is_staged) in self.plan.parts.iter().zip(&staged) {
            if is_staged {
                self.stage.publish_part(&part.file, sync)?;
            }
        }
        if sync {
            self.stage.sync_published()?;
        }
        let index = match self.plan.index()? {
            Some(index) => {
                let name = index_name(&self.plan.prefix);
                self.stage
                    .publish_index(&name, index.to_json().as_bytes(), sync)?;
                Some(self.stage.published_path(&name))
            }
            None => None,
        };
        self.stage.remove_staging()?;
        Ok(SplitSummary {
            files: self
                .plan
                .parts
                .iter()
                .map(|p| self.stage.published_path(&p.file))
                .collect(),
            index,
            total_size: self.plan.total_size(),
        })
    }

    /// Whether file `k` is staged (`true`) or already published by an
    /// interrupted commit (`false`), checking it either way.
    fn check_part(&self, k: usize) -> Result<bool> {
        let part = &self.plan.parts[k];
        let layout = self.plan.layout(k)?;
        let header = layout.header();
        for published in [false, true] {
            let Some(found) = self.stage.part_head(&part.file, published, header.len())? else {
                continue;
            };
            let path = match published {
                true => self.stage.published_path(&part.file),
                false => PathBuf::from(&part.file),
            };
            if found.len != layout.file_len() {
                return Err(staging_at(
                    &path,
                    format!(
                        "is {} bytes, but the plan's file is {}: rerun writer {} (it writes file {k}), then commit",
                        found.len,
                        layout.file_len(),
                        part.writer
                    ),
                ));
            }
            if found.head != header {
                return Err(staging_at(
                    &path,
                    format!(
                        "does not begin with the plan's header (other tensors or metadata): rerun writer {} (it writes file {k}), then commit",
                        part.writer
                    ),
                ));
            }
            return Ok(!published);
        }
        Err(staging_at(
            Path::new(&part.file),
            format!(
                "has not been written: run writer {} (it writes file {k}), then commit",
                part.writer
            ),
        ))
    }

    /// Removes the staging area and everything staged. A commit that was
    /// interrupted after publishing some parts but before the index is
    /// taken back too: those parts (found under their final names with
    /// the plan's length and header) are removed, so that the output is
    /// left as it was before the plan. Once the index is published the set
    /// is complete and stays; only the staging area goes.
    ///
    /// # Errors
    /// A writer still holds the lock, or the removal fails.
    pub fn abort(&self) -> Result<()> {
        let lock = self.stage.lock(true)?;
        if self.plan.index()?.is_some() {
            let name = index_name(&self.plan.prefix);
            if self.stage.part_head(&name, true, 0)?.is_none() {
                for k in 0..self.plan.parts.len() {
                    if self.published_by_plan(k)? {
                        self.stage.remove_published(&self.plan.parts[k].file)?;
                    }
                }
            }
        }
        self.stage.remove_staging()?;
        drop(lock);
        Ok(())
    }

    /// Whether file `k` is under its final name with the plan's length
    /// and header: published by a commit of this plan (a file of that
    /// name that was there before is refused when the plan is staged).
    fn published_by_plan(&self, k: usize) -> Result<bool> {
        let part = &self.plan.parts[k];
        let layout = self.plan.layout(k)?;
        let header = layout.header();
        Ok(self
            .stage
            .part_head(&part.file, true, header.len())?
            .is_some_and(|found| found.len == layout.file_len() && found.head == header))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::set::ShardedTensors;
    use crate::TensorRef;
    use std::ffi::{OsStr, OsString};

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// Four tensors of 16 bytes, `t0`..`t3`, each filled with its number.
    fn tensors() -> (Vec<TensorSpec>, Vec<Vec<u8>>) {
        let specs = (0..4)
            .map(|i| TensorSpec::new(format!("t{i}"), Dtype::F32, [4]))
            .collect();
        let data = (0..4).map(|i| vec![i as u8; 16]).collect();
        (specs, data)
    }

    fn refs<'a>(specs: &'a [TensorSpec], data: &'a [Vec<u8>]) -> Vec<TensorRef<'a>> {
        specs
            .iter()
            .zip(data)
            .map(|(s, d)| TensorRef {
                name: &s.name,
                dtype: s.dtype,
                shape: &s.shape,
                data: d,
            })
            .collect()
    }

    fn plan(specs: &[TensorSpec], writers: usize) -> StagedPlan {
        let mut meta = Metadata::new();
        meta.insert("format".into(), "pt".into());
        StagedPlan::new(
            "model",
            specs,
            Some(&meta),
            &Sharding::MaxSize(32),
            writers,
            &WriteOptions::default(),
        )
        .unwrap()
    }

    fn problem(e: Error) -> String {
        match e {
            Error::Output {
                problem: OutputError::Staging { problem },
                ..
            } => problem,
            other => panic!("expected a staging error, got {other:?}"),
        }
    }

    #[test]
    fn plans_round_trip_and_agree() {
        let (specs, _) = tensors();
        let p = plan(&specs, 2);
        assert_eq!(p.parts().len(), 2);
        assert_eq!(p.parts_of(0), [0]);
        assert_eq!(p.parts_of(1), [1]);
        assert_eq!(p.parts()[1].file, "model-00002-of-00002.safetensors");
        let back = StagedPlan::from_json(p.to_json().as_bytes()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.id(), p.id());
        assert_ne!(plan(&specs[..3], 2).id(), p.id());
        assert_eq!(p.total_size(), 64);
        let index = p.index().unwrap().unwrap();
        assert_eq!(index.total_size().unwrap(), Some(64));
        assert_eq!(index.weight_map["t3"], "model-00002-of-00002.safetensors");
        // Each writer's own tensors, split by size: files numbered by writer.
        let per = StagedPlan::per_writer(
            "model",
            &[specs[..3].to_vec(), vec![], specs[3..].to_vec()],
            32,
            None,
            &WriteOptions::default(),
        )
        .unwrap();
        let writers: Vec<usize> = per.parts().iter().map(|p| p.writer).collect();
        assert_eq!(writers, [0, 0, 2]);
        // Hostile plan files are refused, not trusted.
        for bad in [
            &b"{"[..],
            b"[]",
            br#"{"format":"tensorfile-set-plan","version":1,"prefix":"../x","align":8,"metadata":null,"parts":[{"file":"../x.safetensors","writer":0,"tensors":[]}]}"#,
            br#"{"format":"tensorfile-set-plan","version":1,"prefix":"m","align":8,"metadata":null,"parts":[{"file":"m.safetensors","writer":0,"tensors":[["a","F32",[18446744073709551615,4]]]}]}"#,
            br#"{"format":"tensorfile-set-plan","version":1,"prefix":"m","align":8,"metadata":null,"parts":[{"file":"/etc/passwd","writer":0,"tensors":[]}]}"#,
            br#"{"format":"tensorfile-set-plan","version":1,"prefix":"m","align":8,"metadata":null,"parts":[]}"#,
            br#"{"format":"tensorfile-set-plan","version":1,"prefix":"m","align":8,"metadata":null,"parts":[{"file":"m-00001-of-00002.safetensors","writer":0,"tensors":[["a","U8",[1]]]},{"file":"m-00002-of-00002.safetensors","writer":0,"tensors":[["a","U8",[1]]]}]}"#,
        ] {
            assert!(StagedPlan::from_json(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn nothing_is_visible_until_the_commit_and_then_the_whole_set() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let (specs, data) = tensors();
        let p = plan(&specs, 2);
        let id = p.id();
        let set = StagedSet::prepare(&out, p.clone()).unwrap();
        // A second process preparing the same plan joins it.
        let again = StagedSet::prepare(&out, p.clone()).unwrap();
        let all = refs(&specs, &data);
        assert_eq!(set.write_parts_of(0, &all, false).unwrap(), [0]);
        // The commit refuses while a part is missing, naming its writer,
        // and publishes nothing.
        let err = problem(set.commit(false).unwrap_err());
        assert!(err.contains("run writer 1"), "{err}");
        assert_eq!(entries(&out), [format!("{STAGING_PREFIX}{id}")]);
        again.write_parts_of(1, &all[2..], false).unwrap();
        assert_eq!(entries(&out), [format!("{STAGING_PREFIX}{id}")]);
        let opened = StagedSet::open(&out, "model").unwrap();
        assert_eq!(opened.plan(), &p);
        let summary = opened.commit(false).unwrap();
        assert_eq!(summary.total_size, 64);
        assert_eq!(
            entries(&out),
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json"
            ]
        );
        let read = ShardedTensors::open(&out).unwrap();
        for (s, d) in specs.iter().zip(&data) {
            assert_eq!(read.tensor(&s.name).unwrap().data(), d.as_slice());
        }
        assert_eq!(read.metadata().unwrap()["format"], "pt");
        // Done: nothing is staged any more.
        assert!(problem(set.commit(false).unwrap_err()).contains("no set is staged"));
        assert!(StagedSet::open(&out, "model").is_err());
        // A new plan over a finished set is refused.
        assert!(StagedSet::prepare(&out, p).is_err());
    }

    #[test]
    fn a_bad_part_is_refused_and_a_rerun_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let (specs, data) = tensors();
        let set = StagedSet::prepare(dir.path(), plan(&specs, 2)).unwrap();
        let all = refs(&specs, &data);
        set.write_parts_of(0, &all, false).unwrap();
        // Another file under part 2's name: other tensors, then cut short.
        let part = set.stage().staging().join(&set.plan().parts()[1].file);
        crate::save(&part, &all[..1], None, &WriteOptions::default()).unwrap();
        assert!(problem(set.commit(false).unwrap_err()).contains("bytes, but the plan"));
        let mut good = crate::serialize(all[2..].to_vec(), set.plan().metadata()).unwrap();
        good[20] ^= 1;
        fs::write(&part, &good).unwrap();
        let err = problem(set.commit(false).unwrap_err());
        assert!(err.contains("header") && err.contains("writer 1"), "{err}");
        // Tensors that differ from the plan are refused before writing.
        let wrong = TensorRef {
            shape: &[2, 2],
            ..all[2]
        };
        let err = set.write_part(1, &[wrong, all[3]], false).unwrap_err();
        assert!(problem(err).contains("the plan has F32 [4]"));
        set.write_part(1, &all, false).unwrap();
        set.commit(false).unwrap();
        assert_eq!(ShardedTensors::open(dir.path()).unwrap().len(), 4);
    }

    #[test]
    fn a_set_of_one_file_has_no_index() {
        let dir = tempfile::tempdir().unwrap();
        let (specs, data) = tensors();
        let one = StagedPlan::new(
            "model",
            &specs,
            None,
            &Sharding::MaxSize(1 << 20),
            3,
            &WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(one.parts().len(), 1);
        assert_eq!(one.index().unwrap(), None);
        let set = StagedSet::prepare(dir.path(), one).unwrap();
        // Writers with nothing to write write nothing.
        assert!(set
            .write_parts_of(2, &refs(&specs, &data), false)
            .unwrap()
            .is_empty());
        set.write_parts_of(0, &refs(&specs, &data), false).unwrap();
        let summary = set.commit(false).unwrap();
        assert_eq!(summary.index, None);
        assert_eq!(entries(dir.path()), ["model.safetensors"]);
    }

    #[test]
    fn an_interrupted_commit_is_finished_by_another() {
        let dir = tempfile::tempdir().unwrap();
        let (specs, data) = tensors();
        let set = StagedSet::prepare(dir.path(), plan(&specs, 1)).unwrap();
        set.write_parts_of(0, &refs(&specs, &data), true).unwrap();
        // The first commit died after publishing the first part.
        let first = &set.plan().parts()[0].file;
        set.stage().publish_part(first, false).unwrap();
        assert!(!dir.path().join("model.safetensors.index.json").exists());
        set.commit(true).unwrap();
        assert_eq!(ShardedTensors::open(dir.path()).unwrap().len(), 4);
    }

    #[test]
    fn an_abort_takes_back_an_interrupted_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (specs, data) = tensors();
        // A file of the outdir that is not the plan's stays.
        fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
        let set = StagedSet::prepare(dir.path(), plan(&specs, 1)).unwrap();
        set.write_parts_of(0, &refs(&specs, &data), true).unwrap();
        let first = &set.plan().parts()[0].file;
        set.stage().publish_part(first, false).unwrap();
        assert!(dir.path().join(first).exists());
        set.abort().unwrap();
        assert_eq!(entries(dir.path()), ["notes.txt"]);
        // Once the index is published the set is complete: an abort then
        // removes only what is left of the staging folder.
        let set = StagedSet::prepare(dir.path(), plan(&specs, 1)).unwrap();
        set.write_parts_of(0, &refs(&specs, &data), true).unwrap();
        for part in set.plan().parts() {
            set.stage().publish_part(&part.file, false).unwrap();
        }
        let index = set.plan().index().unwrap().unwrap();
        set.stage()
            .publish_index(
                "model.safetensors.index.json",
                index.to_json().as_bytes(),
                false,
            )
            .unwrap();
        set.abort().unwrap();
        assert_eq!(ShardedTensors::open(dir.path()).unwrap().len(), 4);
        assert!(!entries(dir.path())
            .iter()
            .any(|n| n.starts_with(STAGING_PREFIX)));
    }

    #[test]
    fn abort_removes_the_staging_and_other_plans_wait_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let (specs, data) = tensors();
        let set = StagedSet::prepare(dir.path(), plan(&specs, 2)).unwrap();
        set.write_parts_of(0, &refs(&specs, &data), false).unwrap();
        let other = plan(&specs[..2], 1);
        let err = StagedSet::prepare(dir.path(), other.clone()).unwrap_err();
        assert!(problem(err).contains("another plan"));
        // Another prefix is another set.
        let mine = StagedPlan::new(
            "other",
            &specs,
            None,
            &Sharding::MaxSize(1 << 20),
            1,
            &WriteOptions::default(),
        )
        .unwrap();
        StagedSet::prepare(dir.path(), mine)
            .unwrap()
            .abort()
            .unwrap();
        // A writer at work (holding the lock shared) stops an abort.
        let held = set.stage().lock(false).unwrap();
        assert!(problem(set.abort().unwrap_err()).contains("still writing"));
        drop(held);
        set.abort().unwrap();
        assert_eq!(entries(dir.path()), Vec::<String>::new());
        let err = set
            .write_parts_of(1, &refs(&specs, &data), false)
            .unwrap_err();
        assert!(problem(err).contains("no set is staged"));
        StagedSet::prepare(dir.path(), other).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_writer_sweeps_only_this_hosts_dead_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let (specs, data) = tensors();
        let set = StagedSet::prepare(dir.path(), plan(&specs, 2)).unwrap();
        let staging = set.stage().staging().to_path_buf();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let ours = crate::atomic::temp_name(OsStr::new(&set.plan().parts()[1].file));
        let ours = ours.to_str().unwrap();
        let stale = ours.replace(&format!("-{me}-"), &format!("-{dead}-"));
        // The same dead PID on another host: its writer may be alive there.
        let at = stale.len() - ".tmp".len() - 7 - 8;
        let tag = u32::from_str_radix(&stale[at..at + 8], 16).unwrap();
        let elsewhere = format!("{}{:08x}{}", &stale[..at], tag ^ 1, &stale[at + 8..]);
        for name in [&stale, &elsewhere] {
            fs::write(staging.join(name), b"x").unwrap();
        }
        set.write_parts_of(0, &refs(&specs, &data), false).unwrap();
        let left: Vec<OsString> = fs::read_dir(&staging)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.contains(&OsString::from(&elsewhere)), "{left:?}");
        assert!(!left.contains(&OsString::from(&stale)), "{left:?}");
    }
}
