//! One array as [`TensorData`]: C order, little-endian, in a safetensors
//! dtype, whatever the file stores.
//!
//! Stored little-endian C-order data is read by range; big-endian values
//! are swapped and sub-byte values packed on the way (still by range).
//! Deflated members are inflated in one pass ([`TensorData::produce`]);
//! Fortran-order arrays are reordered a block at a time, one pass over
//! the data per block, within
//! [`NpzLimits::max_reorder_bytes`](super::NpzLimits).

use tensorfile_core::writer::PIECE;

use super::descr::{self, Element};
use super::error::NpzError;
use super::read::{copy_overlap, zip_error, Bytes, NpyInfo, NpzFile};
use crate::source::ByteSource;
use crate::{Dtype, Error, Result, TensorData};
use tensorfile_zip::CrcCheck;

/// How stored bytes become the tensor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transform {
    /// As they are.
    Copy,
    /// Each `unit` bytes reversed (big-endian values).
    Swap(usize),
    /// One value of `bits` bits per byte, packed into a bit stream.
    Pack(u32),
}

impl Transform {
    /// Input bytes and output bytes of the smallest whole group.
    fn group(self) -> (u64, u64) {
        match self {
            Transform::Copy => (1, 1),
            Transform::Swap(u) => (u as u64, u as u64),
            Transform::Pack(bits) => {
                let (codes, bytes) = crate::bits::group(bits);
                (codes as u64, bytes as u64)
            }
        }
    }

    /// Applies it to whole groups of `input`, appending to `out`.
    fn apply(self, input: &mut [u8], out: &mut Vec<u8>) {
        match self {
            Transform::Copy => out.extend_from_slice(input),
            Transform::Swap(u) => {
                for v in input.chunks_exact_mut(u) {
                    v.reverse();
                }
                out.extend_from_slice(input);
            }
            Transform::Pack(bits) => {
                let (n, b) = self.group();
                let start = out.len();
                out.resize(start + input.len() / n as usize * b as usize, 0);
                crate::bits::pack(bits, input, &mut out[start..]);
            }
        }
    }
}

/// One array of an [`NpzFile`], read as a safetensors tensor.
#[derive(Debug)]
pub struct NpyArray<'a, S: ByteSource> {
    file: &'a NpzFile<S>,
    info: &'a NpyInfo,
    dtype: Dtype,
    transform: Transform,
    byte_len: u64,
}

impl<S: ByteSource> NpzFile<S> {
    /// Every array as [`TensorData`](crate::TensorData) in C order and
    /// little-endian, as `np.load` gives it: big-endian values swapped,
    /// Fortran-order arrays reordered, deflated members inflated as they
    /// are read. Opaque arrays (ml_dtypes types) are read as `opaque`:
    /// items of its width as they are, or for F4 and F6 one value in the
    /// low bits of each byte, packed.
    ///
    /// # Errors
    /// An opaque array with no `opaque` dtype, or one whose items cannot
    /// hold it ([`NpzError::Opaque`], [`NpzError::OpaqueWidth`]); sub-byte
    /// values that do not fill whole bytes.
    pub fn tensors(&self, opaque: Option<Dtype>) -> Result<Vec<NpyArray<'_, S>>> {
        self.arrays()
            .iter()
            .map(|info| NpyArray::new(self, info, opaque).map_err(|e| self.name_error(e)))
            .collect()
    }
}

