//! [`RemoteFile`]: one remote object as a [`ByteSource`], read with range
//! requests.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tensorfile_core::file::HEADER_PROBE;
use tensorfile_core::source::{truncated, ByteSource};

use crate::error::RemoteError;
use crate::http::{Client, Endpoint, Meta, Validator};

/// A remote object read with range requests: every reader feature works on
/// it (headers, tensors, slices, [`ByteSource::read_ranges`]).
///
/// Opening makes one request: the first [`HEADER_PROBE`] bytes, which
/// also give the length and the validator (`ETag`, else `Last-Modified`),
/// and are kept, so that reading a header that fits costs nothing more.
/// Every later answer must show the same length and validator: an object
/// that changed is an error, never a mix of two versions.
///
/// Reads are split into requests of at most
/// [`RemoteOptions::chunk_size`](crate::RemoteOptions::chunk_size) bytes;
/// [`ByteSource::read_ranges`] coalesces ranges closer than
/// [`RemoteOptions::coalesce_gap`](crate::RemoteOptions::coalesce_gap),
/// and runs the requests on up to
/// [`RemoteOptions::concurrency`](crate::RemoteOptions::concurrency)
/// threads (the [`Client`] bounds them across all its objects). Bytes go
/// straight into the caller's buffers: beyond them, a request in flight
/// holds one 64 KiB piece.
pub struct RemoteFile {
    client: Arc<Client>,
    endpoint: Endpoint,
    name: String,
    meta: Meta,
    /// The first bytes of the object, read when opened.
    head: Vec<u8>,
    /// The same bytes in the Hugging Face cache: read there, not
    /// requested.
    local: Option<std::fs::File>,
}

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteFile")
            .field("name", &self.name)
            .field("len", &self.meta.len)
            .finish_non_exhaustive()
    }
}

impl RemoteFile {
    /// Opens an object: one request for its first [`HEADER_PROBE`] bytes.
    pub(crate) fn open(
        client: Arc<Client>,
        endpoint: Endpoint,
        name: String,
    ) -> Result<RemoteFile, RemoteError> {
        let mut head = Vec::new();
        let meta =
            client.get_range(&name, &endpoint, 0, HEADER_PROBE, None, &mut |at, piece| {
                debug_assert_eq!(at as usize, head.len());
                head.truncate(at as usize);
                head.extend_from_slice(piece);
            })?;
        Ok(RemoteFile {
            client,
            endpoint,
            name,
            meta,
            head,
            local: None,
        })
    }

    /// The object as a file of the Hugging Face cache (`hash`: its blob's
    /// name, its validator): its first bytes and safetensors header read
    /// from the file, and every later read too; no request.
    pub(crate) fn cached(
        client: Arc<Client>,
        endpoint: Endpoint,
        name: String,
        file: std::fs::File,
        len: u64,
        hash: Option<String>,
        max_header_len: u64,
    ) -> Result<RemoteFile, RemoteError> {
        let meta = Meta {
            len,
            validator: Validator {
                etag: hash.map(|h| format!("\"{h}\"")),
                last_modified: None,
            },
            ..Meta::default()
        };
        let mut out = RemoteFile {
            client,
            endpoint,
            name,
            meta,
            head: Vec::new(),
            local: Some(file),
        };
        let mut head = vec![0u8; len.min(HEADER_PROBE) as usize];
        out.fetch(vec![(0, &mut head[..])])?;
        out.head = head;
        out.read_long_header(max_header_len)?;
        Ok(out)
    }

    /// Reads the rest of the object from `file` (a blob of the Hugging
    /// Face cache of the same length) from now on.
    pub(crate) fn read_from(&mut self, file: std::fs::File) {
        self.local = Some(file);
    }

    /// Whether it is read from the Hugging Face cache.
    pub fn is_cached(&self) -> bool {
        self.local.is_some()
    }

    /// The rest of a safetensors header longer than the first read.
    fn read_long_header(&mut self, max_header_len: u64) -> Result<(), RemoteError> {
        if self.head.len() >= 8 {
            let n = u64::from_le_bytes(self.head[..8].try_into().unwrap_or_default());
            let end = 8u64.saturating_add(n);
            let have = self.head.len() as u64;
            if n <= max_header_len && end > have && end <= self.meta.len {
                let mut rest = vec![0u8; (end - have) as usize];
                self.fetch(vec![(have, &mut rest[..])])?;
                self.head.extend_from_slice(&rest);
            }
        }
        Ok(())
    }

    /// [`RemoteFile::open`], then the rest of a safetensors header longer
    /// than the first read (a second request), so that reading the header
    /// afterwards needs no request at all. Bytes that are not a
    /// safetensors prefix are left for the reader to refuse.
    pub(crate) fn open_with_header(
        client: Arc<Client>,
        endpoint: Endpoint,
        name: String,
        max_header_len: u64,
    ) -> Result<RemoteFile, RemoteError> {
        let mut file = RemoteFile::open(client, endpoint, name)?;
        file.read_long_header(max_header_len)?;
        Ok(file)
    }

