//! The writer: members stored or deflated, laid out as numpy's `np.savez`
//! and `np.savez_compressed` write them (Python's `zipfile` with
//! `force_zip64=True`).
//!
//! Each local header has version 45, no data descriptor, `0xFFFFFFFF` in
//! both size fields and a 16-byte ZIP64 extra field (uncompressed, then
//! compressed size), patched in place with the CRC once the member is
//! written: the output must be seekable. The central directory has the
//! real sizes and a ZIP64 extra field only where Python's `zipfile` puts
//! one (a size or an offset past 2^31 - 1); the ZIP64 end records follow
//! the same rule (more than 65535 members, or the directory past 2^31 - 1).
//! Times are 1980-01-01 00:00:00, so that the output depends on the
//! members only; names that are not ASCII get the UTF-8 flag (0x800).
//! Deflated members are zlib's raw deflate at level 6, window 15, as
//! Python's `zipfile` calls it (`zlib.compressobj(-1, DEFLATED, -15)`):
//! flate2 runs on C zlib, so they are `np.savez_compressed`'s bytes too.

use std::collections::HashSet;
use std::io::{self, Seek, SeekFrom, Write};

use crate::error::{Result, ZipError};
use crate::format::{
    CENTRAL_SIG, EOCD_SIG, LOCAL_SIG, ZIP64_EOCD_SIG, ZIP64_EXTRA_ID, ZIP64_LOCATOR_SIG,
};
use crate::read::Method;

/// Python's `zipfile.ZIP64_LIMIT`: sizes and offsets above it need ZIP64.
const ZIP64_LIMIT: u64 = (1 << 31) - 1;
/// Python's `zipfile.ZIP_FILECOUNT_LIMIT`.
const FILECOUNT_LIMIT: usize = 0xFFFF;
/// Version needed and made by: 4.5 (ZIP64).
const VERSION: u16 = 45;
/// Made by Unix (3), as Python on Unix writes.
const MADE_BY: u16 = (3 << 8) | VERSION;
/// MS-DOS date of 1980-01-01, time 00:00:00.
const DOS_DATE: u16 = (1 << 5) | 1;
/// Permissions `0o600` in the high half, as `ZipFile.open(name, "w")` sets.
const EXTERNAL_ATTR: u32 = 0o600 << 16;
/// Flag bit 11: the name is UTF-8.
const UTF8_FLAG: u16 = 0x800;

/// A member already written: what the central directory needs.
struct Written {
    name: String,
    flags: u16,
    method: Method,
    crc32: u32,
    size: u64,
    compressed_size: u64,
    header_offset: u64,
}

/// Writes a zip archive member by member (see the module documentation).
///
/// ```
/// use std::io::{Cursor, Write};
/// use tensorfile_zip::{Method, ZipIndex, ZipWriter};
/// let mut zip = ZipWriter::new(Cursor::new(Vec::new()))?;
/// let mut member = zip.start("a.npy", Method::Stored)?;
/// member.write_all(b"hello")?;
/// member.finish()?;
/// let bytes = zip.finish()?.into_inner();
/// let index = ZipIndex::parse(&bytes)?;
/// assert_eq!(index.get("a.npy").unwrap().read(&&bytes[..], 5)?, b"hello");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ZipWriter<W: Write + Seek> {
    out: W,
    pos: u64,
    written: Vec<Written>,
    names: HashSet<String>,
}

impl<W: Write + Seek> std::fmt::Debug for ZipWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZipWriter")
            .field("pos", &self.pos)
            .field("members", &self.written.len())
            .finish_non_exhaustive()
    }
}

fn write_err(what: &str, e: &io::Error) -> ZipError {
    ZipError::Write {
        what: what.to_string(),
        message: e.to_string(),
    }
}

impl<W: Write + Seek> ZipWriter<W> {
    /// An archive written to `out` from its current position.
    ///
    /// # Errors
    /// The position cannot be read.
    pub fn new(mut out: W) -> Result<ZipWriter<W>> {
        let pos = out
            .stream_position()
            .map_err(|e| write_err("the archive's start", &e))?;
        Ok(ZipWriter {
            out,
            pos,
            written: Vec::new(),
            names: HashSet::new(),
        })
    }