impl<'a, S: ByteSource> NpyArray<'a, S> {
    fn new(
        file: &'a NpzFile<S>,
        info: &'a NpyInfo,
        opaque: Option<Dtype>,
    ) -> Result<NpyArray<'a, S>> {
        let (dtype, transform) = match info.element {
            Element::Plain { dtype, big_endian } => {
                let unit = descr::swap_unit(dtype);
                let t = if big_endian && unit > 1 {
                    Transform::Swap(unit)
                } else {
                    Transform::Copy
                };
                (dtype, t)
            }
            Element::Opaque { itemsize } => {
                let descr = info.header.descr.to_string();
                let descr = descr.trim_matches('\'').to_string();
                let Some(dtype) = opaque else {
                    return Err(NpzError::Opaque {
                        array: info.name.clone(),
                        descr,
                    }
                    .into());
                };
                match descr::opaque_as(itemsize, dtype) {
                    descr::Opaque::Whole => (dtype, Transform::Copy),
                    descr::Opaque::LowBits(bits) => (dtype, Transform::Pack(bits)),
                    descr::Opaque::Misfit => {
                        return Err(NpzError::OpaqueWidth {
                            array: info.name.clone(),
                            descr,
                            itemsize: u64::from(itemsize),
                            dtype,
                            bits: dtype.bits(),
                        }
                        .into())
                    }
                }
            }
        };
        let byte_len = dtype.byte_len(info.numel).ok_or_else(|| NpzError::Shape {
            array: info.name.clone(),
            shape: info.header.shape.clone(),
            problem: format!(
                "{} {dtype} values do not fill whole bytes ({} bits each)",
                info.numel,
                dtype.bits()
            ),
        })?;
        Ok(NpyArray {
            file,
            info,
            dtype,
            transform,
            byte_len,
        })
    }

    /// What the file says about the array.
    pub fn info(&self) -> &NpyInfo {
        self.info
    }

    fn source(&self) -> &dyn ByteSource {
        self.file.source()
    }

    /// An error naming the file.
    fn named(&self, e: Error) -> Error {
        self.file.name_error(e)
    }

    /// The data's stored bytes `offset..offset + buf.len()` (C or Fortran
    /// order, as stored).
    fn read_stored(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.info.header.data_offset + offset;
        self.info
            .bytes
            .read(self.source(), at, buf)
            .map_err(|e| self.named(zip_error(e)))
    }

    /// The stored data bytes (C or Fortran order) from `first` to `end`,
    /// handed to `visit` in order, in pieces: read a piece at a time when
    /// stored, inflated (from the member's start, nothing past `end`) when
    /// deflated. With `crc`, every byte of the member (its `.npy` header
    /// too) goes through it, and the member's CRC-32 is checked at the end.
    fn scan(
        &self,
        first: u64,
        end: u64,
        mut crc: Option<&mut CrcCheck>,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<()> {
        let data_start = self.info.header.data_offset;
        let (lo, hi) = (data_start + first, data_start + end);
        let entry = self.info.entry.as_ref().filter(|_| crc.is_some());
        let (from, to) = match entry {
            Some(_) => (0, self.info.bytes.len()),
            None => (lo, hi),
        };
        let mut take = |at: u64, piece: &[u8]| {
            if let Some(c) = crc.as_deref_mut() {
                c.update(piece);
            }
            let (s, e) = (at.max(lo), (at + piece.len() as u64).min(hi));
            if s < e {
                visit(s - data_start, &piece[(s - at) as usize..(e - at) as usize]);
            }
        };
        match &self.info.bytes {
            Bytes::Stored { .. } => {
                let mut buf = vec![0u8; (to - from).min(SCAN_PIECE) as usize];
                let mut at = from;
                while at < to {
                    let n = (to - at).min(SCAN_PIECE) as usize;
                    self.info
                        .bytes
                        .read(self.source(), at, &mut buf[..n])
                        .map_err(|e| self.named(zip_error(e)))?;
                    take(at, &buf[..n]);
                    at += n as u64;
                }
            }
            Bytes::Deflated(entry) => entry
                .inflate_prefix(self.source(), to, take)
                .map_err(|e| self.named(zip_error(e)))?,
        }
        if let (Some(entry), Some(crc)) = (entry, crc) {
            entry
                .verify_crc(crc)
                .map_err(|e| self.named(zip_error(e)))?;
        }
        Ok(())
    }

    /// Reorders a Fortran-order array into C order a block at a time,
    /// handing `each(offset, bytes)` the C-order stored bytes of every
    /// block that overlaps `range` (whole blocks, in order of offset).
    ///
    /// A block is a run of C-order rows: the indices of the axes before
    /// some axis `k` fixed, a range of axis `k`, every index of the axes
    /// after it. It is gathered in one pass over the stored data (in
    /// Fortran order its items are runs along axis `k`, one per index of
    /// the later axes), then put in C order a piece at a time. At most
    /// half of [`NpzLimits::max_reorder_bytes`](super::NpzLimits) is held
    /// by a block, and the budget is shared by every array being
    /// reordered at once.
    fn reorder(
        &self,
        range: std::ops::Range<u64>,
        mut crc: Option<&mut CrcCheck>,
        each: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let size = self.info.itemsize;
        let len = self.info.data_len();
        let budget = self.file.limits().max_reorder_bytes;
        // Axes of length 1 change neither order: without them the reorder
        // is the same, with fewer axes.
        let shape: Vec<u64> = self
            .info
            .header
            .shape
            .iter()
            .copied()
            .filter(|&d| d > 1)
            .collect();
        let n = shape.len();
        let window = budget / 2;
        if window < size {
            return Err(self.named(
                NpzError::Memory {
                    array: self.info.name.clone(),
                    bytes: len,
                    limit: budget,
                }
                .into(),
            ));
        }
        // Fortran strides in items; `fstride[n]` is the element count.
        let mut fstride = vec![1u64; n + 1];
        for j in 0..n {
            fstride[j + 1] = fstride[j] * shape[j];
        }
        // The C-order bytes of one index of axis `j` (every later axis).
        let rest_bytes = |j: usize| size * shape[j + 1..].iter().product::<u64>();
        // The first axis whose rows fit the window (the last one always does).
        let k = (0..n).find(|&j| rest_bytes(j) <= window).unwrap_or(n - 1);
        let rows = (window / rest_bytes(k)).min(shape[k]);
        let block_cap = rows * rest_bytes(k);
        let columns: u64 = shape[k + 1..].iter().product();
        let piece_cap = (PIECE as u64).min(block_cap);
        let _held = Reservation::take(block_cap + piece_cap, budget);
        let too_much = || {
            self.named(
                NpzError::Memory {
                    array: self.info.name.clone(),
                    bytes: len,
                    limit: budget,
                }
                .into(),
            )
        };
        let mut block = zeroed(block_cap).ok_or_else(too_much)?;
        let mut out = zeroed(piece_cap).ok_or_else(too_much)?;
        let (fk, fk1) = (fstride[k], fstride[k + 1]);
        // The indices of the axes before `k`, C order (last fastest).
        let mut prefix = vec![0u64; k];
        loop {
            let prefix_at: u64 = prefix.iter().zip(&fstride).map(|(i, f)| i * f).sum();
            let prefix_c: u64 = prefix
                .iter()
                .enumerate()
                .map(|(j, i)| i * rest_bytes(j))
                .sum();
            let mut a = 0u64;
            while a < shape[k] {
                let t = rows.min(shape[k] - a);
                let c_start = prefix_c + a * rest_bytes(k);
                let c_len = t * rest_bytes(k);
                if c_start < range.end && range.start < c_start + c_len {
                    let base = prefix_at + a * fk;
                    let last = base + (t - 1) * fk + (columns - 1) * fk1;
                    let block = &mut block[..c_len as usize];
                    // The first block's pass also checks the whole member.
                    self.scan(
                        base * size,
                        (last + 1) * size,
                        crc.take(),
                        &mut |at, piece| {
                            gather(block, at, piece, base, t, fk, fk1, columns, size);
                        },
                    )?;
                    // The block is a Fortran-order array of its own shape:
                    // put it in C order a piece of whole rows at a time.
                    let mut block_shape = vec![t];
                    block_shape.extend_from_slice(&shape[k + 1..]);
                    let row = size * block_shape[block_shape.len() - 1];
                    let rows_per_piece = (piece_cap / row).max(1);
                    let total_rows = c_len / row;
                    let mut r = 0u64;
                    while r < total_rows {
                        let m = rows_per_piece.min(total_rows - r);
                        let out = &mut out[..(m * row) as usize];
                        fortran_to_c_rows(block, out, &block_shape, size as usize, r);
                        each(c_start + r * row, out)?;
                        r += m;
                    }
                }
                a += t;
            }
            // The next prefix, last axis fastest; done after the last.
            let Some(j) = (0..k).rev().find(|&j| prefix[j] + 1 < shape[j]) else {
                return Ok(());
            };
            prefix[j] += 1;
            prefix[j + 1..].iter_mut().for_each(|i| *i = 0);
        }
    }

    /// The stored span (in C order) whose whole groups make the output
    /// bytes `offset..offset + len`: (input start, input end, output bytes
    /// to skip).
    fn span(&self, offset: u64, len: u64) -> (u64, u64, usize) {
        let (gin, gout) = self.transform.group();
        let first = offset / gout;
        let last = (offset + len).div_ceil(gout);
        (first * gin, last * gin, (offset - first * gout) as usize)
    }
}

