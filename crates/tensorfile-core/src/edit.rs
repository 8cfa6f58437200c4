//! Editing a file's metadata and tensor names, in place when only the
//! header changes.
//!
//! [`edit`] sets and removes metadata keys and renames tensors. The result
//! is always the file that `rewrite --align A` of the edited tensors and
//! metadata gives, `A` being the file's alignment (the largest of 4096, 64
//! and 8 that divides where its data starts). How it gets there:
//!
//! - **In place** when the file is already that canonical file (its header
//!   is byte for byte what the writer gives it), the edited header pads to
//!   exactly the old header's length, no tensor moves (a rename that keeps
//!   the tensors' order) and the header lies in the file's first 4096-byte
//!   page. Then the length field and the header, padded with spaces, are
//!   written with one positional write at offset 0 (`pwrite`), and synced
//!   (`fdatasync`). No data byte is touched.
//! - **Otherwise**, or when asked ([`Edit::rewrite`]), an atomic rewrite:
//!   a new file renamed over the old one ([what a save
//!   guarantees](crate::atomic)).
//!
//! What readers see of an in-place edit. The file keeps its inode, so this
//! is the one exception to "readers that have the old file keep its
//! bytes": a process that has it open or mapped sees the new header (and
//! the same data) from then on. One write of at most one page at offset 0
//! reaches the page cache as one copy into one page under that page's
//! lock: on Linux a `read`/`pread` that starts after the write returned
//! sees all of the new header, one that returned before it sees all of the
//! old. A read racing the copy itself (a window of about a microsecond) is
//! not excluded by the kernel, and a mapped reader reads the page while it
//! is being copied: it can see a mix. Which is why a header spanning more
//! than one page is never edited in place (two pages would be two copies,
//! and the window would be the whole write). Across a power loss the first
//! block is as durable as the device's atomic write unit makes it (4096
//! bytes on most current disks; 512 on some): the sync that follows makes
//! the edit durable, not the write atomic on the platter.
//!
//! The file is opened without following a symbolic link (`O_NOFOLLOW`):
//! a link is never edited in place; its file is rewritten atomically, as
//! every save follows a link. An exclusive `flock` is held while editing,
//! so that two edits do not interleave (readers take no lock and are not
//! delayed).

use std::fs::File;
use std::io;
use std::path::Path;

use crate::error::WriteError;
use crate::plan::Plan;
use crate::progress::Progress;
use crate::writer::{Align, Layout, TensorData, TensorSpec, WriteOptions};
use crate::{Dtype, Error, FileSource, FileTensor, Metadata, ReadOptions, Result, SafeTensors};

/// The largest first block (length field and header) edited in place: one
/// page, the unit the kernel copies a write into the page cache in.
pub const IN_PLACE_LIMIT: u64 = 4096;

/// What to change in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Edit {
    /// Metadata keys to set, with their values (applied after `unset`).
    pub set: Vec<(String, String)>,
    /// Metadata keys to remove; a key the file lacks is no error.
    pub unset: Vec<String>,
    /// Tensors to rename, old name to new, all at once (so two may swap).
    pub rename: Vec<(String, String)>,
    /// Rewrite the file atomically even when it could be edited in place.
    pub rewrite: bool,
    /// Sync the write (default `true`).
    pub sync: bool,
    /// The largest header to read or write (the reader's cap by default).
    pub max_header_len: u64,
}

crate::with_fields!(Edit {
    with_set => set: Vec<(String, String)>,
    with_unset => unset: Vec<String>,
    with_rename => rename: Vec<(String, String)>,
    with_rewrite => rewrite: bool,
    with_sync => sync: bool,
    with_max_header_len => max_header_len: u64,
});

impl Default for Edit {
    fn default() -> Edit {
        Edit {
            set: Vec::new(),
            unset: Vec::new(),
            rename: Vec::new(),
            rewrite: false,
            sync: true,
            max_header_len: crate::DEFAULT_MAX_HEADER_LEN,
        }
    }
}

/// What [`edit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Edited {
    /// Whether only the header was written, in place.
    pub in_place: bool,
    /// Why the file was rewritten instead, when it was.
    pub rewritten_because: Option<String>,
    /// The file's alignment (8, 64 or 4096), kept by the edit.
    pub align: u64,
    /// The new header's length N, padding included.
    pub header_len: u64,
    /// Bytes written: the first block in place, the whole file otherwise.
    pub bytes: u64,
    /// The number of tensors.
    pub tensors: usize,
}