    /// The object's first bytes, read when it was opened (up to 64 KiB,
    /// and a safetensors header longer than that).
    pub fn head_bytes(&self) -> &[u8] {
        &self.head
    }

    /// Reads `start..end` of the object with one request (retried as
    /// every request is), handing the bytes to `sink` in order with their
    /// offsets: for copying to disk without holding the range in memory.
    ///
    /// # Errors
    /// The range is past the end, or the request fails.
    pub fn stream(
        &self,
        start: u64,
        end: u64,
        sink: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<(), RemoteError> {
        if start > end || end > self.meta.len {
            return Err(RemoteError::new(
                &self.name,
                crate::Problem::NotSatisfiable {
                    asked: format!("bytes {start}-{end} of {}", self.meta.len),
                },
            ));
        }
        if start == end {
            return Ok(());
        }
        if let Some(file) = &self.local {
            let mut piece = vec![0u8; (end - start).min(64 << 10) as usize];
            let mut at = start;
            while at < end {
                let n = (end - at).min(piece.len() as u64) as usize;
                self.read_local(file, at, &mut piece[..n])?;
                sink(at, &piece[..n]);
                at += n as u64;
            }
            return Ok(());
        }
        self.client
            .get_range(
                &self.name,
                &self.endpoint,
                start,
                end,
                Some(&self.meta),
                sink,
            )
            .map(drop)
    }

    /// Whether its server answers range requests with the whole object
    /// (`python3 -m http.server`): reads then take what they need from the
    /// object's start, and a copy is one stream that cannot resume.
    pub fn ranges_ignored(&self) -> bool {
        self.meta.ranges_ignored
    }

    /// The object's public name (a URL without credentials).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `ETag` and `Last-Modified` it had when opened.
    pub fn validator(&self) -> &Validator {
        &self.meta.validator
    }

    /// A header of the first answer kept for verification (`x-linked-etag`,
    /// `x-repo-commit`, ...), by lowercase name.
    pub fn kept_header(&self, name: &str) -> Option<&str> {
        self.meta.header(name)
    }

    /// The client its requests go through.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// A `HEAD` of the object now (S3 is asked for its checksum), as
    /// `(name, value)` pairs of the kept headers.
    ///
    /// # Errors
    /// The request fails.
    pub fn head_now(&self) -> Result<Vec<(String, String)>, RemoteError> {
        if self.local.is_some() {
            return Ok(Vec::new());
        }
        Ok(self.client.head(&self.name, &self.endpoint)?.kept)
    }

    /// Reads `buf.len()` bytes at `at` of the cached file.
    fn read_local(&self, file: &std::fs::File, at: u64, buf: &mut [u8]) -> Result<(), RemoteError> {
        #[cfg(unix)]
        let read = std::os::unix::fs::FileExt::read_exact_at(file, buf, at);
        #[cfg(windows)]
        let read = {
            use std::os::windows::fs::FileExt;
            let mut done = 0;
            let mut result = Ok(());
            while done < buf.len() {
                match file.seek_read(&mut buf[done..], at + done as u64) {
                    Ok(0) => {
                        result = Err(io::ErrorKind::UnexpectedEof.into());
                        break;
                    }
                    Ok(n) => done += n,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            result
        };
        read.map_err(|e| {
            RemoteError::new(
                &self.name,
                crate::Problem::Cache(format!("reading the cached blob: {e}")),
            )
        })
    }

    /// Reads ranges that are all within the object: coalesced, split into
    /// chunks, and run concurrently.
    fn fetch(&self, ranges: Vec<(u64, &mut [u8])>) -> Result<(), RemoteError> {
        if let Some(file) = &self.local {
            for (at, buf) in ranges {
                self.read_local(file, at, buf)?;
            }
            return Ok(());
        }
        let options = self.client.options();
        let jobs = if self.meta.ranges_ignored {
            // Every answer starts at the object's first byte: one request
            // for all the ranges, not one download of a prefix per range.
            plan(ranges, u64::MAX, u64::MAX)
        } else {
            plan(ranges, options.coalesce_gap, options.chunk_size.max(1))
        };
        let run = |job: Job<'_>| -> Result<(), RemoteError> {
            let Job {
                start,
                end,
                mut dests,
            } = job;
            self.client.get_range(
                &self.name,
                &self.endpoint,
                start,
                end,
                Some(&self.meta),
                &mut |at, piece| scatter(&mut dests, at, piece),
            )?;
            Ok(())
        };
        let workers = options.concurrency.max(1).min(jobs.len());
        if workers <= 1 {
            return jobs.into_iter().try_for_each(run);
        }
        let queue = Mutex::new(jobs.into_iter());
        let failed = AtomicBool::new(false);
        let first_error: Mutex<Option<RemoteError>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    if failed.load(Ordering::Relaxed) {
                        return;
                    }
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some(job) = job else { return };
                    if let Err(e) = run(job) {
                        failed.store(true, Ordering::Relaxed);
                        first_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                });
            }
        });
        match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// One request: `start..end` of the object, and the caller's buffers (with
