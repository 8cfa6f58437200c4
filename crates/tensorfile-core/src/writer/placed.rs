//! [`PlacedWriter`]: a file declared first, then its tensors in any order,
//! each written at its place as it comes; and [`Spool`], for tensors that
//! come without a declaration.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use super::{plan_tensors, Layout, TensorData, TensorRef, TensorSpec, WriteOptions};
use crate::atomic::AtomicFile;
use crate::error::WriteError;
use crate::{Dtype, Error, Metadata, Result};

/// A canonical file being saved to a path, atomically, from tensors given
/// in any order.
///
/// Every tensor is declared up front (name, dtype, shape), which fixes the
/// canonical layout: the header is written at once, and each tensor's
/// bytes go to their place with positional writes as they are given, so
/// that the caller can drop each tensor once written (memory: one tensor).
/// A tensor not declared, of another dtype or shape, or given twice is
/// refused. [`PlacedWriter::commit`] checks every tensor was given and puts
/// the file in place, atomically ([what a save
/// guarantees](crate::atomic)); dropped without a commit (an error, an
/// exception above), nothing is left.
///
/// ```
/// use tensorfile_core::writer::PlacedWriter;
/// use tensorfile_core::{Dtype, TensorSpec, WriteOptions};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("out.safetensors");
/// let specs = [TensorSpec::new("b", Dtype::U8, [2]), TensorSpec::new("a", Dtype::U8, [1])];
/// let mut w = PlacedWriter::create(&path, &specs, None, &WriteOptions::default())?;
/// w.write("b", Dtype::U8, &[2], &[7, 8])?;
/// w.write("a", Dtype::U8, &[1], &[6])?;
/// w.commit()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PlacedWriter {
    file: AtomicFile,
    layout: Layout,
    /// Name to index in file order: made at the first lookup by name (a
    /// dict written whole with [`PlacedWriter::write_all`] needs none).
    index: Option<HashMap<String, usize>>,
    written: Vec<bool>,
    sync: bool,
}

impl PlacedWriter {
    /// Plans the file for `specs` and `metadata` and starts it at `path`:
    /// a temporary beside it (see [`AtomicFile`]) holding the header, its
    /// full length reserved.
    ///
    /// # Errors
    /// The declarations cannot be planned ([`Error::Write`]: duplicate or
    /// reserved names, sizes over the caps), or the temporary cannot be
    /// created, sized or written ([`Error::Io`], [`Error::Output`]).
    pub fn create(
        path: impl AsRef<Path>,
        specs: &[TensorSpec],
        metadata: Option<&Metadata>,
        options: &WriteOptions,
    ) -> Result<PlacedWriter> {
        let layout = Layout::new(specs, metadata, options)?;
        PlacedWriter::start(path.as_ref(), layout, options)
    }

    /// [`PlacedWriter::create`] declaring `tensors` themselves (their
    /// names, dtypes and shapes, borrowed: nothing is copied), checking
    /// each one's byte length: the way to save a whole dict, followed by
    /// [`PlacedWriter::write_all`] of the same tensors.
    ///
    /// # Errors
    /// As [`PlacedWriter::create`], and [`WriteError::LengthMismatch`]
    /// for a tensor whose bytes do not match its dtype and shape.
    pub fn declaring<T: TensorData>(
        path: impl AsRef<Path>,
        tensors: &[T],
        metadata: Option<&Metadata>,
        options: &WriteOptions,
    ) -> Result<PlacedWriter> {
        let layout = plan_tensors(tensors, metadata, options)?;
        PlacedWriter::start(path.as_ref(), layout, options)
    }

    fn start(path: &Path, layout: Layout, options: &WriteOptions) -> Result<PlacedWriter> {
        let file = AtomicFile::create(path)?;
        file.write_all_at(layout.header(), 0)?;
        file.set_len(layout.file_len())?;
        file.reserve(layout.file_len())?;
        Ok(PlacedWriter {
            written: vec![false; layout.len()],
            file,
            layout,
            index: None,
            sync: options.sync,
        })
    }