    /// Starts a member: write its bytes to the returned [`Member`], then
    /// call [`Member::finish`].
    ///
    /// # Errors
    /// A name used twice or longer than 65535 bytes, or a failed write.
    pub fn start(&mut self, name: &str, method: Method) -> Result<Member<'_, W>> {
        let refuse = |message: &str| ZipError::Write {
            what: format!("member {name:?}"),
            message: message.to_string(),
        };
        let name_len =
            u16::try_from(name.len()).map_err(|_| refuse("name longer than 65535 bytes"))?;
        if !self.names.insert(name.to_string()) {
            return Err(refuse("a member of that name is already written"));
        }
        let flags = if name.is_ascii() { 0 } else { UTF8_FLAG };
        let mut h = Vec::with_capacity(30 + name.len() + 20);
        h.extend_from_slice(&LOCAL_SIG.to_le_bytes());
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(&method_code(method).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes());
        h.extend_from_slice(&DOS_DATE.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes()); // CRC, patched
        h.extend_from_slice(&u32::MAX.to_le_bytes());
        h.extend_from_slice(&u32::MAX.to_le_bytes());
        h.extend_from_slice(&name_len.to_le_bytes());
        h.extend_from_slice(&20u16.to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(&ZIP64_EXTRA_ID.to_le_bytes());
        h.extend_from_slice(&16u16.to_le_bytes());
        h.extend_from_slice(&[0u8; 16]); // sizes, patched
        let what = format!("the local header of {name:?}");
        self.out.write_all(&h).map_err(|e| write_err(&what, &e))?;
        let header_offset = self.pos;
        self.pos = self
            .pos
            .checked_add(h.len() as u64)
            .ok_or_else(|| refuse("the archive would pass 2^64 bytes"))?;
        let body = match method {
            Method::Stored => Body::Stored(Counting {
                out: &mut self.out,
                count: 0,
            }),
            Method::Deflated => Body::Deflated(flate2::write::DeflateEncoder::new(
                Counting {
                    out: &mut self.out,
                    count: 0,
                },
                flate2::Compression::new(6),
            )),
        };
        Ok(Member {
            body,
            crc: flate2::Crc::new(),
            size: 0,
            record: Written {
                name: name.to_string(),
                flags,
                method,
                crc32: 0,
                size: 0,
                compressed_size: 0,
                header_offset,
            },
            written: &mut self.written,
            pos: &mut self.pos,
        })
    }

