//! Read plans: many tensors, or slices of them, read at once with parallel
//! positional reads under a memory budget, into memory the library
//! allocates or memory the caller provides.
//!
//! A [`ReadPlan`] names the tensors wanted ([`Want`]: a whole tensor or a
//! slice in the [`SliceArg`] language of [`SafeTensors::slice`]), or every
//! tensor whole ([`ReadPlan::all`]), for one file
//! ([`SafeTensors::read_plan`]) or a whole set
//! ([`ShardedTensors::read_plan`]), local or remote. It is resolved against
//! the headers alone into byte ranges per file: a slice becomes the runs of
//! bytes it covers, runs closer than the gap threshold are merged (reading
//! the gap costs less than another request), and what is merged is split
//! into chunks. The chunks are read on the library's pool
//! ([`crate::parallel`]), file by file and in offset order within a file,
//! with at most [`ReadPlan::with_threads`] reads at once and at most
//! [`ReadPlan::with_budget`] bytes read but not yet handed over.
//!
//! Each tensor is handed over as a [`TensorBytes`] (its bytes in 64-byte
//! aligned memory, C order, as [`crate::TensorView::slice`] gives them) as
//! soon as it and every tensor before it in **read order** are complete:
//! file by file (a set's shards in name order), each file's tensors in
//! offset order, whatever the order of the plan. A plan larger than memory
//! therefore streams: the budget bounds what is held.
//!
//! Two forms hand them over, on one engine: a callback
//! ([`SafeTensors::read_plan`], returning once all is read) or an iterator
//! ([`SafeTensors::read_plan_iter`], a [`ReadPlanIter`]) that reads ahead
//! in the background while the caller works on what it was handed. The
//! budget counts every byte read and not yet handed over: in the callback
//! form until the callback is called, in the iterator form until `next`
//! returns the tensor (complete tensors the caller has not taken count).
//! A tensor over the budget is read alone. Dropping the iterator stops the
//! reads; it returns once those in flight (a chunk per thread at most) are
//! done.
//!
//! [`SafeTensors::read_into`] and [`ShardedTensors::read_into`] read one
//! tensor or slice into the caller's buffer instead, split across the pool.
//! A set's [`ShardedTensors::load`] and [`ShardedTensors::load_each`] read
//! on the same engine, results in the order asked.
//!
//! ```
//! # fn main() -> tensorfile_core::Result<()> {
//! use tensorfile_core::read::ReadPlan;
//! use tensorfile_core::set::Want;
//! use tensorfile_core::{serialize, Dtype, SafeTensors, SliceArg, TensorRef};
//! let data: Vec<u8> = (0..64u8).collect();
//! let bytes = serialize([TensorRef { name: "w", dtype: Dtype::U8, shape: &[8, 8], data: &data }], None)?;
//! let file = SafeTensors::from_source(bytes, &Default::default())?;
//! // The first half of the rows.
//! let plan = ReadPlan::of([Want::slice("w", vec![SliceArg::range(0, 4)])]);
//! let mut got = Vec::new();
//! let stats = file.read_plan(&plan, |t| {
//!     got.push((t.name.clone(), t.shape.clone(), t.data.to_vec()));
//!     Ok(())
//! })?;
//! assert_eq!(got, [("w".to_string(), vec![4, 8], data[..32].to_vec())]);
//! assert_eq!(stats.bytes_read, 32);
//! // Into the caller's memory.
//! let mut out = [0u8; 8];
//! file.read_into("w", Some(&[SliceArg::Index(2)]), &mut out)?;
//! assert_eq!(out, data[16..24]);
//! // As an iterator, which shares the file while it reads ahead.
//! let file = std::sync::Arc::new(file);
//! for t in file.clone().read_plan_iter(&ReadPlan::all().with_budget(1 << 20))? {
//!     let t = t?;
//!     assert_eq!((t.name.as_str(), t.data.len()), ("w", 64));
//! }
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::io;
use std::ops::{Deref, DerefMut, Range};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::{Error, Result};
use crate::file::SafeTensors;
use crate::header::Header;
use crate::set::{Loaded, ShardedTensors, Want};
use crate::slice::{SliceArg, TensorSlice};
use crate::source::ByteSource;
use crate::Dtype;

/// Runs of a local file closer than this are read together: below 64 KiB
/// a second `pread` (a system call and, cold, another disk request) costs
/// more than reading the bytes between.
pub const DEFAULT_GAP_LOCAL: u64 = 64 << 10;

/// Runs of a remote file closer than this are read together: a request
/// costs a round trip (milliseconds), in which a network moves about a
/// megabyte.
pub const DEFAULT_GAP_REMOTE: u64 = 1 << 20;

/// The largest single read: 8 MiB keeps every thread busy on a large
/// tensor (a 1 GiB tensor is 128 reads) while a read stays long enough
/// that its system call costs nothing next to the copy.
pub const DEFAULT_CHUNK: u64 = 8 << 20;

/// The default budget of bytes read but not yet handed over: room for many
/// chunks on every thread, small next to the models it streams.
pub const DEFAULT_BUDGET: u64 = 512 << 20;

/// [`SafeTensors::read_into`] splits its read into pieces of at least this
/// many bytes: below it, handing a piece to another thread costs more than
/// it saves.
const MIN_PIECE: u64 = 1 << 20;

/// Allocations from this size on are mapped and backed by transparent huge
/// pages (2 MiB on x86-64 and most arm64 kernels).
const HUGE_FROM: usize = 2 << 20;

/// What to read, and how: the tensors (or slices) wanted, or every tensor
/// whole, and the tuning of the reads. Built by the caller, resolved
/// against a file's or a set's headers when it is read.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    /// `None`: every tensor whole.
    wants: Option<Vec<Want>>,
    gap: Option<u64>,
    chunk: u64,
    budget: u64,
    threads: usize,
}

impl Default for ReadPlan {
    fn default() -> ReadPlan {
        ReadPlan::all()
    }
}

impl ReadPlan {
    /// Every tensor, whole ("no plan").
    pub fn all() -> ReadPlan {
        ReadPlan {
            wants: None,
            gap: None,
            chunk: DEFAULT_CHUNK,
            budget: DEFAULT_BUDGET,
            threads: 0,
        }
    }

    /// These tensors or slices. A tensor may be named more than once (two
    /// slices of it); each is handed over on its own.
    pub fn of(wants: impl IntoIterator<Item = Want>) -> ReadPlan {
        ReadPlan {
            wants: Some(wants.into_iter().collect()),
            ..ReadPlan::all()
        }
    }

