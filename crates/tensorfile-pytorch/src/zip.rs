//! A minimal, strict ZIP reader over an in-memory (usually memory-mapped) archive.
//!
//! Hand-written rather than using the `zip` crate: some current versions of
//! that crate fail to open ordinary `torch.save` files and reject records
//! whose CRC is 0, which torch itself loads. Checkpoints only need the
//! central directory, local headers, ZIP64 records, and the `stored` and
//! `deflate` methods, so a small reader that we can bounds-check line by line
//! is the safer choice.
//!
//! Stored entries are returned as borrowed slices of the input (zero copy);
//! deflated entries are inflated with `flate2` into an owned buffer whose size
//! is bounded by the declared uncompressed size and by the input size.
//!
//! CRCs are not verified: torch does not verify them either when it
//! memory-maps a checkpoint, and some tools write 0.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;

/// Why an archive or one of its entries cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZipError {
    /// No end-of-central-directory record: not a zip file, or truncated.
    #[error("no zip central directory: no end-of-central-directory record in the last {searched} bytes (the file is truncated, or not a zip file)")]
    NoEndOfCentralDirectory {
        /// How many bytes from the end were searched.
        searched: u64,
    },
    /// A structure lies (partly) outside the input.
    #[error("zip: {what} at byte {offset} ({len} bytes) extends past the end of the {file_len}-byte file")]
    OutOfBounds {
        /// Which structure.
        what: String,
        /// Where it starts.
        offset: u64,
        /// Its length.
        len: u64,
        /// Length of the input.
        file_len: u64,
    },
    /// A structure does not have the expected signature or content.
    #[error("zip: {what} at byte {offset}")]
    Malformed {
        /// What is wrong.
        what: String,
        /// Where.
        offset: u64,
    },
    /// Two entries share one name.
    #[error("zip: duplicate entry name {0:?} (ambiguous which one a reader would pick)")]
    DuplicateEntry(String),
    /// An entry uses a feature this reader does not support.
    #[error("zip: entry {entry:?}: {what}")]
    Unsupported {
        /// The entry name.
        entry: String,
        /// What is unsupported.
        what: String,
    },
    /// A deflated entry does not inflate to its declared size.
    #[error("zip: entry {entry:?}: {what}")]
    Inflate {
        /// The entry name.
        entry: String,
        /// What went wrong.
        what: String,
    },
}

type Result<T> = std::result::Result<T, ZipError>;

const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD_LEN: usize = 22;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const ZIP64_LOCATOR_LEN: usize = 20;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_EOCD_LEN: usize = 56;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const CENTRAL_LEN: usize = 46;
const LOCAL_SIG: u32 = 0x0403_4b50;
const LOCAL_LEN: usize = 30;
const ZIP64_EXTRA_ID: u16 = 0x0001;

/// The best ratio deflate can reach is about 1032:1; a declared size above
/// that is a lie and must not drive an allocation.
const MAX_DEFLATE_RATIO: u64 = 1032;

/// How an entry's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Stored as is: readable in place.
    Stored,
    /// Raw deflate.
    Deflated,
}

/// One entry of the central directory, with its data located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name (path inside the archive).
    pub name: String,
    /// Compression method.
    pub method: Method,
    /// Byte offset of the entry's data in the archive.
    pub data_offset: u64,
    /// Length of the data as stored.
    pub compressed_size: u64,
    /// Length once inflated (equal to `compressed_size` for stored entries).
    pub size: u64,
}

/// The index of a zip archive: its entries, in central-directory order.
#[derive(Debug, Clone)]
pub struct ZipIndex {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
}

/// Little-endian field reader over a bounds-checked slice of the input.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn u16(&mut self) -> u16 {
        let v = self
            .bytes
            .get(self.pos..self.pos + 2)
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        self.pos += 2;
        v
    }
    fn u32(&mut self) -> u32 {
        let v = self
            .bytes
            .get(self.pos..self.pos + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        self.pos += 4;
        v
    }
    fn u64(&mut self) -> u64 {
        let v = self.bytes.get(self.pos..self.pos + 8).map_or(0, |b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        });
        self.pos += 8;
        v
    }
}

/// `len` bytes at `offset`, or an error naming `what`.
fn slice<'a>(data: &'a [u8], offset: u64, len: u64, what: &str) -> Result<&'a [u8]> {
    let out_of_bounds = || ZipError::OutOfBounds {
        what: what.to_string(),
        offset,
        len,
        file_len: data.len() as u64,
    };
    let end = offset.checked_add(len).ok_or_else(out_of_bounds)?;
    let (start, end) = (
        usize::try_from(offset).map_err(|_| out_of_bounds())?,
        usize::try_from(end).map_err(|_| out_of_bounds())?,
    );
    data.get(start..end).ok_or_else(out_of_bounds)
}

