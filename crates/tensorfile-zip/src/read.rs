//! The reader: the index of an archive read with positional reads from a
//! [`ByteSource`], and its members' bytes read, inflated or streamed on
//! demand.

use std::collections::HashMap;
use std::io::{self, Read};
use std::ops::Range;

use tensorfile_core::source::ByteSource;

use crate::error::{Result, ZipError};
use crate::format::{
    CENTRAL_LEN, CENTRAL_SIG, EOCD_LEN, EOCD_SIG, LOCAL_LEN, LOCAL_SIG, ZIP64_EOCD_LEN,
    ZIP64_EOCD_SIG, ZIP64_EXTRA_ID, ZIP64_LOCATOR_LEN, ZIP64_LOCATOR_SIG,
};

/// The best ratio deflate can reach is about 1032:1; a declared size above
/// that is a lie and must not drive an allocation.
const MAX_DEFLATE_RATIO: u64 = 1032;

/// Bytes read from the source at a time when inflating.
const INFLATE_READ: usize = 256 << 10;

/// How a member's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Stored as is: readable in place.
    Stored,
    /// Raw deflate.
    Deflated,
}

/// One member of the central directory, with its data located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The member's name (path inside the archive).
    pub name: String,
    /// Compression method.
    pub method: Method,
    /// Byte offset of the member's data in the archive.
    pub data_offset: u64,
    /// Length of the data as stored.
    pub compressed_size: u64,
    /// Length once inflated (equal to `compressed_size` for stored members).
    pub size: u64,
    /// The CRC-32 the central directory records (not verified by the
    /// reads here: torch does not verify it, and some writers leave 0;
    /// see [`Entry::verify_crc`]).
    pub crc32: u32,
}

/// Bounds on what reading an index may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// The largest central directory read, in bytes (it is read whole).
    /// 1 GiB by default: a member costs about 100 bytes there, so ten
    /// million members fit.
    pub max_directory_bytes: u64,
}

impl Default for ReadLimits {
    fn default() -> ReadLimits {
        ReadLimits {
            max_directory_bytes: 1 << 30,
        }
    }
}

/// The index of a zip archive: its members, in central-directory order.
#[derive(Debug, Clone)]
pub struct ZipIndex {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    len: u64,
}

/// Little-endian field reader over a bounds-checked buffer.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        if let Some(b) = self
            .pos
            .checked_add(N)
            .and_then(|end| self.bytes.get(self.pos..end))
        {
            a.copy_from_slice(b);
        }
        self.pos = self.pos.saturating_add(N);
        a
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }
}

/// Checks that `len` bytes at `offset` lie in a source of `file_len` bytes.
fn check_range(offset: u64, len: u64, file_len: u64, what: &str) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(ZipError::OutOfBounds {
            what: what.to_string(),
            offset,
            len,
            file_len,
        }),
    }
}

/// Reads `len` bytes at `offset` into a new buffer, bounds checked first.
fn read_vec(source: &dyn ByteSource, offset: u64, len: u64, what: &str) -> Result<Vec<u8>> {
    check_range(offset, len, source.len(), what)?;
    let n = usize::try_from(len).map_err(|_| ZipError::Limit {
        what: what.to_string(),
        needed: len,
        limit: usize::MAX as u64,
    })?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(n).map_err(|_| ZipError::Limit {
        what: format!("{what} (cannot allocate)"),
        needed: len,
        limit: 0,
    })?;
    buf.resize(n, 0);
    source
        .read_exact_at(offset, &mut buf)
        .map_err(|e| ZipError::read(what, offset, &e))?;
    Ok(buf)
}

/// A fixed-size record read from the source, its signature checked.
fn record(
    source: &dyn ByteSource,
    offset: u64,
    len: usize,
    sig: u32,
    what: &str,
) -> Result<Vec<u8>> {
    let bytes = read_vec(source, offset, len as u64, what)?;
    if bytes.get(..4) != Some(&sig.to_le_bytes()[..]) {
        return Err(ZipError::Malformed {
            what: format!("bad {what} signature"),
            offset,
        });
    }
    Ok(bytes)
}