/// Applies `edit` to the safetensors file at `path`: in place when only
/// the header changes and it fits (see the [module docs](self)), else an
/// atomic rewrite. Either way the file ends as `rewrite --align A` of the
/// edited tensors and metadata gives it.
///
/// # Errors
/// The file cannot be opened or is not a valid safetensors file (the
/// reader's errors); a renamed tensor does not exist ([`Error::NotFound`]);
/// the edit would make two tensors of one name or a header over the cap
/// ([`Error::Write`]); another edit holds the file's lock, or a write
/// fails ([`Error::Io`]). On any error the file is as it was.
pub fn edit(path: impl AsRef<Path>, edit: &Edit, progress: &dyn Progress) -> Result<Edited> {
    let path = path.as_ref();
    let options = ReadOptions::default().max_header_len(edit.max_header_len);
    let (file, link) = match open_no_follow(path) {
        Ok(file) => (file, false),
        Err(e) if is_link_error(&e) => (open_read(path)?, true),
        Err(e) => return Err(Error::io(path, e)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(Error::io(
                path,
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "another edit of this file is under way (it holds the file's lock)",
                ),
            ))
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(path, e)),
    }
    let source = FileSource::from_file(file.try_clone().map_err(|e| Error::io(path, e))?, path)
        .map_err(|e| Error::io(path, e))?;
    let input = SafeTensors::from_source(source, &options)?;
    let header = input.header();
    let first_block = header.data_start();
    let align = file_align(first_block);
    let write_options = WriteOptions::default()
        .with_align(align)
        .with_sync(edit.sync)
        .with_max_header_len(edit.max_header_len);

    let old_specs: Vec<TensorSpec> = header
        .tensors()
        .map(|t| TensorSpec::new(t.name, t.dtype, t.shape))
        .collect();
    let new_specs = renamed(path, &old_specs, &edit.rename)?;
    let old_metadata = header.metadata().cloned().unwrap_or_default();
    let mut metadata = old_metadata.clone();
    for key in &edit.unset {
        metadata.remove(key);
    }
    for (key, value) in &edit.set {
        metadata.insert(key.clone(), value.clone());
    }
    let new_layout =
        Layout::new(&new_specs, Some(&metadata), &write_options).map_err(|e| e.at(path))?;

    let why_not = if edit.rewrite {
        Some("a rewrite was asked for".to_string())
    } else if link {
        Some(
            "it is a symbolic link, which is never followed for an in-place write; \
             the file it leads to is rewritten"
                .to_string(),
        )
    } else {
        in_place_refusal(
            &file,
            path,
            &old_specs,
            &old_metadata,
            &new_layout,
            &write_options,
            first_block,
        )?
    };
    let tensors = new_specs.len();
    let header_len = new_layout.header_len();
    let align = align.bytes();
    if why_not.is_none() {
        write_first_block(&file, path, new_layout.header(), edit.sync)?;
        return Ok(Edited {
            in_place: true,
            rewritten_because: None,
            align,
            header_len,
            bytes: new_layout.header().len() as u64,
            tensors,
        });
    }
    let tensors_in: Vec<Renamed<'_>> = input
        .tensor_data()
        .zip(&new_specs)
        .map(|(inner, spec)| Renamed {
            inner,
            name: &spec.name,
        })
        .collect();
    // A rewrite copies every byte: through a plan, so the copies run in
    // parallel and `progress` hears of them.
    progress.total(new_layout.data_len());
    let mut plan = Plan::new(Some(metadata));
    for t in &tensors_in {
        plan.copy(t);
    }
    crate::atomic::save_plan(path, &plan, &write_options, progress)?;
    Ok(Edited {
        in_place: false,
        rewritten_because: why_not,
        align,
        header_len,
        bytes: new_layout.file_len(),
        tensors,
    })
}

/// Why the edit cannot be made in place, or `None` when it can.
fn in_place_refusal(
    file: &File,
    path: &Path,
    old_specs: &[TensorSpec],
    old_metadata: &Metadata,
    new_layout: &Layout,
    options: &WriteOptions,
    first_block: u64,
) -> Result<Option<String>> {
    let align = options.align.bytes();
    if first_block > IN_PLACE_LIMIT {
        return Ok(Some(format!(
            "its header ends at byte {first_block}, past the first {IN_PLACE_LIMIT}-byte page \
             (only a header within one page is written in place)"
        )));
    }
    let old_layout = Layout::new(old_specs, Some(old_metadata), options).map_err(|e| e.at(path))?;
    let mut old_block = vec![0u8; first_block as usize];
    read_exact_at(file, &mut old_block, 0).map_err(|e| Error::io(path, e))?;
    if old_layout.header() != old_block.as_slice() {
        return Ok(Some(format!(
            "it is not the file `rewrite --align {align}` writes (its header differs), \
             so an in-place edit would not give that file"
        )));
    }
    if new_layout.header().len() as u64 != first_block {
        return Ok(Some(format!(
            "the new header needs {} bytes padded to {align}, the old one has {}",
            new_layout.header_len(),
            first_block - 8
        )));
    }
    // Every tensor keeps its bytes' place: a rename that changes the
    // canonical order would move data.
    let mut old_offsets = vec![(0, 0); old_layout.len()];
    for slot in old_layout.slots() {
        old_offsets[slot.declared()] = slot.data_offsets();
    }
    for slot in new_layout.slots() {
        if old_offsets.get(slot.declared()) != Some(&slot.data_offsets()) {
            return Ok(Some(
                "a rename changes the tensors' order, which moves their data".to_string(),
            ));
        }
    }
    Ok(None)
}