/// A fixed-size record with its signature checked.
fn record<'a>(data: &'a [u8], offset: u64, len: usize, sig: u32, what: &str) -> Result<Fields<'a>> {
    let bytes = slice(data, offset, len as u64, what)?;
    let mut f = Fields { bytes, pos: 0 };
    if f.u32() != sig {
        return Err(ZipError::Malformed {
            what: format!("bad {what} signature"),
            offset,
        });
    }
    Ok(f)
}

/// Finds the end-of-central-directory record, searching backwards over at
/// most the 22-byte record plus the largest possible comment.
fn find_eocd(data: &[u8]) -> Result<usize> {
    let searched = data.len().min(EOCD_LEN + u16::MAX as usize);
    let not_found = ZipError::NoEndOfCentralDirectory {
        searched: searched as u64,
    };
    let last = data.len().checked_sub(EOCD_LEN).ok_or(not_found.clone())?;
    let first = data.len() - searched;
    (first..=last)
        .rev()
        .find(|&pos| data[pos..pos + 4] == EOCD_SIG.to_le_bytes())
        .ok_or(not_found)
}

impl ZipIndex {
    /// Reads the central directory of `data` and locates every entry's data.
    ///
    /// Rejects duplicate names, encrypted entries, methods other than stored
    /// and deflate, and any record that does not fit in `data`.
    pub fn parse(data: &[u8]) -> Result<ZipIndex> {
        let eocd_pos = find_eocd(data)?;
        let mut f = record(
            data,
            eocd_pos as u64,
            EOCD_LEN,
            EOCD_SIG,
            "end of central directory",
        )?;
        let _disk = f.u16();
        let _cd_disk = f.u16();
        let _entries_here = f.u16();
        let mut count = u64::from(f.u16());
        let mut cd_size = u64::from(f.u32());
        let mut cd_offset = u64::from(f.u32());

        // ZIP64: the locator sits right before the classic record.
        if let Some(loc_pos) = eocd_pos.checked_sub(ZIP64_LOCATOR_LEN) {
            let loc = &data[loc_pos..loc_pos + 4];
            if loc == ZIP64_LOCATOR_SIG.to_le_bytes() {
                let mut l = record(
                    data,
                    loc_pos as u64,
                    ZIP64_LOCATOR_LEN,
                    ZIP64_LOCATOR_SIG,
                    "zip64 locator",
                )?;
                let _disk = l.u32();
                let z_off = l.u64();
                let mut z = record(
                    data,
                    z_off,
                    ZIP64_EOCD_LEN,
                    ZIP64_EOCD_SIG,
                    "zip64 end of central directory",
                )?;
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

        let cd = slice(data, cd_offset, cd_size, "central directory")?;
        // Each entry is at least 46 bytes: bound the allocation by the size.
        let max_entries = (cd.len() / CENTRAL_LEN) as u64;
        if count > max_entries {
            return Err(ZipError::Malformed {
                what: format!("the end of central directory claims {count} entries, but the {cd_size}-byte central directory holds at most {max_entries}"),
                offset: eocd_pos as u64,
            });
        }
        let mut entries = Vec::with_capacity(count as usize);
        let mut by_name = HashMap::with_capacity(count as usize);
        let mut pos = 0usize;
        for _ in 0..count {
            let at = cd_offset + pos as u64;
            let mut c = record(
                cd,
                pos as u64,
                CENTRAL_LEN,
                CENTRAL_SIG,
                "central directory entry",
            )
            .map_err(|e| rebase(e, cd_offset))?;
            let _made_by = c.u16();
            let _needed = c.u16();
            let flags = c.u16();
            let method = c.u16();
            let _time = c.u16();
            let _date = c.u16();
            let _crc = c.u32();
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
            let var = slice(
                cd,
                var_start as u64,
                (name_len + extra_len + comment_len) as u64,
                "central directory entry name",
            )
            .map_err(|e| rebase(e, cd_offset))?;
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
                let need = |v: &mut u64, z: &mut Fields| -> Result<()> {
                    if *v == u64::from(u32::MAX) {
                        if z.pos + 8 > z.bytes.len() {
                            return Err(ZipError::Malformed {
                                what: format!("entry {name:?}: zip64 extra field too short"),
                                offset: at,
                            });
                        }
                        *v = z.u64();
                    }
                    Ok(())
                };
                need(&mut size, &mut z)?;
                need(&mut compressed_size, &mut z)?;
                need(&mut local_offset, &mut z)?;
            }
            pos = var_start + name_len + extra_len + comment_len;

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
            // (the local copy may be zero when a data descriptor is used).
            let mut l = record(
                data,
                local_offset,
                LOCAL_LEN,
                LOCAL_SIG,
                &format!("local header of {name:?}"),
            )?;
            l.pos = 26;
            let l_name_len = u64::from(l.u16());
            let l_extra_len = u64::from(l.u16());
            let l_name = slice(
                data,
                local_offset + LOCAL_LEN as u64,
                l_name_len,
                &format!("local header name of {name:?}"),
            )?;
            if l_name != name.as_bytes() {
                return Err(ZipError::Malformed {
                    what: format!(
                        "local header name {:?} differs from central directory name {name:?}",
                        String::from_utf8_lossy(l_name)
                    ),
                    offset: local_offset,
                });
            }
            let data_offset = local_offset + LOCAL_LEN as u64 + l_name_len + l_extra_len;
            slice(
                data,
                data_offset,
                compressed_size,
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
            });
        }
        Ok(ZipIndex { entries, by_name })
    }