impl ZipIndex {
    /// Reads an archive held in memory (see [`ZipIndex::read`]).
    ///
    /// # Errors
    ///
    /// As [`ZipIndex::read_with`].
    pub fn parse(data: &[u8]) -> Result<ZipIndex> {
        ZipIndex::read(&data)
    }

    /// Reads the index of the archive `source` with default limits.
    ///
    /// # Errors
    ///
    /// As [`ZipIndex::read_with`].
    pub fn read(source: &dyn ByteSource) -> Result<ZipIndex> {
        ZipIndex::read_with(source, &ReadLimits::default())
    }

    /// Reads the central directory of `source` and locates every member's
    /// data, with positional reads only: the end of the file (at most the
    /// 22-byte end record and the longest comment), the ZIP64 records, the
    /// central directory (at most `limits.max_directory_bytes`), and each
    /// local header.
    ///
    /// Refuses duplicate names, encrypted members, methods other than
    /// stored and deflate, and any record that does not fit the source.
    ///
    /// # Errors
    ///
    /// [`ZipError::NoEndOfCentralDirectory`] when no end record is found,
    /// [`ZipError::Malformed`] or [`ZipError::OutOfBounds`] for a record that
    /// is wrong or does not fit the source, [`ZipError::DuplicateEntry`],
    /// [`ZipError::Unsupported`] (encryption, other methods),
    /// [`ZipError::Limit`] past `limits`, and [`ZipError::Read`] when a read
    /// fails.
    pub fn read_with(source: &dyn ByteSource, limits: &ReadLimits) -> Result<ZipIndex> {
        let len = source.len();
        let searched = len.min((EOCD_LEN + u16::MAX as usize) as u64);
        let tail_start = len - searched;
        let tail = read_vec(source, tail_start, searched, "end of the file")?;
        let not_found = ZipError::NoEndOfCentralDirectory { searched };
        let last = tail.len().checked_sub(EOCD_LEN).ok_or(not_found.clone())?;
        let eocd_in_tail = (0..=last)
            .rev()
            .find(|&pos| tail[pos..pos + 4] == EOCD_SIG.to_le_bytes())
            .ok_or(not_found)?;
        let eocd_pos = tail_start + eocd_in_tail as u64;
        let mut f = Fields {
            bytes: &tail[eocd_in_tail..eocd_in_tail + EOCD_LEN],
            pos: 4,
        };
        let _disk = f.u16();
        let _cd_disk = f.u16();
        let _entries_here = f.u16();
        let mut count = u64::from(f.u16());
        let mut cd_size = u64::from(f.u32());
        let mut cd_offset = u64::from(f.u32());

        // ZIP64: the locator sits right before the classic record.
        if let Some(loc_pos) = eocd_pos.checked_sub(ZIP64_LOCATOR_LEN as u64) {
            let sig = read_vec(source, loc_pos, 4, "zip64 locator")?;
            if sig == ZIP64_LOCATOR_SIG.to_le_bytes() {
                let l = record(
                    source,
                    loc_pos,
                    ZIP64_LOCATOR_LEN,
                    ZIP64_LOCATOR_SIG,
                    "zip64 locator",
                )?;
                let mut l = Fields { bytes: &l, pos: 4 };
                let _disk = l.u32();
                let z_off = l.u64();
                let z = record(
                    source,
                    z_off,
                    ZIP64_EOCD_LEN,
                    ZIP64_EOCD_SIG,
                    "zip64 end of central directory",
                )?;
                let mut z = Fields { bytes: &z, pos: 4 };
                let _size = z.u64();
                let _made_by = z.u16();
                let _needed = z.u16();
                let _disk = z.u32();
                let _cd_disk = z.u32();
                let _entries_here = z.u64();
                count = z.u64();
                cd_size = z.u64();
                cd_offset = z.u64();
            }
        }

        if cd_size > limits.max_directory_bytes {
            return Err(ZipError::Limit {
                what: format!("the central directory at byte {cd_offset}"),
                needed: cd_size,
                limit: limits.max_directory_bytes,
            });
        }
        // Each central entry is at least 46 bytes: bound the count (and
        // every allocation below) by the size, before reading it.
        let max_entries = cd_size / CENTRAL_LEN as u64;
        if count > max_entries {
            return Err(ZipError::Malformed {
                what: format!("the end of central directory claims {count} entries, but the {cd_size}-byte central directory holds at most {max_entries}"),
                offset: eocd_pos,
            });
        }
        let cd = read_vec(source, cd_offset, cd_size, "central directory")?;
        // `count` <= cd_size / 46, and cd_size fits in memory: it was read.
        let count = count as usize;
        let mut entries = Vec::with_capacity(count);
        let mut by_name = HashMap::with_capacity(count);
        let mut pos = 0usize;
        for _ in 0..count {
            let at = cd_offset + pos as u64;
            let head = cd
                .get(pos..pos + CENTRAL_LEN)
                .ok_or_else(|| ZipError::Malformed {
                    what: "central directory entry extends past the end of the central directory"
                        .into(),
                    offset: at,
                })?;
            let mut c = Fields {
                bytes: head,
                pos: 0,
            };
            if c.u32() != CENTRAL_SIG {
                return Err(ZipError::Malformed {
                    what: "bad central directory entry signature".into(),
                    offset: at,
                });
            }
            let _made_by = c.u16();
            let _needed = c.u16();
            let flags = c.u16();
            let method = c.u16();
            let _time = c.u16();
            let _date = c.u16();
            let crc32 = c.u32();
            let mut compressed_size = u64::from(c.u32());
            let mut size = u64::from(c.u32());
            let name_len = usize::from(c.u16());
            let extra_len = usize::from(c.u16());
            let comment_len = usize::from(c.u16());
            let _disk_start = c.u16();
            let _internal = c.u16();
            let _external = c.u32();
            let mut local_offset = u64::from(c.u32());
            let var_start = pos + CENTRAL_LEN;
            let var_end = var_start + name_len + extra_len + comment_len;
            let var = cd
                .get(var_start..var_end)
                .ok_or_else(|| ZipError::Malformed {
                    what:
                        "central directory entry name extends past the end of the central directory"
                            .into(),
                    offset: at,
                })?;
            let name = std::str::from_utf8(&var[..name_len])
                .map_err(|_| ZipError::Malformed {
                    what: "entry name is not UTF-8".into(),
                    offset: at,
                })?
                .to_string();
            let extra = &var[name_len..name_len + extra_len];
            // The zip64 extra field holds, in this order, only the fields
            // whose 32-bit value is saturated.
            if let Some(z) = find_extra(extra, ZIP64_EXTRA_ID) {
                let mut z = Fields { bytes: z, pos: 0 };
                for v in [&mut size, &mut compressed_size, &mut local_offset] {
                    if *v == u64::from(u32::MAX) {
                        if z.left() < 8 {
                            return Err(ZipError::Malformed {
                                what: format!("entry {name:?}: zip64 extra field too short"),
                                offset: at,
                            });
                        }
                        *v = z.u64();
                    }
                }
            }
            pos = var_end;

            if flags & 1 != 0 {
                return Err(ZipError::Unsupported {
                    entry: name,
                    what: "encrypted".into(),
                });
            }
            let method = match method {
                0 => Method::Stored,
                8 => Method::Deflated,
                m => {
                    return Err(ZipError::Unsupported {
                        entry: name,
                        what: format!(
                            "compression method {m} (only stored and deflate are supported)"
                        ),
                    })
                }
            };
            if method == Method::Stored && compressed_size != size {
                return Err(ZipError::Malformed {
                    what: format!("stored entry {name:?} has compressed size {compressed_size} but size {size}"),
                    offset: at,
                });
            }

            // The local header repeats the name and has its own extra field;
            // the data follows it. Sizes come from the central directory
            // (the local copy may be zero or saturated).
            let what = format!("local header of {name:?}");
            let mut local = record(source, local_offset, LOCAL_LEN, LOCAL_SIG, &what)?;
            let mut l = Fields {
                bytes: &local,
                pos: 26,
            };
            let l_name_len = u64::from(l.u16());
            let l_extra_len = u64::from(l.u16());
            let name_at = local_offset + LOCAL_LEN as u64;
            local = read_vec(
                source,
                name_at,
                l_name_len,
                &format!("local header name of {name:?}"),
            )?;
            if local != name.as_bytes() {
                return Err(ZipError::Malformed {
                    what: format!(
                        "local header name {:?} differs from central directory name {name:?}",
                        String::from_utf8_lossy(&local)
                    ),
                    offset: local_offset,
                });
            }
            let data_offset = name_at + l_name_len + l_extra_len;
            check_range(
                data_offset,
                compressed_size,
                len,
                &format!("data of entry {name:?}"),
            )?;

            if by_name.insert(name.clone(), entries.len()).is_some() {
                return Err(ZipError::DuplicateEntry(name));
            }
            entries.push(Entry {
                name,
                method,
                data_offset,
                compressed_size,
                size,
                crc32,
            });
        }
        Ok(ZipIndex {
            entries,
            by_name,
            len,
        })
    }