/// their offsets) that it fills.
struct Job<'a> {
    start: u64,
    end: u64,
    dests: Vec<(u64, &'a mut [u8])>,
}

/// Copies the bytes at `at` into every buffer they overlap.
fn scatter(dests: &mut [(u64, &mut [u8])], at: u64, piece: &[u8]) {
    let end = at + piece.len() as u64;
    for (offset, buf) in dests.iter_mut() {
        let (o, b) = (*offset, buf.len() as u64);
        let from = at.max(o);
        let to = end.min(o + b);
        if from < to {
            buf[(from - o) as usize..(to - o) as usize]
                .copy_from_slice(&piece[(from - at) as usize..(to - at) as usize]);
        }
    }
}

/// The requests that read `ranges`: neighbours closer than `gap` share a
/// request, and no request is longer than `chunk` unless a single buffer
/// is (which is then split over several requests).
fn plan(ranges: Vec<(u64, &mut [u8])>, gap: u64, chunk: u64) -> Vec<Job<'_>> {
    let mut pieces: Vec<(u64, &mut [u8])> = Vec::new();
    for (offset, buf) in ranges {
        let mut at = offset;
        let mut rest = buf;
        // A long buffer becomes pieces of one chunk each.
        while rest.len() as u64 > chunk {
            let (head, tail) = rest.split_at_mut(chunk as usize);
            pieces.push((at, head));
            at += chunk;
            rest = tail;
        }
        if !rest.is_empty() {
            pieces.push((at, rest));
        }
    }
    pieces.sort_by_key(|(o, _)| *o);
    let mut jobs: Vec<Job<'_>> = Vec::new();
    for (offset, buf) in pieces {
        let end = offset + buf.len() as u64;
        if let Some(last) = jobs.last_mut() {
            let joined = end.max(last.end) - last.start;
            if offset <= last.end.saturating_add(gap) && joined <= chunk {
                last.end = last.end.max(end);
                last.dests.push((offset, buf));
                continue;
            }
        }
        jobs.push(Job {
            start: offset,
            end,
            dests: vec![(offset, buf)],
        });
    }
    jobs
}

impl ByteSource for RemoteFile {
    fn len(&self) -> u64 {
        self.meta.len
    }

    fn path(&self) -> Option<&std::path::Path> {
        Some(std::path::Path::new(&self.name))
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_ranges(&mut [(offset, buf)])
    }

    fn read_ranges(&self, ranges: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        let mut wanted: Vec<(u64, &mut [u8])> = Vec::new();
        for (offset, buf) in ranges.iter_mut() {
            let end = offset.checked_add(buf.len() as u64);
            if end.is_none_or(|e| e > self.meta.len) {
                return Err(truncated(*offset, buf.len(), self.meta.len));
            }
            if buf.is_empty() {
                continue;
            }
            // Within the first bytes, read when opened: no request.
            let (o, n) = (*offset as usize, buf.len());
            if let Some(kept) = self.head.get(o..o + n) {
                buf.copy_from_slice(kept);
                continue;
            }
            wanted.push((*offset, &mut **buf));
        }
        if wanted.is_empty() {
            return Ok(());
        }
        self.fetch(wanted).map_err(RemoteError::into_io_unnamed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_coalesce_close_ranges_and_split_long_ones() {
        let (mut a, mut b, mut c, mut d) =
            (vec![0u8; 10], vec![0u8; 10], vec![0u8; 10], vec![0u8; 25]);
        let ranges: Vec<(u64, &mut [u8])> =
            vec![(100, &mut c), (0, &mut a), (15, &mut b), (1000, &mut d)];
        let jobs = plan(ranges, 5, 10_000);
        let spans: Vec<(u64, u64, usize)> = jobs
            .iter()
            .map(|j| (j.start, j.end, j.dests.len()))
            .collect();
        assert_eq!(spans, [(0, 25, 2), (100, 110, 1), (1000, 1025, 1)]);
        drop(jobs);
        let ranges: Vec<(u64, &mut [u8])> = vec![(1000, &mut d)];
        let jobs = plan(ranges, 5, 10);
        let spans: Vec<(u64, u64)> = jobs.iter().map(|j| (j.start, j.end)).collect();
        assert_eq!(spans, [(1000, 1010), (1010, 1020), (1020, 1025)]);
    }

    #[test]
    fn scatter_fills_overlapping_buffers() {
        let (mut a, mut b) = (vec![0u8; 4], vec![0u8; 4]);
        let mut dests: Vec<(u64, &mut [u8])> = vec![(10, &mut a), (12, &mut b)];
        scatter(&mut dests, 8, &[8, 9, 10, 11, 12, 13]);
        scatter(&mut dests, 14, &[14, 15, 16]);
        assert_eq!(a, [10, 11, 12, 13]);
        assert_eq!(b, [12, 13, 14, 15]);
    }
}