    /// The entries, in central-directory order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry with this exact name.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }
}

/// Offsets inside the central directory slice, rebased onto the file.
fn rebase(e: ZipError, base: u64) -> ZipError {
    match e {
        ZipError::Malformed { what, offset } => ZipError::Malformed {
            what,
            offset: offset + base,
        },
        ZipError::OutOfBounds {
            what, offset, len, ..
        } => ZipError::Malformed {
            what: format!("{what} ({len} bytes) extends past the end of the central directory"),
            offset: offset + base,
        },
        e => e,
    }
}

/// The payload of the extra-field block with this id, if present.
fn find_extra(mut extra: &[u8], id: u16) -> Option<&[u8]> {
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

impl Entry {
    /// The entry's bytes: borrowed from `data` when stored, inflated into an
    /// owned buffer when deflated. `data` must be the archive the index was
    /// parsed from.
    pub fn read<'a>(&self, data: &'a [u8]) -> Result<Cow<'a, [u8]>> {
        let raw = slice(
            data,
            self.data_offset,
            self.compressed_size,
            &format!("data of entry {:?}", self.name),
        )?;
        match self.method {
            Method::Stored => Ok(Cow::Borrowed(raw)),
            Method::Deflated => self.inflate(raw).map(Cow::Owned),
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
            return Err(ZipError::Inflate {
                entry: self.name.clone(),
                what: format!(
                    "declares {} bytes inflated from {} compressed bytes, more than deflate can produce",
                    self.size, self.compressed_size
                ),
            });
        }
        Ok(())
    }

    /// Inflates the first `end` bytes of a deflated entry, in order, giving
    /// each piece to `sink` with its offset; nothing past `end` is inflated
    /// and nothing is kept here (`sink` keeps what it needs). When `end` is
    /// the declared size, the stream must also end there. `data` must be
    /// the archive the index was parsed from.
    pub fn inflate_prefix(
        &self,
        data: &[u8],
        end: u64,
        mut sink: impl FnMut(u64, &[u8]),
    ) -> Result<()> {
        let err = |what: String| ZipError::Inflate {
            entry: self.name.clone(),
            what,
        };
        if self.method != Method::Deflated {
            return Err(err("is not deflated".into()));
        }
        self.check_ratio()?;
        if end > self.size {
            return Err(err(format!(
                "byte {end} is asked for, past its declared size of {}",
                self.size
            )));
        }
        let raw = slice(
            data,
            self.data_offset,
            self.compressed_size,
            &format!("data of entry {:?}", self.name),
        )?;
        let mut decoder = flate2::read::DeflateDecoder::new(raw);
        let mut buf = vec![0u8; 256 << 10];
        let mut pos = 0u64;
        while pos < end {
            let want = usize::try_from(end - pos).map_or(buf.len(), |n| n.min(buf.len()));
            let n = match decoder.read(&mut buf[..want]) {
                Ok(0) => {
                    return Err(err(format!(
                        "inflates to {pos} bytes, but the central directory declares {}",
                        self.size
                    )))
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(err(format!("invalid deflate data: {e}"))),
            };
            sink(pos, &buf[..n]);
            pos += n as u64;
        }
        if end == self.size {
            // Read one byte more to detect an overlong stream.
            match decoder.read(&mut buf[..1]) {
                Ok(0) => {}
                Ok(_) => {
                    return Err(err(format!(
                        "inflates to more than {} bytes, but the central directory declares {}",
                        self.size, self.size
                    )))
                }
                Err(e) => return Err(err(format!("invalid deflate data: {e}"))),
            }
        }
        Ok(())
    }

    fn inflate(&self, raw: &[u8]) -> Result<Vec<u8>> {
        let err = |what: String| ZipError::Inflate {
            entry: self.name.clone(),
            what,
        };
        self.check_ratio()?;
        let size =
            usize::try_from(self.size).map_err(|_| err("too large for this machine".into()))?;
        let mut out = Vec::new();
        out.try_reserve_exact(size)
            .map_err(|_| err(format!("cannot allocate {size} bytes to inflate it")))?;
        // Read one byte more than declared to detect an overlong stream.
        let read = flate2::read::DeflateDecoder::new(raw)
            .take(self.size + 1)
            .read_to_end(&mut out)
            .map_err(|e| err(format!("invalid deflate data: {e}")))?;
        if read as u64 != self.size {
            return Err(err(format!(
                "inflates to {}{read} bytes, but the central directory declares {}",
                if read as u64 > self.size {
                    "more than "
                } else {
                    ""
                },
                self.size
            )));
        }
        Ok(out)
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
        assert!(e.to_string().contains("65535 entries"), "{e}");
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