    /// The members, in central-directory order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The member with this exact name.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    /// The length of the archive the index was read from.
    pub fn archive_len(&self) -> u64 {
        self.len
    }
}

/// The payload of the extra-field block with this id, if present.
pub(crate) fn find_extra(mut extra: &[u8], id: u16) -> Option<&[u8]> {
    while extra.len() >= 4 {
        let this = u16::from_le_bytes([extra[0], extra[1]]);
        let len = usize::from(u16::from_le_bytes([extra[2], extra[3]]));
        let body = extra.get(4..4 + len)?;
        if this == id {
            return Some(body);
        }
        extra = &extra[4 + len..];
    }
    None
}

/// The CRC-32 of a member's bytes, computed as they go by (in order, from
/// the first), for [`Entry::verify_crc`].
#[derive(Debug, Default)]
pub struct CrcCheck {
    crc: flate2::Crc,
}

impl CrcCheck {
    /// Nothing seen yet.
    pub fn new() -> CrcCheck {
        CrcCheck::default()
    }

    /// Takes in the next bytes of the member.
    pub fn update(&mut self, bytes: &[u8]) {
        self.crc.update(bytes);
    }
}

impl Entry {
    /// Checks the CRC-32 of the member's bytes, all taken in by `check`,
    /// against the one the central directory records, as Python's
    /// `zipfile` (and so `np.load`) does.
    ///
    /// # Errors
    /// [`ZipError::Crc`] when they differ, [`ZipError::Inflate`] when
    /// `check` has not taken in exactly the member's bytes.
    pub fn verify_crc(&self, check: &CrcCheck) -> Result<()> {
        // flate2 counts in 32 bits: the count is compared modulo 2^32.
        if u64::from(check.crc.amount()) != self.size & u64::from(u32::MAX) {
            return Err(self.inflate_err(format!(
                "its CRC-32 was computed over {} bytes, not its {}",
                check.crc.amount(),
                self.size
            )));
        }
        let actual = check.crc.sum();
        if actual != self.crc32 {
            return Err(ZipError::Crc {
                entry: self.name.clone(),
                expected: self.crc32,
                actual,
            });
        }
        Ok(())
    }