/// Bytes of stored data read at a time when a block is gathered.
const SCAN_PIECE: u64 = 4 << 20;

/// `len` zero bytes, or `None` when that much memory cannot be had.
///
/// Filled a chunk at a time by `memcpy`: `Vec::resize` writes a byte at a
/// time in a debug build, which made it a third of a reorder's time there.
fn zeroed(len: u64) -> Option<Vec<u8>> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let len = usize::try_from(len).ok()?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(len).ok()?;
    while buf.len() < len {
        let n = (len - buf.len()).min(ZEROS.len());
        buf.extend_from_slice(&ZEROS[..n]);
    }
    Some(buf)
}

/// Copies into `block` the items of one block found in `piece` (stored
/// bytes at byte `at`): the block's items are, for each of `columns`
/// columns `q`, the `t` items at Fortran positions `base + u * fk + q *
/// fk1`, kept at `u + t * q` (the block as a Fortran-order array).
#[allow(clippy::too_many_arguments)]
fn gather(
    block: &mut [u8],
    at: u64,
    piece: &[u8],
    base: u64,
    t: u64,
    fk: u64,
    fk1: u64,
    columns: u64,
    size: u64,
) {
    let (first, end) = (at / size, (at + piece.len() as u64).div_ceil(size));
    // Columns that can hold an item of [first, end), found by arithmetic
    // (a conservative range: the copies below clip).
    let q_lo = first.saturating_sub(base + (t - 1) * fk) / fk1;
    let q_hi = (end.saturating_sub(base) / fk1 + 1).min(columns);
    if fk == 1 {
        gather_runs(
            block,
            at,
            piece,
            base * size,
            t * size,
            fk1 * size,
            q_lo,
            q_hi,
        );
        return;
    }
    let mut copy = |item: u64, items: u64, dest_item: u64| {
        let dest = &mut block[(dest_item * size) as usize..((dest_item + items) * size) as usize];
        copy_overlap(at, piece, item * size, dest);
    };
    for q in q_lo..q_hi {
        let column = base + q * fk1;
        let u_lo = first.saturating_sub(column) / fk;
        let u_hi = end.saturating_sub(column).div_ceil(fk).min(t);
        for u in u_lo..u_hi {
            copy(column + u * fk, 1, u + t * q);
        }
    }
}