    /// The tensors or slices wanted; `None` for every tensor whole.
    pub fn wants(&self) -> Option<&[Want]> {
        self.wants.as_deref()
    }

    /// Runs of one tensor at most `gap` bytes apart are read together
    /// (default: [`DEFAULT_GAP_LOCAL`], or [`DEFAULT_GAP_REMOTE`] for a
    /// file at a URL).
    #[must_use]
    pub fn with_gap(mut self, gap: u64) -> ReadPlan {
        self.gap = Some(gap);
        self
    }

    /// No read is longer than `chunk` bytes (default [`DEFAULT_CHUNK`];
    /// 0 counts as 1).
    #[must_use]
    pub fn with_chunk(mut self, chunk: u64) -> ReadPlan {
        self.chunk = chunk.max(1);
        self
    }

    /// At most `budget` bytes read but not yet handed over (default
    /// [`DEFAULT_BUDGET`]). A tensor that needs more than the budget is
    /// read alone, once everything before it is handed over, in chunks on
    /// every thread: its own buffer then exceeds the budget, by design
    /// (it is handed over whole).
    #[must_use]
    pub fn with_budget(mut self, budget: u64) -> ReadPlan {
        self.budget = budget;
        self
    }

    /// At most `threads` reads at once (default 0: as many as the library's
    /// pool has threads, see [`crate::parallel`]; more than the pool has
    /// queue on it).
    #[must_use]
    pub fn with_threads(mut self, threads: usize) -> ReadPlan {
        self.threads = threads;
        self
    }
}

/// Zero-initialised memory aligned to 64 bytes (a cache line, and what
/// every SIMD load wants). From 2 MiB on it is mapped anonymous memory,
/// advised to use transparent huge pages (`madvise(MADV_HUGEPAGE)` on
/// Linux) where the kernel's THP defrag setting (`defer` or `never`) lets
/// a page fault take one without waiting for memory to be compacted:
/// fewer page faults when it is first written. The advice is only advice:
/// where it is not given or refused, the memory uses ordinary pages.
pub struct AlignedBuffer {
    memory: Memory,
}

enum Memory {
    Small(Vec<Line>, usize),
    Large(memmap2::MmapMut),
}

/// One cache line: the unit small buffers are allocated in, so that they
/// start on a 64-byte boundary.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

// SAFETY: `Line` is 64 bytes of `u8` with alignment 64 and no padding
// (size 64): any bit pattern is valid, and all zeros is a value.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; `Line` is `Copy` and `repr(C)`.
unsafe impl bytemuck::Pod for Line {}

impl std::fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuffer")
            .field("len", &self.len())
            .finish()
    }
}

impl AlignedBuffer {
    /// `len` zero bytes, 64-byte aligned.
    ///
    /// # Errors
    /// `OutOfMemory` when the memory cannot be had (never an abort).
    pub fn new(len: usize) -> io::Result<AlignedBuffer> {
        if len >= HUGE_FROM {
            return Ok(AlignedBuffer {
                memory: Memory::Large(crate::source::huge_page_memory(len)?),
            });
        }
        let mut lines = Vec::new();
        lines.try_reserve_exact(len.div_ceil(64)).map_err(|_| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("cannot allocate {len} bytes"),
            )
        })?;
        lines.resize(len.div_ceil(64), Line([0; 64]));
        Ok(AlignedBuffer {
            memory: Memory::Small(lines, len),
        })
    }
}

impl Deref for AlignedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.memory {
            Memory::Small(lines, len) => &bytemuck::cast_slice(lines)[..*len],
            Memory::Large(map) => map,
        }
    }
}

impl DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.memory {
            Memory::Small(lines, len) => &mut bytemuck::cast_slice_mut(lines)[..*len],
            Memory::Large(map) => map,
        }
    }
}

/// A tensor (or slice) read by a plan: its bytes in C order, as the file
/// stores them, in memory of its own.
#[derive(Debug)]
pub struct TensorBytes {
    /// The tensor's name.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// The shape of what was read (the slice's, for a slice).
    pub shape: Vec<u64>,
    /// The bytes.
    pub data: AlignedBuffer,
}

/// What a plan's reads did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadStats {
    /// Tensors (or slices) handed over.
    pub tensors: u64,
    /// Reads made (one per chunk).
    pub reads: u64,
    /// Bytes read from the sources, gaps merged into reads included.
    pub bytes_read: u64,
    /// The most bytes read but not yet handed over at any time.
    pub peak_held: u64,
}

/// A file of a plan: its header, its bytes, and the name errors give it.
struct FileRef<'a> {
    header: &'a Header,
    source: &'a dyn ByteSource,
    path: Option<&'a Path>,
}

impl FileRef<'_> {
    fn error(&self, e: impl Into<Error>) -> Error {
        let e = e.into();
        match self.path {
            Some(p) => e.at(p),
            None => e,
        }
    }

    /// Whether the file is at a URL: a request costs a round trip, so runs
    /// further apart are merged, and reads of consecutive bytes go to its
    /// source together, which runs its requests at once.
    fn is_remote(&self) -> bool {
        self.path.and_then(crate::kind::url_of).is_some()
    }

    fn default_gap(&self) -> u64 {
        match self.is_remote() {
            true => DEFAULT_GAP_REMOTE,
            false => DEFAULT_GAP_LOCAL,
        }
    }
}

/// Bytes read together: `offset..offset + len` of a file, of which
/// `pieces` go to the result.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Span {
    offset: u64,
    len: u64,
    pieces: Vec<Piece>,
}

/// `len` bytes at `at` in a span go to `dest` in the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    at: u64,
    dest: u64,
    len: u64,
}

/// Merges runs of bytes (absolute offsets, ascending, each landing right
/// after the previous one in the result) into spans: a run at most `gap`
/// bytes past the end of the span before joins it. Empty runs are dropped.
fn coalesce(runs: impl IntoIterator<Item = Range<u64>>, gap: u64) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut dest = 0u64;
    for run in runs {
        let len = run.end - run.start;
        if len == 0 {
            continue;
        }
        match spans.last_mut() {
            Some(span)
                if run.start >= span.offset + span.len
                    && run.start - (span.offset + span.len) <= gap =>
            {
                let at = run.start - span.offset;
                match span.pieces.last_mut() {
                    // Adjacent in the file and in the result: one piece.
                    Some(p) if p.at + p.len == at && p.dest + p.len == dest => p.len += len,
                    _ => span.pieces.push(Piece { at, dest, len }),
                }
                span.len = run.end - span.offset;
            }
            _ => spans.push(Span {
                offset: run.start,
                len,
                pieces: vec![Piece { at: 0, dest, len }],
            }),
        }
        dest += len;
    }
    spans
}