    /// Where a stored member's bytes lie in the archive.
    pub fn stored_range(&self) -> Option<Range<u64>> {
        (self.method == Method::Stored)
            .then(|| self.data_offset..self.data_offset + self.compressed_size)
    }

    /// The member's bytes in a buffer of their own: read when stored,
    /// inflated when deflated. Refuses a member of more than `max_len`
    /// bytes before allocating. `source` must be the archive the index
    /// was read from.
    ///
    /// # Errors
    ///
    /// [`ZipError::Limit`] when the member is over `max_len` bytes (or cannot be allocated),
    /// [`ZipError::Inflate`] when its deflate stream
    /// is corrupt or does not end at its size, [`ZipError::Read`] when a read
    /// fails.
    pub fn read(&self, source: &dyn ByteSource, max_len: u64) -> Result<Vec<u8>> {
        if self.size > max_len {
            return Err(ZipError::Limit {
                what: format!("entry {:?}", self.name),
                needed: self.size,
                limit: max_len,
            });
        }
        match self.method {
            Method::Stored => read_vec(
                source,
                self.data_offset,
                self.size,
                &format!("data of entry {:?}", self.name),
            ),
            Method::Deflated => {
                self.check_ratio()?;
                let size = usize::try_from(self.size)
                    .map_err(|_| self.inflate_err("too large for this machine"))?;
                let mut out = Vec::new();
                out.try_reserve_exact(size).map_err(|_| {
                    self.inflate_err(format!("cannot allocate {size} bytes to inflate it"))
                })?;
                self.inflate_prefix(source, self.size, |_, piece| out.extend_from_slice(piece))?;
                Ok(out)
            }
        }
    }