    /// The plan being written.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The path the file is saved to, as given.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Writes the tensor `name`, of `dtype` and `shape`, whose bytes are
    /// `bytes`, at its place.
    ///
    /// # Errors
    /// [`Error::Write`] when `name` was not declared
    /// ([`WriteError::Undeclared`]), has another dtype or shape
    /// ([`WriteError::NotAsDeclared`]) or byte length
    /// ([`WriteError::LengthMismatch`]), or was given before
    /// ([`WriteError::Started`]); [`Error::Io`] when the write fails.
    pub fn write(&mut self, name: &str, dtype: Dtype, shape: &[u64], bytes: &[u8]) -> Result<()> {
        let (index, at) = self.claim(name, dtype, shape, bytes.len() as u64)?;
        self.file.write_all_at(bytes, at)?;
        self.written[index] = true;
        Ok(())
    }

    /// Writes several tensors at once, as [`PlacedWriter::write`] would one
    /// by one, but with tensors under 1 MiB that lie side by side in the
    /// file gathered into one write (a dict of many small tensors would
    /// otherwise cost a system call each).
    ///
    /// # Errors
    /// As [`PlacedWriter::write`]; after an error the writer should be
    /// dropped (some of the tensors may be written).
    pub fn write_all(&mut self, tensors: &[TensorRef<'_>]) -> Result<()> {
        const SMALL: usize = 1 << 20;
        let mut placed = Vec::with_capacity(tensors.len());
        if self.declared_as(tensors) {
            // The tensors the layout was planned from, in that order: each
            // slot knows its tensor, so no lookup by name, and file order
            // is the slots' order (no sort).
            for index in 0..self.layout.len() {
                let Some(slot) = self.layout.slot(index) else {
                    continue;
                };
                let Some(t) = tensors.get(slot.declared()) else {
                    continue;
                };
                let at = self.check(index, t.name, t.dtype, t.shape, t.data.len() as u64)?;
                self.written[index] = true;
                placed.push((at, t.data));
            }
        } else {
            for t in tensors {
                let (index, at) = self.claim(t.name, t.dtype, t.shape, t.data.len() as u64)?;
                // Marked now, so that a tensor twice in `tensors` is refused.
                self.written[index] = true;
                placed.push((at, t.data));
            }
            placed.sort_unstable_by_key(|&(at, _)| at);
        }
        let mut run: Vec<u8> = Vec::new();
        let mut run_at = 0;
        for (at, data) in placed {
            if !run.is_empty()
                && (run_at + run.len() as u64 != at || run.len() + data.len() > SMALL)
            {
                self.file.write_all_at(&run, run_at)?;
                run.clear();
            }
            if data.len() >= SMALL {
                self.file.write_all_at(data, at)?;
                continue;
            }
            if run.is_empty() {
                run_at = at;
            }
            run.extend_from_slice(data);
        }
        if !run.is_empty() {
            self.file.write_all_at(&run, run_at)?;
        }
        Ok(())
    }

    /// Writes the tensor `name` from `len` bytes of `source` at `offset`
    /// (a spool, say), in pieces of [`super::PIECE`] bytes.
    ///
    /// # Errors
    /// As [`PlacedWriter::write`], and a read of `source` that fails or
    /// ends early (naming `source_path`).
    pub fn write_from_file(
        &mut self,
        spec: &TensorSpec,
        source: &File,
        source_path: &Path,
        offset: u64,
    ) -> Result<()> {
        let len = spec.byte_len()?;
        let (index, at) = self.claim(&spec.name, spec.dtype, &spec.shape, len)?;
        let mut buf = vec![0u8; (len as usize).min(super::PIECE)];
        let mut done = 0u64;
        while done < len {
            let n = ((len - done) as usize).min(buf.len());
            let piece = &mut buf[..n];
            read_exact_at(source, piece, offset + done).map_err(|e| Error::io(source_path, e))?;
            self.file.write_all_at(piece, at + done)?;
            done += n as u64;
        }
        self.written[index] = true;
        Ok(())
    }

    /// Checks a tensor to be written: its index in file order and where its
    /// bytes go in the file.
    fn claim(&mut self, name: &str, dtype: Dtype, shape: &[u64], len: u64) -> Result<(usize, u64)> {
        let layout = &self.layout;
        let names = self.index.get_or_insert_with(|| {
            layout
                .slots()
                .enumerate()
                .map(|(i, s)| (s.name().to_string(), i))
                .collect()
        });
        let &index = names.get(name).ok_or_else(|| WriteError::Undeclared {
            tensor: name.to_string(),
        })?;
        let at = self.check(index, name, dtype, shape, len)?;
        Ok((index, at))
    }

    /// Whether `tensors` are, in order, the declarations the layout was
    /// planned from (see [`PlacedWriter::declaring`]).
    fn declared_as(&self, tensors: &[TensorRef<'_>]) -> bool {
        tensors.len() == self.layout.len()
            && self.layout.slots().all(|s| {
                tensors
                    .get(s.declared())
                    .is_some_and(|t| t.name == s.name())
            })
    }

    /// Checks a tensor to be written at slot `index` (in file order):
    /// where its bytes go in the file.
    fn check(
        &self,
        index: usize,
        name: &str,
        dtype: Dtype,
        shape: &[u64],
        len: u64,
    ) -> Result<u64> {
        let slot = self.layout.slot(index).ok_or(WriteError::Poisoned)?;
        if slot.dtype() != dtype || slot.shape() != shape {
            return Err(WriteError::NotAsDeclared {
                tensor: name.to_string(),
                declared: format!("{} {:?}", slot.dtype(), slot.shape()),
                given: format!("{dtype} {shape:?}"),
            }
            .into());
        }
        if len != slot.byte_len() {
            return Err(WriteError::LengthMismatch {
                tensor: name.to_string(),
                dtype,
                shape: shape.to_vec(),
                expected: slot.byte_len(),
                actual: len,
            }
            .into());
        }
        if self.written[index] {
            return Err(WriteError::Started {
                tensor: name.to_string(),
                filled: slot.byte_len(),
            }
            .into());
        }
        Ok(8 + self.layout.header_len() + slot.data_offsets().0)
    }

    /// The declared tensors not written yet, in file order.
    pub fn missing(&self) -> impl Iterator<Item = &str> + '_ {
        self.layout
            .slots()
            .zip(&self.written)
            .filter(|(_, done)| !**done)
            .map(|(s, _)| s.name())
    }

    /// Checks every declared tensor was written, then puts the file in
    /// place (synced when the options said so).
    ///
    /// # Errors
    /// [`Error::Write`] ([`WriteError::TooShort`]) naming the first tensor
    /// in file order not written (nothing is saved then), or the commit
    /// fails ([`Error::Io`]).
    pub fn commit(self) -> Result<()> {
        if let Some(slot) = self
            .layout
            .slots()
            .zip(&self.written)
            .find(|(_, done)| !**done)
            .map(|(s, _)| s)
        {
            return Err(Error::from(WriteError::TooShort {
                tensor: slot.name().to_string(),
                expected: slot.byte_len(),
                received: 0,
            })
            .at(self.file.path()));
        }
        self.file.commit(self.sync)
    }
}

/// Tensors that come without a declaration (a generator), kept in a spool
/// until the last, then laid out in the canonical file: twice the I/O of a
/// [`PlacedWriter`], with memory still one tensor.
///
/// The spool is an unnamed file beside the target (an [`AtomicFile`] that
/// is never committed): nothing is left of it when the spool is dropped,
/// whatever happens, as for a save.
#[derive(Debug)]
pub struct Spool {
    path: PathBuf,
    file: AtomicFile,
    specs: Vec<TensorSpec>,
    offsets: Vec<u64>,
    len: u64,
}

impl Spool {
    /// A spool for a file to be saved at `path`.
    ///
    /// # Errors
    /// The spool file cannot be created beside `path` (as for a save).
    pub fn create(path: impl AsRef<Path>) -> Result<Spool> {
        let path = path.as_ref().to_path_buf();
        let file = AtomicFile::create(&path)?;
        Ok(Spool {
            path,
            file,
            specs: Vec::new(),
            offsets: Vec::new(),
            len: 0,
        })
    }