/// The new names of `specs` after `renames` (applied all at once).
fn renamed(
    path: &Path,
    specs: &[TensorSpec],
    renames: &[(String, String)],
) -> Result<Vec<TensorSpec>> {
    let mut out = specs.to_vec();
    for (old, new) in renames {
        let Some(i) = specs.iter().position(|s| &s.name == old) else {
            return Err(Error::NotFound(old.clone()).at(path));
        };
        if out[i].name != specs[i].name {
            return Err(Error::from(WriteError::DuplicateName { name: old.clone() }).at(path));
        }
        out[i].name = new.clone();
    }
    Ok(out)
}

/// The largest alignment (4096, 64, 8) that divides where the data starts.
fn file_align(data_start: u64) -> Align {
    [Align::Bytes4096, Align::Bytes64]
        .into_iter()
        .find(|a| data_start.is_multiple_of(a.bytes()))
        .unwrap_or(Align::Canonical)
}

/// The one write of the edit: the first block, at offset 0, in a single
/// `pwrite` call (a short write, which a regular file gives only on an
/// error, is finished and still synced).
fn write_first_block(file: &File, path: &Path, block: &[u8], sync: bool) -> Result<()> {
    let mut done = 0;
    while done < block.len() {
        match write_at(file, &block[done..], done as u64) {
            Ok(0) => return Err(Error::io(path, io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    if sync {
        file.sync_data().map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// Opens `path` for reading and writing without following a link at its
/// last component, refusing anything but a regular file.
fn open_no_follow(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking: a FIFO is refused below instead of waited on.
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    #[cfg(not(unix))]
    if std::fs::symlink_metadata(path)?.file_type().is_symlink() {
        return Err(io::Error::other(LINK));
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file, so it is not edited",
        ));
    }
    Ok(file)
}

/// A link's file, opened to be read for a rewrite.
fn open_read(path: &Path) -> Result<File> {
    let (file, _) = crate::source::open_regular(path).map_err(|e| Error::io(path, e))?;
    Ok(file)
}

#[cfg(not(unix))]
const LINK: &str = "a symbolic link";

/// Whether opening failed because the path is a symbolic link.
fn is_link_error(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::ELOOP)
    }
    #[cfg(not(unix))]
    {
        e.to_string() == LINK
    }
}

#[cfg(unix)]
fn write_at(file: &File, bytes: &[u8], at: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::write_at(file, bytes, at)
}

#[cfg(windows)]
fn write_at(file: &File, bytes: &[u8], at: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_write(file, bytes, at)
}

fn read_exact_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            let n =
                std::os::windows::fs::FileExt::seek_read(file, &mut buf[done..], at + done as u64)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            done += n;
        }
        Ok(())
    }
}

/// A tensor of the file being edited, under its new name.
struct Renamed<'a> {
    inner: FileTensor<'a, FileSource>,
    name: &'a str,
}

impl TensorData for Renamed<'_> {
    fn name(&self) -> &str {
        self.name
    }
    fn dtype(&self) -> Dtype {
        self.inner.dtype()
    }
    fn shape(&self) -> &[u64] {
        self.inner.shape()
    }
    fn byte_len(&self) -> u64 {
        self.inner.info().nbytes()
    }
    fn bytes(&self) -> Option<&[u8]> {
        TensorData::<Error>::bytes(&self.inner)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        TensorData::<Error>::read_at(&self.inner, offset, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::{Align, PlacedWriter};

    /// A 4096-aligned file of one tensor, with `k` = `v`.
    fn aligned(path: &Path) {
        let specs = [TensorSpec::new("w", Dtype::U8, [4])];
        let metadata = Metadata::from([("k".to_string(), "v".to_string())]);
        let options = WriteOptions::default().with_align(Align::Bytes4096);
        let mut w = PlacedWriter::create(path, &specs, Some(&metadata), &options).unwrap();
        w.write("w", Dtype::U8, &[4], &[1, 2, 3, 4]).unwrap();
        w.commit().unwrap();
    }

    #[test]
    fn a_mapped_reader_sees_the_new_header_and_the_same_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.safetensors");
        aligned(&path);
        let file = File::open(&path).unwrap();
        // SAFETY: the test owns the file; nothing truncates it.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let set = vec![("k".to_string(), "w2".to_string())];
        let done = edit(&path, &Edit::default().with_set(set), &()).unwrap();
        assert!(done.in_place, "{done:?}");
        assert_eq!(&map[..], &std::fs::read(&path).unwrap()[..]);
        assert_eq!(&map[4096..], &[1, 2, 3, 4]);
        let opened = SafeTensors::open(&path).unwrap();
        assert_eq!(opened.metadata().unwrap()["k"], "w2");
    }

    #[test]
    fn a_second_edit_of_a_file_being_edited_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.safetensors");
        aligned(&path);
        let before = std::fs::read(&path).unwrap();
        let holder = File::open(&path).unwrap();
        holder.lock().unwrap();
        let set = vec![("k".to_string(), "x".to_string())];
        let e = edit(&path, &Edit::default().with_set(set.clone()), &()).unwrap_err();
        assert!(e.to_string().contains("another edit"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
        holder.unlock().unwrap();
        assert!(
            edit(&path, &Edit::default().with_set(set), &())
                .unwrap()
                .in_place
        );
    }
}