    fn inflate_err(&self, what: impl Into<String>) -> ZipError {
        ZipError::Inflate {
            entry: self.name.clone(),
            what: what.into(),
        }
    }

    /// Refuses a declared size that deflate cannot reach from the
    /// compressed size: a lie that must not drive an allocation.
    fn check_ratio(&self) -> Result<()> {
        let bound = self
            .compressed_size
            .saturating_mul(MAX_DEFLATE_RATIO)
            .saturating_add(64);
        if self.size > bound {
            return Err(self.inflate_err(format!(
                "declares {} bytes inflated from {} compressed bytes, more than deflate can produce",
                self.size, self.compressed_size
            )));
        }
        Ok(())
    }

    /// Inflates the first `end` bytes of a deflated member, in order,
    /// giving each piece to `sink` with its offset; the compressed bytes
    /// are read from `source` a piece at a time, nothing past `end` is
    /// inflated and nothing is kept here (`sink` keeps what it needs).
    /// When `end` is the declared size, the stream must also end there.
    /// `source` must be the archive the index was read from.
    ///
    /// # Errors
    ///
    /// [`ZipError::Inflate`] when the member is not deflated, declares more
    /// than deflate can produce, `end` is past its size, or the stream is
    /// corrupt or ends early; [`ZipError::Read`] when a read fails.
    pub fn inflate_prefix(
        &self,
        source: &dyn ByteSource,
        end: u64,
        mut sink: impl FnMut(u64, &[u8]),
    ) -> Result<()> {
        if self.method != Method::Deflated {
            return Err(self.inflate_err("is not deflated"));
        }
        self.check_ratio()?;
        if end > self.size {
            return Err(self.inflate_err(format!(
                "byte {end} is asked for, past its declared size of {}",
                self.size
            )));
        }
        check_range(
            self.data_offset,
            self.compressed_size,
            source.len(),
            &format!("data of entry {:?}", self.name),
        )?;
        let raw = SourceReader::new(source, self.data_offset, self.compressed_size);
        let mut decoder =
            flate2::bufread::DeflateDecoder::new(io::BufReader::with_capacity(INFLATE_READ, raw));
        let mut buf = vec![0u8; INFLATE_READ];
        let mut pos = 0u64;
        let failed =
            |decoder: &flate2::bufread::DeflateDecoder<io::BufReader<SourceReader<'_>>>,
             e: io::Error| {
                match decoder.get_ref().get_ref().failure() {
                    Some((at, source_error)) => {
                        ZipError::read(format!("data of entry {:?}", self.name), at, source_error)
                    }
                    None => self.inflate_err(format!("invalid deflate data: {e}")),
                }
            };
        while pos < end {
            let want = usize::try_from(end - pos).map_or(buf.len(), |n| n.min(buf.len()));
            let n = match decoder.read(&mut buf[..want]) {
                Ok(0) => {
                    return Err(self.inflate_err(format!(
                        "inflates to {pos} bytes, but the central directory declares {}",
                        self.size
                    )))
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(failed(&decoder, e)),
            };
            sink(pos, &buf[..n]);
            pos += n as u64;
        }
        if end == self.size {
            // Read one byte more to detect an overlong stream.
            match decoder.read(&mut buf[..1]) {
                Ok(0) => {}
                Ok(_) => {
                    return Err(self.inflate_err(format!(
                        "inflates to more than {} bytes, but the central directory declares {}",
                        self.size, self.size
                    )))
                }
                Err(e) => return Err(failed(&decoder, e)),
            }
        }
        Ok(())
    }
}

/// The compressed bytes of a member, read from the source with positional
/// reads; a failed read is kept aside so that it is reported as a read
/// error, not as invalid deflate data.
struct SourceReader<'a> {
    source: &'a dyn ByteSource,
    pos: u64,
    end: u64,
    failed: Option<(u64, io::Error)>,
}