/// `0..len` cut into consecutive ranges of at most `chunk` bytes.
fn chunks(len: u64, chunk: u64) -> impl Iterator<Item = Range<u64>> {
    let chunk = chunk.max(1);
    (0..len.div_ceil(chunk)).map(move |i| i * chunk..((i + 1) * chunk).min(len))
}

/// One tensor (or slice) of a plan, resolved against its file's header.
struct Resolved {
    file: usize,
    /// The first byte read (where its bytes start, when none are read):
    /// what read order sorts by.
    first: u64,
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    nbytes: u64,
    spans: Vec<Span>,
}

impl Resolved {
    /// Bytes read for it, gaps included: what it costs of the budget.
    fn cost(&self) -> u64 {
        self.spans.iter().map(|s| s.len).sum()
    }
}

/// `[a:b, ::2, 3]`: slice arguments as NumPy writes them, for errors.
fn slice_text(args: &[SliceArg]) -> String {
    let bound = |b: Option<i64>| b.map(|b| b.to_string()).unwrap_or_default();
    let parts: Vec<String> = args
        .iter()
        .map(|a| match *a {
            SliceArg::Index(i) => i.to_string(),
            SliceArg::Range { start, stop, step } => {
                let mut s = format!("{}:{}", bound(start), bound(stop));
                if step != 1 {
                    s.push_str(&format!(":{step}"));
                }
                s
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// Resolves one want against file `index` of `files` (which holds it).
fn resolve_in(
    files: &[FileRef<'_>],
    index: usize,
    want: &Want,
    gap: Option<u64>,
) -> Result<Resolved> {
    let file = &files[index];
    let info = file
        .header
        .get(&want.name)
        .ok_or_else(|| file.error(Error::NotFound(want.name.clone())))?;
    let start = file.header.data_start() + info.data_offsets.0;
    let gap = gap.unwrap_or_else(|| file.default_gap());
    let first = |spans: &[Span]| spans.first().map_or(start, |s| s.offset);
    let (shape, nbytes, spans) = match &want.slice {
        None => (
            info.shape.to_vec(),
            info.nbytes(),
            coalesce(std::iter::once(start..start + info.nbytes()), gap),
        ),
        Some(args) => {
            let slice = TensorSlice::new(info, args).map_err(|e| {
                let e = match e {
                    Error::Slice { tensor, problem } => Error::Slice {
                        tensor,
                        problem: format!("slice {}: {problem}", slice_text(args)),
                    },
                    other => other,
                };
                file.error(e)
            })?;
            let runs = slice
                .merged_byte_ranges()
                .map(|r| start + r.start..start + r.end);
            (slice.shape().to_vec(), slice.nbytes(), coalesce(runs, gap))
        }
    };
    Ok(Resolved {
        file: index,
        first: first(&spans),
        name: want.name.clone(),
        dtype: info.dtype,
        shape,
        nbytes,
        spans,
    })
}

/// Every tensor of `files` whole, or the plan's wants (found by `locate`),
/// in read order: file by file, offset order within each.
fn resolve_plan(
    files: &[FileRef<'_>],
    plan: &ReadPlan,
    locate: impl Fn(&str) -> Result<usize>,
) -> Result<Vec<Resolved>> {
    let mut resolved = Vec::new();
    match &plan.wants {
        None => {
            for (i, file) in files.iter().enumerate() {
                for info in file.header.tensors() {
                    resolved.push(resolve_in(files, i, &Want::tensor(info.name), plan.gap)?);
                }
            }
        }
        Some(wants) => {
            for want in wants {
                let i = locate(&want.name)?;
                resolved.push(resolve_in(files, i, want, plan.gap)?);
            }
        }
    }
    // Stable: two slices of one tensor keep the plan's order.
    resolved.sort_by_key(|r| (r.file, r.first));
    Ok(resolved)
}

/// Where a tensor's bytes land: `len` bytes at `ptr`.
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: an `Out` points into a buffer that `run` keeps alive, unmoved
// and otherwise untouched until every read into it has reported back, and
// the reads write disjoint ranges of it (the chunks of disjoint pieces).
unsafe impl Send for Out {}

/// One read: `len` bytes of a file at `offset`, scattered into a tensor's
/// buffer by `pieces` (relative to the read's start).
struct Job {
    tensor: usize,
    file: usize,
    offset: u64,
    len: u64,
    pieces: Vec<Piece>,
}

impl Job {
    /// The reads of a tensor: each span cut into chunks, each chunk with
    /// the parts of the span's pieces it holds.
    fn of(tensor: usize, r: &Resolved, chunk: u64) -> VecDeque<Job> {
        let mut jobs = VecDeque::new();
        for span in &r.spans {
            for c in chunks(span.len, chunk) {
                let pieces = span
                    .pieces
                    .iter()
                    .filter_map(|p| {
                        let (s, e) = (p.at.max(c.start), (p.at + p.len).min(c.end));
                        (s < e).then(|| Piece {
                            at: s - c.start,
                            dest: p.dest + (s - p.at),
                            len: e - s,
                        })
                    })
                    .collect();
                jobs.push_back(Job {
                    tensor,
                    file: r.file,
                    offset: span.offset + c.start,
                    len: c.end - c.start,
                    pieces,
                });
            }
        }
        jobs
    }

    /// Whether every piece of this read lands inside `out`.
    fn fits(&self, out: Out) -> bool {
        self.pieces.iter().all(|p| {
            p.at + p.len <= self.len
                && p.dest
                    .checked_add(p.len)
                    .is_some_and(|e| e <= out.len as u64)
        })
    }

    /// Whether the read is one piece, landing straight in place.
    fn is_direct(&self) -> bool {
        matches!(self.pieces.as_slice(), [p] if p.at == 0 && p.len == self.len)
    }
}

/// Reads `jobs`, all of one file, in one call to its source (so that a
/// source where requests are expensive runs them at once): each straight
/// into place when it is one piece, else through a buffer of its own
/// whose pieces are then copied into place.
fn read_jobs(jobs: &[(Job, Out)], source: &dyn ByteSource) -> io::Result<()> {
    if !jobs.iter().all(|(job, out)| job.fits(*out)) {
        return Err(io::Error::other(
            "a read plan's piece lies outside its buffer (a bug)",
        ));
    }
    /// Where piece `p` lands in `out`.
    ///
    /// # Safety
    /// The range is inside `out`, which is alive and written by no one
    /// else while the slice lives.
    unsafe fn place<'a>(out: Out, p: &Piece) -> &'a mut [u8] {
        // SAFETY: as the caller promises.
        unsafe { std::slice::from_raw_parts_mut(out.ptr.add(p.dest as usize), p.len as usize) }
    }
    // SAFETY (both calls of `place` below): every range is inside its
    // `out` (checked just now), which is alive and written by no one else
    // (see `Out`); the jobs of one tensor write disjoint ranges of it.
    let mut staging: Vec<Vec<u8>> = jobs
        .iter()
        .map(|(job, _)| match job.is_direct() {
            true => Vec::new(),
            false => vec![0u8; job.len as usize],
        })
        .collect();
    let mut requests: Vec<(u64, &mut [u8])> = jobs
        .iter()
        .zip(staging.iter_mut())
        .map(|((job, out), stage)| match job.is_direct() {
            true => (job.offset, unsafe { place(*out, &job.pieces[0]) }),
            false => (job.offset, &mut stage[..]),
        })
        .collect();
    source.read_ranges(&mut requests)?;
    drop(requests);
    for ((job, out), stage) in jobs.iter().zip(&staging) {
        if job.is_direct() {
            continue;
        }
        for p in &job.pieces {
            let dest = unsafe { place(*out, p) };
            dest.copy_from_slice(&stage[p.at as usize..(p.at + p.len) as usize]);
        }
    }
    Ok(())
}

/// A tensor admitted under the budget: its buffer (when the library
/// allocated it), where its bytes land, and its reads.
struct Slot<B> {
    buffer: Option<B>,
    out: Out,
    /// Reads not yet started.
    jobs: VecDeque<Job>,
    /// Reads not yet finished (started or not).
    pending: usize,
    cost: u64,
}

/// What gives an admitted tensor its memory: a buffer of its own (kept
/// until it is handed over) and where its bytes land, or the caller's.
type Dest<'a, B> = dyn FnMut(&Resolved) -> Result<(Option<B>, Out)> + 'a;

/// How a plan's reads stand: what is admitted under the budget, read,
/// started, failed. Shared, under [`Reads`]'s lock, by the thread that
/// hands tensors over and the readers on the pool.
struct State<B> {
    /// The plan's tensors in hand-over order, each taken when handed over.
    tensors: Vec<Option<Resolved>>,
    /// Per file: whether its reads go to its source together (see
    /// [`FileRef::is_remote`]).
    together: Vec<bool>,
    chunk: u64,
    threads: usize,
    budget: u64,
    /// The next tensor to admit.
    next: usize,
    /// The tensors admitted and not yet handed over, in order (the last
    /// is `next - 1`).
    admitted: VecDeque<Slot<B>>,
    /// How many slots at the front of `admitted` have no read left to
    /// start (a cursor, so that taking a read does not scan them).
    started: usize,
    /// Reads admitted and not yet started.
    unstarted: usize,
    /// Bytes admitted and not yet handed over.
    held: u64,
    /// Readers started and not yet finished.
    readers: usize,
    /// Readers take no more reads: the plan failed or its consumer left.
    stop: bool,
    /// The first failure, for the consumer.
    failed: Option<Error>,
    /// Nothing more is handed over.
    finished: bool,
    stats: ReadStats,
}

impl<B> State<B> {
    /// Nothing admitted yet.
    fn new(together: Vec<bool>, tensors: Vec<Resolved>, plan: &ReadPlan) -> State<B> {
        State {
            tensors: tensors.into_iter().map(Some).collect(),
            together,
            chunk: plan.chunk,
            threads: match plan.threads {
                0 => crate::parallel::threads(),
                n => n,
            },
            budget: plan.budget,
            next: 0,
            admitted: VecDeque::new(),
            started: 0,
            unstarted: 0,
            held: 0,
            readers: 0,
            stop: false,
            failed: None,
            finished: false,
            stats: ReadStats::default(),
        }
    }

    /// Admits tensors in order while the budget allows (one alone when it
    /// is over the budget), `dest` giving each its memory.
    fn admit(&mut self, dest: &mut Dest<'_, B>) -> Result<()> {
        while let Some(Some(r)) = self.tensors.get(self.next) {
            let cost = r.cost();
            if !self.admitted.is_empty() && self.held.saturating_add(cost) > self.budget {
                break;
            }
            let (buffer, out) = dest(r)?;
            let jobs = Job::of(self.next, r, self.chunk);
            self.unstarted += jobs.len();
            self.admitted.push_back(Slot {
                buffer,
                out,
                pending: jobs.len(),
                jobs,
                cost,
            });
            self.held += cost;
            self.stats.peak_held = self.stats.peak_held.max(self.held);
            self.next += 1;
        }
        Ok(())
    }

    /// The next reads in order: one, or for a file read together, the
    /// reads that continue it in that file too (the next bytes), up to
    /// `budget / threads` bytes. Empty when every admitted read has
    /// started.
    fn take(&mut self) -> Vec<(Job, Out)> {
        let most = (self.budget / self.threads.max(1) as u64).max(1);
        let mut batch: Vec<(Job, Out)> = Vec::new();
        let mut bytes = 0u64;
        while let Some(slot) = self.admitted.get_mut(self.started) {
            let Some(job) = slot.jobs.front() else {
                self.started += 1;
                continue;
            };
            if let Some((last, _)) = batch.last() {
                // Only the next bytes: a source merges ranges across small
                // gaps, which would read bytes the plan does not.
                let joins = self.together[last.file]
                    && job.file == last.file
                    && job.offset == last.offset + last.len
                    && bytes.saturating_add(job.len) <= most;
                if !joins {
                    break;
                }
            }
            let Some(job) = slot.jobs.pop_front() else {
                break;
            };
            bytes += job.len;
            self.unstarted -= 1;
            self.stats.reads += 1;
            self.stats.bytes_read += job.len;
            batch.push((job, slot.out));
        }
        batch
    }

    /// Records the end of `batch`'s reads; a failure stops the plan.
    fn finish(&mut self, batch: &[(Job, Out)], result: io::Result<()>, files: &[FileRef<'_>]) {
        let front = self.next - self.admitted.len();
        for (job, _) in batch {
            let slot = job
                .tensor
                .checked_sub(front)
                .and_then(|i| self.admitted.get_mut(i));
            if let Some(slot) = slot {
                slot.pending -= 1;
            }
        }
        let (Err(e), Some((job, _))) = (result, batch.first()) else {
            return;
        };
        self.stop = true;
        if self.failed.is_some() {
            return;
        }
        let error = Error::Stream(match self.tensors.get(job.tensor) {
            Some(Some(r)) => io::Error::new(e.kind(), format!("tensor {:?}: {e}", r.name)),
            _ => e,
        });
        self.failed = Some(match files.get(job.file) {
            Some(file) => file.error(error),
            None => error,
        });
    }

    /// The front tensor, when its reads are done, with its buffer.
    fn hand_over(&mut self) -> Option<(Resolved, Option<B>)> {
        if self.admitted.front().is_none_or(|s| s.pending != 0) {
            return None;
        }
        let index = self.next - self.admitted.len();
        let slot = self.admitted.pop_front()?;
        self.started = self.started.saturating_sub(1);
        self.held -= slot.cost;
        self.stats.tensors += 1;
        Some((self.tensors[index].take()?, slot.buffer))
    }
}

/// The one engine of read plans: tensors admitted in order under the
/// budget by the consumer's thread (the one handing them over), read by up
/// to `threads` readers on the pool, each taking the next read in order
/// until none is left, then ending; the consumer starts readers again as
/// it admits more. The callback form ([`run`]) and the iterator form
/// ([`ReadPlanIter`]) differ only in how readers are started and borrow
/// the files.
struct Reads<B> {
    state: Mutex<State<B>>,
    /// Signalled when a read ends or a reader finishes.
    changed: Condvar,
}

impl<B> Reads<B> {
    fn new(files: &[FileRef<'_>], tensors: Vec<Resolved>, plan: &ReadPlan) -> Reads<B> {
        let together = files.iter().map(FileRef::is_remote).collect();
        Reads {
            state: Mutex::new(State::new(together, tensors, plan)),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State<B>>) -> MutexGuard<'a, State<B>> {
        self.changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The next tensor in order, once read, with its buffer; `None` once
    /// every tensor is handed over. Admits what the budget allows (`dest`
    /// giving each tensor its memory) and starts readers (`spawn`, called
    /// once per reader, without the lock held) before it returns, so that
    /// reads go on while the caller works.
    ///
    /// # Errors
    /// The first failed read or allocation; nothing is handed over after.
    fn next_tensor(
        &self,
        dest: &mut Dest<'_, B>,
        spawn: &mut dyn FnMut(),
    ) -> Result<Option<(Resolved, Option<B>)>> {
        let mut state = self.lock();
        loop {
            if state.finished {
                return Ok(None);
            }
            if let Some(e) = state.failed.take() {
                state.finished = true;
                state.stop = true;
                return Err(e);
            }
            if state.admitted.is_empty() && state.next == state.tensors.len() {
                state.finished = true;
                return Ok(None);
            }
            // Admitted while the next tensor, even complete, still counts:
            // the budget holds until the caller has it.
            if !state.stop {
                if let Err(e) = state.admit(dest) {
                    state.failed = Some(e);
                    state.stop = true;
                }
            }
            let wanted = match state.stop {
                true => 0,
                false => (state.threads.saturating_sub(state.readers)).min(state.unstarted),
            };
            if wanted > 0 {
                state.readers += wanted;
                drop(state);
                for _ in 0..wanted {
                    spawn();
                }
                state = self.lock();
            }
            if let Some(ready) = state.hand_over() {
                return Ok(Some(ready));
            }
            // Look again when readers ran (or ran here) or something failed.
            if wanted > 0 || state.failed.is_some() {
                continue;
            }
            if state.readers == 0 {
                state.finished = true;
                return Err(Error::Stream(io::Error::other(
                    "a read plan stalled with reads pending (a bug)",
                )));
            }
            state = self.wait(state);
        }
    }

    /// Stops the reads and waits for those in flight: they write into
    /// buffers that may be freed once this returns.
    fn stop(&self) {
        let mut state = self.lock();
        state.stop = true;
        state.finished = true;
        while state.readers > 0 {
            state = self.wait(state);
        }
    }

    fn stats(&self) -> ReadStats {
        self.lock().stats.clone()
    }

    /// A reader has ended: [`Reads::stop`] waits for every one.
    fn reader_done(&self) {
        let mut state = self.lock();
        state.readers = state.readers.saturating_sub(1);
        drop(state);
        self.changed.notify_all();
    }
}

/// A reader: takes the next reads in order and reads them, until none is
/// left or the plan stops. A panic of a source is a failed read. Whoever
/// runs it calls [`Reads::reader_done`] after, once it holds nothing of
/// the files.
fn read_loop<B>(reads: &Reads<B>, files: &[FileRef<'_>]) {
    let mut state = reads.lock();
    while !state.stop {
        let batch = state.take();
        let Some(file) = batch.first().map(|(job, _)| job.file) else {
            break;
        };
        drop(state);
        let result = match files.get(file) {
            Some(f) => std::panic::catch_unwind(AssertUnwindSafe(|| read_jobs(&batch, f.source)))
                .unwrap_or_else(|_| Err(io::Error::other("the byte source panicked"))),
            None => Err(io::Error::other("a read plan's file is missing (a bug)")),
        };
        state = reads.lock();
        state.finish(&batch, result, files);
        reads.changed.notify_all();
    }
}

/// Reads `tensors` (in hand-over order) from `files` as `plan` says, on
/// the pool, handing each to `hand` on this thread as it completes, in
/// order: the callback form of [`Reads`]. `dest` gives each tensor its
/// memory (a new buffer, or the caller's).
fn run<B: Send>(
    files: &[FileRef<'_>],
    tensors: Vec<Resolved>,
    plan: &ReadPlan,
    mut dest: impl FnMut(&Resolved) -> Result<(Option<B>, Out)>,
    mut hand: impl FnMut(Resolved, Option<B>) -> Result<()>,
) -> Result<ReadStats> {
    let reads = Reads::new(files, tensors, plan);
    crate::parallel::in_place_scope(|scope| {
        let reads = &reads;
        let reader = move || {
            read_loop(reads, files);
            reads.reader_done();
        };
        let mut spawn = || match scope {
            Some(scope) => scope.spawn(move |_| reader()),
            None => reader(),
        };
        let handed = loop {
            match reads.next_tensor(&mut dest, &mut spawn) {
                Ok(Some((r, buffer))) => {
                    if let Err(e) = hand(r, buffer) {
                        break Err(e);
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        reads.stop();
        handed
    })?;
    Ok(reads.stats())
}

/// A new buffer for a tensor of a plan, and where its bytes land.
fn allocate(r: &Resolved, files: &[FileRef<'_>]) -> Result<(Option<AlignedBuffer>, Out)> {
    let len = usize::try_from(r.nbytes).map_err(|_| {
        files[r.file].error(Error::Stream(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "tensor {:?}: {} bytes do not fit the address space",
                r.name, r.nbytes
            ),
        )))
    })?;
    let mut buffer = AlignedBuffer::new(len).map_err(|e| {
        files[r.file].error(Error::Stream(io::Error::new(
            e.kind(),
            format!("tensor {:?}: {e}", r.name),
        )))
    })?;
    let out = Out {
        ptr: buffer.as_mut_ptr(),
        len,
    };
    Ok((Some(buffer), out))
}

/// What a plan hands over: the tensor and the buffer read for it (none
/// for an empty tensor).
fn tensor_bytes(r: Resolved, buffer: Option<AlignedBuffer>) -> TensorBytes {
    TensorBytes {
        name: r.name,
        dtype: r.dtype,
        shape: r.shape,
        data: buffer.unwrap_or(AlignedBuffer {
            memory: Memory::Small(Vec::new(), 0),
        }),
    }
}

/// Reads a plan over `files`, handing each tensor to `f`.
fn read_plan_over(
    files: &[FileRef<'_>],
    plan: &ReadPlan,
    locate: impl Fn(&str) -> Result<usize>,
    mut f: impl FnMut(TensorBytes) -> Result<()>,
) -> Result<ReadStats> {
    let tensors = resolve_plan(files, plan, locate)?;
    run(
        files,
        tensors,
        plan,
        |r| allocate(r, files),
        |r, buffer| f(tensor_bytes(r, buffer)),
    )
}

/// Reads one want from file `index` of `files` into `out`, split across
/// the pool in pieces of at least [`MIN_PIECE`] bytes.
fn read_into_over(
    files: &[FileRef<'_>],
    index: usize,
    name: &str,
    slice: Option<&[SliceArg]>,
    out: &mut [u8],
) -> Result<()> {
    let want = Want {
        name: name.to_string(),
        slice: slice.map(<[SliceArg]>::to_vec),
    };
    let r = resolve_in(files, index, &want, None)?;
    if r.nbytes != out.len() as u64 {
        return Err(files[index].error(Error::DestinationLength {
            tensor: name.to_string(),
            expected: r.nbytes,
            actual: out.len() as u64,
        }));
    }
    let threads = crate::parallel::threads();
    let chunk = r
        .nbytes
        .div_ceil(threads.max(1) as u64)
        .clamp(MIN_PIECE, DEFAULT_CHUNK);
    let dest = Out {
        ptr: out.as_mut_ptr(),
        len: out.len(),
    };
    // The caller's memory: nothing is allocated, so no budget applies.
    let plan = ReadPlan::all()
        .with_chunk(chunk)
        .with_threads(threads)
        .with_budget(u64::MAX);
    run::<()>(files, vec![r], &plan, |_| Ok((None, dest)), |_, _| Ok(()))?;
    Ok(())
}

/// What a plan is read from, shared by a [`ReadPlanIter`] with its readers.
trait PlanFiles: Send + Sync {
    /// The files, in the order plans resolved against them number them.
    fn plan_files(&self) -> Vec<FileRef<'_>>;
}

impl<S: ByteSource> PlanFiles for SafeTensors<S> {
    fn plan_files(&self) -> Vec<FileRef<'_>> {
        vec![self.file_ref()]
    }
}

impl PlanFiles for ShardedTensors {
    fn plan_files(&self) -> Vec<FileRef<'_>> {
        self.file_refs()
    }
}

/// The iterator form of a read plan ([`SafeTensors::read_plan_iter`],
/// [`ShardedTensors::read_plan_iter`]): each tensor in read order, once
/// read, as [`SafeTensors::read_plan`] hands them to its callback.
///
/// Reads go on in the library's pool while the caller works on what it
/// was handed, within the plan's budget, which counts every byte read and
/// not yet returned by [`Iterator::next`] (tensors complete but not taken
/// included). Dropping the iterator stops the reads: it returns once the
/// reads in flight (at most one chunk per thread) are done, and leaves no
/// work behind in the pool. It shares ownership of the file or set, so
/// that no read can outlive what it reads.
///
/// After an error (a failed read or allocation), nothing more is handed
/// over: the iterator ends.
pub struct ReadPlanIter {
    reads: Arc<Reads<AlignedBuffer>>,
    files: Arc<dyn PlanFiles>,
}

impl std::fmt::Debug for ReadPlanIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadPlanIter")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl ReadPlanIter {
    /// Resolves `plan` against `files` (nothing is read yet).
    fn new(
        files: Arc<dyn PlanFiles>,
        plan: &ReadPlan,
        locate: impl Fn(&str) -> Result<usize>,
    ) -> Result<ReadPlanIter> {
        let refs = files.plan_files();
        let tensors = resolve_plan(&refs, plan, locate)?;
        let reads = Arc::new(Reads::new(&refs, tensors, plan));
        drop(refs);
        Ok(ReadPlanIter { reads, files })
    }

    /// What the reads have done so far (all of it once the iterator has
    /// ended).
    pub fn stats(&self) -> ReadStats {
        self.reads.stats()
    }
}

impl Iterator for ReadPlanIter {
    type Item = Result<TensorBytes>;

    fn next(&mut self) -> Option<Result<TensorBytes>> {
        let refs = self.files.plan_files();
        let (reads, files) = (&self.reads, &self.files);
        let mut spawn = || {
            let (reads, files) = (Arc::clone(reads), Arc::clone(files));
            crate::parallel::spawn(move || {
                read_loop(&reads, &files.plan_files());
                // Let go of the file or set before the reader counts as
                // done: once dropped, the iterator holds the last share.
                drop(files);
                reads.reader_done();
            });
        };
        let got = self
            .reads
            .next_tensor(&mut |r| allocate(r, &refs), &mut spawn);
        got.transpose().map(|t| t.map(|(r, b)| tensor_bytes(r, b)))
    }
}

impl std::iter::FusedIterator for ReadPlanIter {}

impl Drop for ReadPlanIter {
    fn drop(&mut self) {
        self.reads.stop();
    }
}

impl<S: ByteSource> SafeTensors<S> {
    /// Reads a plan (see [`crate::read`]): the tensors or slices it names,
    /// or every tensor whole, each handed to `f` once read, in read order
    /// (the file's offset order), with at most the plan's budget of bytes
    /// read and not yet handed over.
    ///
    /// # Errors
    /// A tensor the file does not hold ([`Error::NotFound`]), a slice that
    /// does not fit ([`Error::Slice`], naming the slice), memory that
    /// cannot be had, a failed read, or the first error of `f`; every one
    /// names the file when it has a path. Nothing is read when the plan
    /// does not resolve.
    pub fn read_plan(
        &self,
        plan: &ReadPlan,
        f: impl FnMut(TensorBytes) -> Result<()>,
    ) -> Result<ReadStats> {
        let files = [self.file_ref()];
        read_plan_over(&files, plan, |_| Ok(0), f)
    }

    /// Reads a plan as an iterator (see [`ReadPlanIter`]): the tensors
    /// [`SafeTensors::read_plan`] would hand to its callback, in the same
    /// order, read in the background within the same budget. The iterator
    /// shares the file (hence `Arc`: clone it to keep using it here).
    ///
    /// # Errors
    /// A plan that does not resolve, as [`SafeTensors::read_plan`]
    /// (nothing is read); the iterator yields read and allocation errors.
    pub fn read_plan_iter(self: Arc<Self>, plan: &ReadPlan) -> Result<ReadPlanIter>
    where
        S: 'static,
    {
        ReadPlanIter::new(self, plan, |_| Ok(0))
    }

    /// Reads a tensor, or a slice of it (`slice`, as
    /// [`SafeTensors::slice`] takes), into `out`, which must hold exactly
    /// its bytes; they land in C order, as the slice's bytes are stored.
    /// A large read is split across the library's pool.
    ///
    /// # Errors
    /// As [`SafeTensors::read_plan`], and [`Error::DestinationLength`] when
    /// `out` is not the size of the result.
    pub fn read_into(&self, name: &str, slice: Option<&[SliceArg]>, out: &mut [u8]) -> Result<()> {
        read_into_over(&[self.file_ref()], 0, name, slice, out)
    }

    fn file_ref(&self) -> FileRef<'_> {
        FileRef {
            header: self.header(),
            source: self.source(),
            path: self.path(),
        }
    }
}

impl ShardedTensors {
    /// The shards as files of a plan.
    fn file_refs(&self) -> Vec<FileRef<'_>> {
        self.shards()
            .iter()
            .map(|s| FileRef {
                header: s.header(),
                source: s.file().source(),
                path: Some(s.path()),
            })
            .collect()
    }

    /// The position among the shards of the one holding `name`.
    fn shard_index(&self, name: &str) -> Result<usize> {
        let shard = self.shard_of(name).ok_or_else(|| {
            Error::NotFound(name.to_string()).at(self.index_path().unwrap_or(self.dir()))
        })?;
        Ok(self
            .shards()
            .iter()
            .position(|s| std::ptr::eq(s, shard))
            .unwrap_or(0))
    }

    /// Reads a plan over the whole set (see [`SafeTensors::read_plan`]):
    /// shard by shard in name order, each in offset order, always with
    /// positional reads (or the location's requests), never through a map.
    ///
    /// # Errors
    /// As [`SafeTensors::read_plan`]; a tensor no shard holds is
    /// [`Error::NotFound`] naming the index (or the directory).
    pub fn read_plan(
        &self,
        plan: &ReadPlan,
        f: impl FnMut(TensorBytes) -> Result<()>,
    ) -> Result<ReadStats> {
        read_plan_over(&self.file_refs(), plan, |n| self.shard_index(n), f)
    }

    /// Reads a plan over the whole set as an iterator (see
    /// [`SafeTensors::read_plan_iter`] and [`ShardedTensors::read_plan`]).
    ///
    /// # Errors
    /// As [`ShardedTensors::read_plan`], before anything is read; the
    /// iterator yields read and allocation errors.
    pub fn read_plan_iter(self: Arc<Self>, plan: &ReadPlan) -> Result<ReadPlanIter> {
        let set = Arc::clone(&self);
        ReadPlanIter::new(self, plan, |n| set.shard_index(n))
    }

    /// Reads a tensor or a slice of it into `out` (see
    /// [`SafeTensors::read_into`]).
    ///
    /// # Errors
    /// As [`SafeTensors::read_into`].
    pub fn read_into(&self, name: &str, slice: Option<&[SliceArg]>, out: &mut [u8]) -> Result<()> {
        let index = self.shard_index(name)?;
        read_into_over(&self.file_refs(), index, name, slice, out)
    }

    /// Reads `wants` in their own order (not read order), each into a
    /// vector of its own, with at most `budget` bytes read and not handed
    /// to `hand`, once `refuse` has seen their names and sizes and let them
    /// through: what [`ShardedTensors::load`] and
    /// [`ShardedTensors::load_each`] are made of.
    pub(crate) fn load_wants(
        &self,
        wants: &[Want],
        budget: u64,
        refuse: impl FnOnce(&[(&str, u64)]) -> Result<()>,
        mut hand: impl FnMut(Loaded) -> Result<()>,
    ) -> Result<()> {
        let files = self.file_refs();
        let tensors = wants
            .iter()
            .map(|w| resolve_in(&files, self.shard_index(&w.name)?, w, None))
            .collect::<Result<Vec<_>>>()?;
        let sizes: Vec<(&str, u64)> = tensors.iter().map(|r| (&r.name[..], r.nbytes)).collect();
        refuse(&sizes)?;
        let plan = ReadPlan::all().with_budget(budget);
        let dest = |r: &Resolved| {
            let mut bytes = crate::file::zeroed_buffer(&r.name, r.nbytes)
                .map_err(|e| files[r.file].error(e))?;
            let out = Out {
                ptr: bytes.as_mut_ptr(),
                len: bytes.len(),
            };
            Ok((Some(bytes), out))
        };
        run(&files, tensors, &plan, dest, |r, bytes| {
            hand(Loaded {
                name: r.name,
                dtype: r.dtype,
                shape: r.shape,
                bytes: bytes.unwrap_or_default(),
            })
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(at: u64, dest: u64, len: u64) -> Piece {
        Piece { at, dest, len }
    }

    #[test]
    fn runs_within_the_gap_merge_and_others_do_not() {
        // Runs of 10 bytes, 5 apart, then one 100 past.
        let runs = [100..110, 115..125, 130..140, 240..250];
        let spans = coalesce(runs.clone(), 5);
        assert_eq!(
            spans,
            [
                Span {
                    offset: 100,
                    len: 40,
                    pieces: vec![piece(0, 0, 10), piece(15, 10, 10), piece(30, 20, 10)],
                },
                Span {
                    offset: 240,
                    len: 10,
                    pieces: vec![piece(0, 30, 10)],
                },
            ]
        );
        // A gap of 4 merges nothing; 100 merges everything.
        assert_eq!(coalesce(runs.clone(), 4).len(), 4);
        let all = coalesce(runs, 100);
        assert_eq!((all.len(), all[0].len, all[0].pieces.len()), (1, 150, 4));
    }

    #[test]
    fn adjacent_runs_become_one_piece_and_empty_runs_vanish() {
        let spans = coalesce([0..8, 8..8, 8..16, 16..20], 0);
        assert_eq!(
            spans,
            [Span {
                offset: 0,
                len: 20,
                pieces: vec![piece(0, 0, 20)],
            }]
        );
        assert!(coalesce(std::iter::once(5..5), 10).is_empty());
    }

    #[test]
    fn chunks_cover_the_span_in_pieces_no_longer_than_asked() {
        assert_eq!(chunks(20, 8).collect::<Vec<_>>(), [0..8, 8..16, 16..20]);
        assert_eq!(chunks(16, 8).collect::<Vec<_>>(), [0..8, 8..16]);
        assert_eq!(chunks(3, 0).count(), 3);
        assert_eq!(chunks(0, 8).count(), 0);
    }

    #[test]
    fn jobs_carry_the_parts_of_pieces_their_chunk_holds() {
        let r = Resolved {
            file: 0,
            first: 100,
            name: "t".into(),
            dtype: Dtype::U8,
            shape: vec![20],
            nbytes: 20,
            // Bytes 0..10 and 15..25 of the span, merged over a gap of 5.
            spans: coalesce([100..110, 115..125], 5),
        };
        let jobs: Vec<Job> = Job::of(0, &r, 8).into();
        let got: Vec<(u64, u64, Vec<Piece>)> = jobs
            .into_iter()
            .map(|j| (j.offset, j.len, j.pieces))
            .collect();
        assert_eq!(
            got,
            [
                (100, 8, vec![piece(0, 0, 8)]),
                (108, 8, vec![piece(0, 8, 2), piece(7, 10, 1)]),
                (116, 8, vec![piece(0, 11, 8)]),
                (124, 1, vec![piece(0, 19, 1)]),
            ]
        );
    }

    /// A tensor of `u8`s read from bytes `run` of file 0.
    fn resolved(name: &str, run: Range<u64>) -> Resolved {
        let nbytes = run.end - run.start;
        Resolved {
            file: 0,
            first: run.start,
            name: name.into(),
            dtype: Dtype::U8,
            shape: vec![nbytes],
            nbytes,
            spans: coalesce(std::iter::once(run), 0),
        }
    }

    /// The offsets and lengths of the reads `take` hands out, call by call,
    /// until it has none: `remote` says whether the file's reads go
    /// together.
    fn batches(remote: bool, plan: &ReadPlan) -> Vec<Vec<(u64, u64)>> {
        // Bytes 100..132 and 132..148 (consecutive), then 200..208.
        let tensors = vec![
            resolved("a", 100..132),
            resolved("b", 132..148),
            resolved("c", 200..208),
        ];
        let mut state: State<()> = State::new(vec![remote], tensors, plan);
        let nowhere = Out {
            ptr: std::ptr::null_mut(),
            len: 0,
        };
        state.admit(&mut |_| Ok((None, nowhere))).unwrap();
        let mut got = Vec::new();
        loop {
            let batch = state.take();
            if batch.is_empty() {
                return got;
            }
            got.push(batch.iter().map(|(j, _)| (j.offset, j.len)).collect());
        }
    }

    #[test]
    fn a_remote_files_consecutive_reads_go_together_and_a_local_ones_alone() {
        let plan = ReadPlan::all().with_chunk(8).with_threads(1);
        let consecutive: Vec<(u64, u64)> = (100..148).step_by(8).map(|o| (o, 8)).collect();
        assert_eq!(batches(true, &plan), [consecutive.clone(), vec![(200, 8)]]);
        let alone: Vec<Vec<(u64, u64)>> = consecutive
            .into_iter()
            .chain([(200, 8)])
            .map(|r| vec![r])
            .collect();
        assert_eq!(batches(false, &plan), alone);
        // At most budget / threads bytes at once (a budget that admits
        // "a" and "b" only).
        let plan = plan.with_budget(48).with_threads(2);
        let sizes: Vec<usize> = batches(true, &plan).iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3]);
    }

    #[test]
    fn a_stopped_plan_starts_no_read() {
        let data: Vec<u8> = (0..64u8).collect();
        let t = crate::TensorRef {
            name: "w",
            dtype: Dtype::U8,
            shape: &[64],
            data: &data,
        };
        let bytes = crate::serialize([t], None).unwrap();
        let file = SafeTensors::from_source(bytes, &Default::default()).unwrap();
        let files = [file.file_ref()];
        let plan = ReadPlan::all().with_chunk(8);
        let tensors = resolve_plan(&files, &plan, |_| Ok(0)).unwrap();
        let reads: Reads<AlignedBuffer> = Reads::new(&files, tensors, &plan);
        reads.lock().admit(&mut |r| allocate(r, &files)).unwrap();
        reads.stop();
        read_loop(&reads, &files);
        assert_eq!(reads.stats().reads, 0);
        let next = reads.next_tensor(&mut |r| allocate(r, &files), &mut || {
            panic!("no reader starts after a stop")
        });
        assert!(next.unwrap().is_none());
    }

    #[test]
    fn slices_are_written_as_numpy_writes_them() {
        let args = [
            SliceArg::range(0, 4),
            SliceArg::Range {
                start: None,
                stop: Some(-1),
                step: 2,
            },
            SliceArg::Index(-3),
        ];
        assert_eq!(slice_text(&args), "[0:4, :-1:2, -3]");
    }

    #[test]
    fn aligned_buffers_are_aligned_zeroed_and_sized() {
        for len in [0usize, 1, 63, 64, 65, 4096, HUGE_FROM, HUGE_FROM + 3] {
            let mut b = AlignedBuffer::new(len).unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % 64, 0, "{len}");
            assert!(b.iter().all(|&x| x == 0));
            if len > 0 {
                b[len - 1] = 7;
                assert_eq!(b[len - 1], 7);
            }
        }
    }
}