    /// Writes the central directory and the end records; returns the
    /// output.
    ///
    /// # Errors
    /// A failed write.
    pub fn finish(mut self) -> Result<W> {
        let cd_offset = self.pos;
        let mut cd = Vec::new();
        for w in &self.written {
            let mut extra: Vec<u64> = Vec::new();
            let (mut size, mut compressed) = (w.size, w.compressed_size);
            if w.size > ZIP64_LIMIT || w.compressed_size > ZIP64_LIMIT {
                extra.extend([w.size, w.compressed_size]);
                size = u64::from(u32::MAX);
                compressed = u64::from(u32::MAX);
            }
            let mut offset = w.header_offset;
            if w.header_offset > ZIP64_LIMIT {
                extra.push(w.header_offset);
                offset = u64::from(u32::MAX);
            }
            let extra_len = if extra.is_empty() {
                0
            } else {
                4 + 8 * extra.len()
            };
            cd.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
            cd.extend_from_slice(&MADE_BY.to_le_bytes());
            cd.extend_from_slice(&VERSION.to_le_bytes());
            cd.extend_from_slice(&w.flags.to_le_bytes());
            cd.extend_from_slice(&method_code(w.method).to_le_bytes());
            cd.extend_from_slice(&0u16.to_le_bytes());
            cd.extend_from_slice(&DOS_DATE.to_le_bytes());
            cd.extend_from_slice(&w.crc32.to_le_bytes());
            // Each is at most u32::MAX here (saturated above ZIP64_LIMIT).
            cd.extend_from_slice(&(compressed as u32).to_le_bytes());
            cd.extend_from_slice(&(size as u32).to_le_bytes());
            cd.extend_from_slice(&(w.name.len() as u16).to_le_bytes());
            cd.extend_from_slice(&(extra_len as u16).to_le_bytes());
            cd.extend_from_slice(&0u16.to_le_bytes()); // comment
            cd.extend_from_slice(&0u16.to_le_bytes()); // disk
            cd.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
            cd.extend_from_slice(&EXTERNAL_ATTR.to_le_bytes());
            cd.extend_from_slice(&(offset as u32).to_le_bytes());
            cd.extend_from_slice(w.name.as_bytes());
            if !extra.is_empty() {
                cd.extend_from_slice(&ZIP64_EXTRA_ID.to_le_bytes());
                cd.extend_from_slice(&((8 * extra.len()) as u16).to_le_bytes());
                for v in extra {
                    cd.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        let count = self.written.len();
        let cd_size = cd.len() as u64;
        let mut end = Vec::new();
        if count > FILECOUNT_LIMIT || cd_offset > ZIP64_LIMIT || cd_size > ZIP64_LIMIT {
            let eocd64_offset = cd_offset + cd_size;
            end.extend_from_slice(&ZIP64_EOCD_SIG.to_le_bytes());
            end.extend_from_slice(&44u64.to_le_bytes());
            end.extend_from_slice(&VERSION.to_le_bytes());
            end.extend_from_slice(&VERSION.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&(count as u64).to_le_bytes());
            end.extend_from_slice(&(count as u64).to_le_bytes());
            end.extend_from_slice(&cd_size.to_le_bytes());
            end.extend_from_slice(&cd_offset.to_le_bytes());
            end.extend_from_slice(&ZIP64_LOCATOR_SIG.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&eocd64_offset.to_le_bytes());
            end.extend_from_slice(&1u32.to_le_bytes());
        }
        let count16 = count.min(FILECOUNT_LIMIT) as u16;
        end.extend_from_slice(&EOCD_SIG.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        end.extend_from_slice(&count16.to_le_bytes());
        end.extend_from_slice(&count16.to_le_bytes());
        end.extend_from_slice(&(cd_size.min(u64::from(u32::MAX)) as u32).to_le_bytes());
        end.extend_from_slice(&(cd_offset.min(u64::from(u32::MAX)) as u32).to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        self.out
            .write_all(&cd)
            .and_then(|()| self.out.write_all(&end))
            .and_then(|()| self.out.flush())
            .map_err(|e| write_err("the central directory", &e))?;
        Ok(self.out)
    }
}

fn method_code(method: Method) -> u16 {
    match method {
        Method::Stored => 0,
        Method::Deflated => 8,
    }
}

/// Counts the bytes going to the output.
struct Counting<'a, W: Write> {
    out: &'a mut W,
    count: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

enum Body<'a, W: Write> {
    Stored(Counting<'a, W>),
    Deflated(flate2::write::DeflateEncoder<Counting<'a, W>>),
}

/// One member being written: takes its uncompressed bytes through
/// [`Write`]; [`Member::finish`] completes it. A member dropped without
/// `finish` leaves the archive incomplete (its header unpatched).
pub struct Member<'z, W: Write + Seek> {
    body: Body<'z, W>,
    crc: flate2::Crc,
    size: u64,
    record: Written,
    written: &'z mut Vec<Written>,
    pos: &'z mut u64,
}

impl<W: Write + Seek> std::fmt::Debug for Member<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("name", &self.record.name)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl<W: Write + Seek> Write for Member<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.body {
            Body::Stored(w) => w.write(buf)?,
            Body::Deflated(w) => w.write(buf)?,
        };
        self.crc.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.body {
            Body::Stored(w) => w.flush(),
            Body::Deflated(w) => w.flush(),
        }
    }
}

impl<W: Write + Seek> Member<'_, W> {
    /// Completes the member: ends the deflate stream, and writes its CRC
    /// and sizes into its local header.
    ///
    /// # Errors
    /// A failed write or seek.
    pub fn finish(self) -> Result<()> {
        let Member {
            body,
            crc,
            size,
            mut record,
            written,
            pos,
        } = self;
        let what = format!("member {:?}", record.name);
        let counting = match body {
            Body::Stored(w) => w,
            Body::Deflated(w) => w.finish().map_err(|e| write_err(&what, &e))?,
        };
        let compressed = counting.count;
        let out = counting.out;
        record.crc32 = crc.sum();
        record.size = size;
        record.compressed_size = compressed;
        let header = record.header_offset;
        let name_len = record.name.len() as u64;
        let end = (*pos)
            .checked_add(compressed)
            .ok_or_else(|| ZipError::Write {
                what: what.clone(),
                message: "the archive would pass 2^64 bytes".into(),
            })?;
        let patch = |out: &mut W| -> io::Result<()> {
            out.seek(SeekFrom::Start(header + 14))?;
            out.write_all(&record.crc32.to_le_bytes())?;
            out.seek(SeekFrom::Start(header + 30 + name_len + 4))?;
            out.write_all(&size.to_le_bytes())?;
            out.write_all(&compressed.to_le_bytes())?;
            out.seek(SeekFrom::Start(end))?;
            Ok(())
        };
        patch(out).map_err(|e| write_err(&what, &e))?;
        *pos = end;
        written.push(record);
        Ok(())
    }
}