impl<'a> SourceReader<'a> {
    fn new(source: &'a dyn ByteSource, offset: u64, len: u64) -> SourceReader<'a> {
        SourceReader {
            source,
            pos: offset,
            end: offset.saturating_add(len),
            failed: None,
        }
    }

    fn failure(&self) -> Option<(u64, &io::Error)> {
        self.failed.as_ref().map(|(at, e)| (*at, e))
    }
}

impl Read for SourceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let n = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
        if n == 0 {
            return Ok(0);
        }
        if let Err(e) = self.source.read_exact_at(self.pos, &mut buf[..n]) {
            let again = io::Error::new(e.kind(), e.to_string());
            self.failed = Some((self.pos, e));
            return Err(again);
        }
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_garbage_inputs_are_refused() {
        assert!(matches!(
            ZipIndex::parse(b""),
            Err(ZipError::NoEndOfCentralDirectory { .. })
        ));
        assert!(matches!(
            ZipIndex::parse(&[0u8; 100]),
            Err(ZipError::NoEndOfCentralDirectory { .. })
        ));
    }

    #[test]
    fn eocd_claiming_too_many_entries_is_refused() {
        // An empty central directory that claims 65535 entries.
        let mut eocd = Vec::new();
        eocd.extend_from_slice(&EOCD_SIG.to_le_bytes());
        eocd.extend_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        eocd.extend_from_slice(&0u32.to_le_bytes());
        eocd.extend_from_slice(&0u32.to_le_bytes());
        eocd.extend_from_slice(&0u16.to_le_bytes());
        let e = ZipIndex::parse(&eocd).unwrap_err();
        // Malformed covers every wrong structure; its text says which.
        assert!(
            matches!(&e, ZipError::Malformed { what, offset: 0 } if what.contains("65535 entries")),
            "{e}"
        );
    }

    #[test]
    fn a_central_directory_over_the_limit_is_refused_before_it_is_read() {
        let mut eocd = Vec::new();
        eocd.extend_from_slice(&EOCD_SIG.to_le_bytes());
        eocd.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
        eocd.extend_from_slice(&1000u32.to_le_bytes());
        eocd.extend_from_slice(&0u32.to_le_bytes());
        eocd.extend_from_slice(&0u16.to_le_bytes());
        let limits = ReadLimits {
            max_directory_bytes: 999,
        };
        let e = ZipIndex::read_with(&&eocd[..], &limits).unwrap_err();
        assert!(
            matches!(
                e,
                ZipError::Limit {
                    needed: 1000,
                    limit: 999,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn extra_fields_are_walked_safely() {
        assert_eq!(find_extra(&[1, 0, 2, 0, 9, 9], 1), Some(&[9u8, 9][..]));
        assert_eq!(find_extra(&[1, 0, 200, 0, 9, 9], 1), None);
        assert_eq!(
            find_extra(&[5, 0, 0, 0, 1, 0, 1, 0, 7], 1),
            Some(&[7u8][..])
        );
    }
}