/// [`gather`] when each column's items are one run: column `q`'s `run`
/// bytes at stored byte `start + q * stride` go to `block[q * run..]`, for
/// the columns `q_lo..q_hi` that may meet `piece` (stored bytes at `at`).
///
/// The columns wholly inside the piece (all but the first and last) are
/// copied without clipping, and short runs as arrays: a 3-D array
/// reordered two items per column has tens of millions of columns per
/// pass.
#[allow(clippy::too_many_arguments)]
fn gather_runs(
    block: &mut [u8],
    at: u64,
    piece: &[u8],
    start: u64,
    run: u64,
    stride: u64,
    q_lo: u64,
    q_hi: u64,
) {
    let piece_end = at + piece.len() as u64;
    // The columns wholly inside the piece: `inner_lo..inner_hi`.
    let inner_lo = at
        .saturating_sub(start)
        .div_ceil(stride)
        .max(q_lo)
        .min(q_hi);
    let inner_hi = match piece_end.checked_sub(start + run) {
        Some(room) => (room / stride + 1).min(q_hi).max(inner_lo),
        None => inner_lo,
    };
    for q in (q_lo..inner_lo).chain(inner_hi..q_hi) {
        let dest = &mut block[(q * run) as usize..((q + 1) * run) as usize];
        copy_overlap(at, piece, start + q * stride, dest);
    }
    if inner_lo == inner_hi {
        return;
    }
    let count = (inner_hi - inner_lo) as usize;
    let src = &piece[(start + inner_lo * stride - at) as usize..];
    let dst = &mut block[(inner_lo * run) as usize..(inner_hi * run) as usize];
    let (run, stride) = (run as usize, stride as usize);
    match run {
        4 => runs_of::<4>(dst, src, stride, count),
        8 => runs_of::<8>(dst, src, stride, count),
        16 => runs_of::<16>(dst, src, stride, count),
        32 => runs_of::<32>(dst, src, stride, count),
        _ => {
            let mut i = 0;
            while i < count {
                let s = i * stride;
                dst[i * run..(i + 1) * run].copy_from_slice(&src[s..s + run]);
                i += 1;
            }
        }
    }
}