    /// Adds a tensor to the spool.
    ///
    /// # Errors
    /// A byte length other than its dtype and shape give
    /// ([`WriteError::LengthMismatch`]), or the spool's write fails.
    /// Duplicate names are refused at [`Spool::save`].
    pub fn add(&mut self, name: &str, dtype: Dtype, shape: &[u64], bytes: &[u8]) -> Result<()> {
        let spec = TensorSpec::new(name, dtype, shape);
        let expected = spec.byte_len()?;
        if expected != bytes.len() as u64 {
            return Err(WriteError::LengthMismatch {
                tensor: name.to_string(),
                dtype,
                shape: shape.to_vec(),
                expected,
                actual: bytes.len() as u64,
            }
            .into());
        }
        self.file.write_all_at(bytes, self.len)?;
        self.specs.push(spec);
        self.offsets.push(self.len);
        self.len += expected;
        Ok(())
    }

    /// Saves the spooled tensors and `metadata` as the canonical file at
    /// the spool's path, atomically; the spool is gone afterwards.
    ///
    /// # Errors
    /// As [`PlacedWriter::create`] (two tensors of one name among them),
    /// and a failing read of the spool or write of the file.
    pub fn save(self, metadata: Option<&Metadata>, options: &WriteOptions) -> Result<()> {
        let mut out = PlacedWriter::create(&self.path, &self.specs, metadata, options)?;
        for (spec, &offset) in self.specs.iter().zip(&self.offsets) {
            out.write_from_file(spec, self.file.file(), &self.path, offset)?;
        }
        out.commit()
        // The spool's file is dropped here, and with it the spool.
    }
}

fn read_exact_at(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
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
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            done += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::serialize;

    fn specs() -> Vec<(&'static str, Dtype, Vec<u64>, Vec<u8>)> {
        vec![
            ("b", Dtype::F32, vec![2], vec![1; 8]),
            ("a", Dtype::U8, vec![3], vec![2, 3, 4]),
            ("c", Dtype::F64, vec![], vec![5; 8]),
            ("e", Dtype::F32, vec![0, 2], vec![]),
        ]
    }

    fn canonical(metadata: &Metadata) -> Vec<u8> {
        let all = specs();
        let refs = all.iter().map(|(n, d, s, b)| TensorRef {
            name: n,
            dtype: *d,
            shape: s,
            data: b,
        });
        serialize(refs, Some(metadata)).unwrap()
    }

    fn declared() -> Vec<TensorSpec> {
        specs()
            .into_iter()
            .map(|(n, d, s, _)| TensorSpec::new(n, d, s))
            .collect()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn tensors_in_any_order_give_the_canonical_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.safetensors");
        let metadata = Metadata::from([("k".to_string(), "v".to_string())]);
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
            let mut w =
                PlacedWriter::create(&path, &declared(), Some(&metadata), &Default::default())
                    .unwrap();
            let all = specs();
            for i in order {
                let (n, d, s, b) = &all[i];
                w.write(n, *d, s, b).unwrap();
            }
            assert_eq!(w.missing().count(), 0);
            w.commit().unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), canonical(&metadata));
        }
        // All at once: the small ones side by side in one write.
        let all = specs();
        let refs: Vec<TensorRef<'_>> = all
            .iter()
            .map(|(n, d, s, b)| TensorRef {
                name: n,
                dtype: *d,
                shape: s,
                data: b,
            })
            .collect();
        let mut w =
            PlacedWriter::create(&path, &declared(), Some(&metadata), &Default::default()).unwrap();
        let twice = [refs[1], refs[1]];
        let e = w.write_all(&twice).unwrap_err();
        assert!(e.to_string().contains("already written"), "{e}");
        drop(w);
        let mut w =
            PlacedWriter::create(&path, &declared(), Some(&metadata), &Default::default()).unwrap();
        w.write_all(&refs).unwrap();
        w.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), canonical(&metadata));
        // Declared by the tensors themselves (the fast path: no lookup by
        // name), and in another order than declared (looked up by name).
        let mut w =
            PlacedWriter::declaring(&path, &refs, Some(&metadata), &Default::default()).unwrap();
        w.write_all(&refs).unwrap();
        w.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), canonical(&metadata));
        let reversed: Vec<TensorRef<'_>> = refs.iter().rev().copied().collect();
        let mut w =
            PlacedWriter::declaring(&path, &refs, Some(&metadata), &Default::default()).unwrap();
        w.write_all(&reversed).unwrap();
        w.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), canonical(&metadata));
        // Same names in the declared places, but another dtype: refused.
        let mut other = refs.clone();
        other[0].dtype = Dtype::I32;
        let mut w =
            PlacedWriter::declaring(&path, &refs, Some(&metadata), &Default::default()).unwrap();
        let e = w.write_all(&other).unwrap_err();
        assert!(e.to_string().contains("was declared F32 [2]"), "{e}");
        drop(w);
        let mut short = refs.clone();
        short[1].data = &[2, 3];
        let e = PlacedWriter::declaring(&path, &short, None, &Default::default()).unwrap_err();
        assert!(
            matches!(e, Error::Write(WriteError::LengthMismatch { .. })),
            "{e}"
        );
        // Through a spool, in any order too.
        let mut spool = Spool::create(&path).unwrap();
        for (n, d, s, b) in specs().iter().rev() {
            spool.add(n, *d, s, b).unwrap();
        }
        spool.save(Some(&metadata), &Default::default()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), canonical(&metadata));
        assert_eq!(names(dir.path()), ["out.safetensors"]);
    }

    #[test]
    fn refuses_what_was_not_declared_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.safetensors");
        let mut w = PlacedWriter::create(&path, &declared(), None, &Default::default()).unwrap();
        let err = |e: Error| match e {
            Error::Write(w) => w,
            other => panic!("{other}"),
        };
        let e = err(w.write("z", Dtype::U8, &[1], &[0]).unwrap_err());
        assert!(matches!(e, WriteError::Undeclared { .. }), "{e}");
        let e = err(w.write("a", Dtype::I8, &[3], &[0; 3]).unwrap_err());
        assert_eq!(
            e.to_string(),
            "tensor \"a\" was declared U8 [3], but is I8 [3]"
        );
        let e = err(w.write("a", Dtype::U8, &[3], &[0; 2]).unwrap_err());
        assert!(matches!(e, WriteError::LengthMismatch { .. }), "{e}");
        w.write("a", Dtype::U8, &[3], &[0; 3]).unwrap();
        let e = err(w.write("a", Dtype::U8, &[3], &[0; 3]).unwrap_err());
        assert!(matches!(e, WriteError::Started { .. }), "{e}");
        assert_eq!(w.missing().collect::<Vec<_>>(), ["c", "b", "e"]);
        let e = w.commit().unwrap_err();
        assert!(e.to_string().contains("tensor \"c\""), "{e}");
        assert_eq!(names(dir.path()), Vec::<String>::new());
        // A duplicate name in a spool is refused when it is saved.
        let mut spool = Spool::create(&path).unwrap();
        spool.add("a", Dtype::U8, &[1], &[1]).unwrap();
        spool.add("a", Dtype::U8, &[1], &[1]).unwrap();
        let e = spool.save(None, &Default::default()).unwrap_err();
        assert!(e.to_string().contains("two tensors are named"), "{e}");
        assert_eq!(names(dir.path()), Vec::<String>::new());
    }
}