/// `count` runs of `N` bytes, `stride` bytes apart in `src`, packed into
/// `dst` (the copies as arrays, a few instructions each in any build).
fn runs_of<const N: usize>(dst: &mut [u8], src: &[u8], stride: usize, count: usize) {
    let (dst, _) = dst.as_chunks_mut::<N>();
    if stride.is_multiple_of(N) {
        let (src, _) = src.as_chunks::<N>();
        let step = stride / N;
        let mut i = 0;
        while i < count {
            dst[i] = src[i * step];
            i += 1;
        }
        return;
    }
    let mut i = 0;
    while i < count {
        let s = i * stride;
        dst[i].copy_from_slice(&src[s..s + N]);
        i += 1;
    }
}

/// The process-wide share of [`NpzLimits::max_reorder_bytes`](super::NpzLimits)
/// held by the reorders running now (tensors are made in parallel).
static HELD: (std::sync::Mutex<u64>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// Bytes of the reorder budget held until dropped.
struct Reservation(u64);

impl Reservation {
    /// Waits until `bytes` fit `budget` beside what others hold (or
    /// nothing else is held), then holds them.
    fn take(bytes: u64, budget: u64) -> Reservation {
        let (lock, freed) = &HELD;
        let mut held = lock.lock().unwrap_or_else(|p| p.into_inner());
        while *held > 0 && held.saturating_add(bytes) > budget {
            held = freed.wait(held).unwrap_or_else(|p| p.into_inner());
        }
        *held += bytes;
        Reservation(bytes)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let (lock, freed) = &HELD;
        let mut held = lock.lock().unwrap_or_else(|p| p.into_inner());
        *held -= self.0;
        freed.notify_all();
    }
}

/// Writes C-order rows `first_row..` of a Fortran-order array (`shape`
/// slowest first, items of `size` bytes) into `dst` (whole rows of the
/// last axis): item `(i0, .., in)` is at Fortran position
/// `i0 + d0 * (i1 + d1 * (...))`.
fn fortran_to_c_rows(src: &[u8], dst: &mut [u8], shape: &[u64], size: usize, first_row: u64) {
    let n = shape.len();
    // Fortran strides in items: 1, d0, d0 * d1, ...
    let mut stride = vec![0usize; n];
    let mut s = 1usize;
    for k in 0..n {
        stride[k] = s;
        s *= shape[k] as usize;
    }
    let inner = shape[n - 1] as usize;
    // The first row's indices over the outer axes (last fastest).
    let mut index = vec![0usize; n - 1];
    let mut r = first_row as usize;
    for k in (0..n - 1).rev() {
        index[k] = r % shape[k] as usize;
        r /= shape[k] as usize;
    }
    match size {
        1 => rows_of::<1>(src, dst, &shape_usize(shape), &stride, &mut index),
        2 => rows_of::<2>(src, dst, &shape_usize(shape), &stride, &mut index),
        4 => rows_of::<4>(src, dst, &shape_usize(shape), &stride, &mut index),
        8 => rows_of::<8>(src, dst, &shape_usize(shape), &stride, &mut index),
        16 => rows_of::<16>(src, dst, &shape_usize(shape), &stride, &mut index),
        _ => {
            for row in dst.chunks_exact_mut(inner * size) {
                let base: usize = index.iter().zip(&stride).map(|(i, s)| i * s).sum::<usize>();
                for (j, item) in row.chunks_exact_mut(size).enumerate() {
                    let from = (base + j * stride[n - 1]) * size;
                    item.copy_from_slice(&src[from..from + size]);
                }
                next_row(&mut index, &shape_usize(shape));
            }
        }
    }
}

fn shape_usize(shape: &[u64]) -> Vec<usize> {
    shape.iter().map(|&d| d as usize).collect()
}

/// Steps the odometer over the outer dimensions to the next row.
fn next_row(index: &mut [usize], shape: &[usize]) {
    for k in (0..index.len()).rev() {
        index[k] += 1;
        if index[k] < shape[k] {
            break;
        }
        index[k] = 0;
    }
}

/// [`fortran_to_c_rows`] for items of `N` bytes, copied as arrays (a
/// loop of whole items, quick in any build).
fn rows_of<const N: usize>(
    src: &[u8],
    dst: &mut [u8],
    shape: &[usize],
    stride: &[usize],
    index: &mut [usize],
) {
    let n = shape.len();
    let (src, _) = src.as_chunks::<N>();
    let (dst, _) = dst.as_chunks_mut::<N>();
    let (step, inner) = (stride[n - 1], shape[n - 1]);
    // Where each row starts in `src`.
    let bases: Vec<usize> = (0..dst.len() / inner)
        .map(|_| {
            let base = index.iter().zip(stride).map(|(i, s)| i * s).sum();
            next_row(index, shape);
            base
        })
        .collect();
    if step == 1 {
        for (row, &base) in dst.chunks_exact_mut(inner).zip(&bases) {
            row.copy_from_slice(&src[base..base + inner]);
        }
        return;
    }
    // Column by column across all the rows: the rows' items of one column
    // are near each other in `src` (a Fortran column), so both sides stay
    // in cache.
    // (`while` loops over slices: iterators and `Vec` indexing are calls
    // per item in a debug build.)
    let bases = &bases[..];
    let rows = bases.len();
    let mut j = 0;
    while j < inner {
        let at = j * step;
        let (mut r, mut d) = (0, j);
        while r < rows {
            dst[d] = src[bases[r] + at];
            d += inner;
            r += 1;
        }
        j += 1;
    }
}

impl<S: ByteSource> TensorData<Error> for NpyArray<'_, S> {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[u64] {
        &self.info.header.shape
    }

    fn byte_len(&self) -> u64 {
        self.byte_len
    }

    /// The C-order data of a `.npy` file is read by range; the rest is
    /// made in one pass (the arrays of an archive in one pass so that
    /// their member's CRC-32 is checked, as `np.load` does).
    fn seekable(&self) -> bool {
        matches!(self.info.bytes, Bytes::Stored { .. })
            && self.info.entry.is_none()
            && !self.info.reordered()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if !matches!(end, Some(e) if e <= self.byte_len) {
            return Err(tensorfile_core::Error::Slice {
                tensor: self.info.name.clone(),
                problem: format!(
                    "{} bytes at offset {offset} reach past its {} bytes",
                    buf.len(),
                    self.byte_len
                ),
            }
            .into());
        }
        if buf.is_empty() {
            return Ok(());
        }
        let (start, stop, skip) = self.span(offset, buf.len() as u64);
        let mut input = if self.info.reordered() {
            let mut input = vec![0u8; (stop - start) as usize];
            self.reorder(start..stop, None, &mut |at, piece| {
                copy_overlap(at, piece, start, &mut input);
                Ok(())
            })?;
            input
        } else {
            let mut input = vec![0u8; (stop - start) as usize];
            self.read_stored(start, &mut input)?;
            input
        };
        if self.transform == Transform::Copy {
            buf.copy_from_slice(&input[skip..skip + buf.len()]);
            return Ok(());
        }
        let mut out = Vec::with_capacity(input.len());
        self.transform.apply(&mut input, &mut out);
        buf.copy_from_slice(&out[skip..skip + buf.len()]);
        Ok(())
    }

    fn produce(&self, each: &mut dyn FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
        if self.seekable() {
            // By range, a piece at a time (the trait's way).
            let mut buf = vec![0u8; (self.byte_len.min(PIECE as u64)) as usize];
            let mut at = 0u64;
            while at < self.byte_len {
                let n = (self.byte_len - at).min(PIECE as u64) as usize;
                self.read_at(at, &mut buf[..n])?;
                each(at, &buf[..n])?;
                at += n as u64;
            }
            return Ok(());
        }
        let (gin, _) = self.transform.group();
        let mut out_at = 0u64;
        let mut out = Vec::new();
        let mut emit = |input: &mut [u8]| -> Result<()> {
            out.clear();
            self.transform.apply(input, &mut out);
            each(out_at, &out)?;
            out_at += out.len() as u64;
            Ok(())
        };
        if self.info.reordered() {
            // Pieces of C-order bytes, emitted in whole groups (a group
            // split across two pieces waits in `carry`).
            let mut carry: Vec<u8> = Vec::new();
            let mut crc = CrcCheck::new();
            self.reorder(0..self.info.data_len(), Some(&mut crc), &mut |_, piece| {
                if carry.is_empty() && (piece.len() as u64).is_multiple_of(gin) {
                    return emit(piece);
                }
                carry.extend_from_slice(piece);
                let whole = carry.len() as u64 / gin * gin;
                let rest = carry.split_off(whole as usize);
                emit(&mut carry)?;
                carry = rest;
                Ok(())
            })?;
            if !carry.is_empty() {
                emit(&mut carry)?;
            }
            return Ok(());
        }
        // A member in C order: read or inflated once, from the member's
        // start (its CRC-32 checked), in whole groups (a group split
        // across two pieces waits in `carry`).
        let mut carry: Vec<u8> = Vec::with_capacity(PIECE + gin as usize);
        let mut failed: Option<Error> = None;
        let mut crc = CrcCheck::new();
        self.scan(0, self.info.data_len(), Some(&mut crc), &mut |_, piece| {
            if failed.is_some() {
                return;
            }
            carry.extend_from_slice(piece);
            let whole = carry.len() as u64 / gin * gin;
            if whole >= PIECE as u64 {
                let rest = carry.split_off(whole as usize);
                if let Err(e) = emit(&mut carry) {
                    failed = Some(e);
                }
                carry = rest;
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        if !carry.is_empty() {
            emit(&mut carry)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    fn fortran_to_c(src: &[u8], dst: &mut [u8], shape: &[u64], size: usize) {
        super::fortran_to_c_rows(src, dst, shape, size, 0);
    }

    /// `gather` of every block of a Fortran array of `shape` (split at its
    /// first axis, `t` rows a block) with the stored bytes handed over in
    /// pieces of `piece` bytes, against the block taken item by item.
    fn check_gather(shape: [u64; 3], t: u64, size: u64, piece: usize) {
        let numel: u64 = shape.iter().product();
        let stored: Vec<u8> = (0..numel * size).map(|b| (b % 251) as u8).collect();
        let (fk, fk1) = (1, shape[0]);
        let columns = shape[1] * shape[2];
        let mut a = 0;
        while a < shape[0] {
            let t = t.min(shape[0] - a);
            let mut block = vec![0u8; (t * columns * size) as usize];
            for (i, chunk) in stored.chunks(piece).enumerate() {
                let at = (i * piece) as u64;
                super::gather(&mut block, at, chunk, a, t, fk, fk1, columns, size);
            }
            let mut expected = Vec::new();
            for q in 0..columns {
                let from = ((a + q * fk1) * size) as usize;
                expected.extend_from_slice(&stored[from..from + (t * size) as usize]);
            }
            assert_eq!(block, expected, "{shape:?} t {t} size {size} piece {piece}");
            a += t;
        }
    }

    #[test]
    fn blocks_are_gathered_across_any_pieces() {
        // Runs of 1 to 3 items of 1, 2, 4 and 8 bytes (the array copies
        // and the general one), stored bytes cut anywhere, runs split.
        for size in [1u64, 2, 4, 8] {
            for t in [1u64, 2, 3, 8] {
                for piece in [1usize, 3, 7, 8, 13, 64, 1000, 1 << 20] {
                    check_gather([8, 5, 3], t, size, piece);
                }
            }
        }
    }

    #[test]
    fn fortran_order_is_reordered() {
        // A (2, 3) array stored column-major: [[0, 1, 2], [3, 4, 5]] is
        // stored 0 3 1 4 2 5.
        let src = [0u8, 3, 1, 4, 2, 5];
        let mut dst = [0u8; 6];
        fortran_to_c(&src, &mut dst, &[2, 3], 1);
        assert_eq!(dst, [0, 1, 2, 3, 4, 5]);
        // (2, 3, 4) of 2-byte items: item (i, j, k) = 12 i + 4 j + k.
        let mut src = vec![0u8; 48];
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    let f = i + 2 * (j + 3 * k);
                    let v = (12 * i + 4 * j + k) as u16;
                    src[2 * f..2 * f + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let mut dst = vec![0u8; 48];
        fortran_to_c(&src, &mut dst, &[2, 3, 4], 2);
        let values: Vec<u16> = dst
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(values, (0..24).collect::<Vec<u16>>());
    }
}
