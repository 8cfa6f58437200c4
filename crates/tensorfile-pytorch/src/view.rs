//! Strided views of a storage: bounds checks and C-order bytes.
//!
//! A torch tensor is a view `(storage offset, shape, strides)` over a flat
//! storage, all counted in elements. Contiguous views are returned as
//! borrowed slices; anything else (transposes, slices with gaps, stride-0
//! expansions) is gathered into an owned buffer, copying the longest
//! contiguous inner run at a time.

use std::borrow::Cow;

/// A view over a storage, in elements of `elem` bytes.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// Offset of element `[0, 0, ...]` in the storage.
    pub offset: u64,
    /// Dimensions, outermost first.
    pub shape: &'a [u64],
    /// Strides, in elements.
    pub strides: &'a [u64],
    /// Bytes per element.
    pub elem: u64,
}

impl View<'_> {
    /// Number of elements, or `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        tensorfile_core::dtype::numel(self.shape)
    }

    /// Byte length of the view's C-order bytes, or `None` on overflow.
    pub fn nbytes(&self) -> Option<u64> {
        self.numel()?.checked_mul(self.elem)
    }

    /// Checks that every element of the view lies inside a storage of
    /// `storage_numel` elements, with checked arithmetic throughout.
    pub(crate) fn check(&self, storage_numel: u64) -> Result<(), String> {
        let describe = || {
            format!(
                "storage offset {} with shape {:?} and strides {:?}",
                self.offset, self.shape, self.strides
            )
        };
        if self.shape.len() != self.strides.len() {
            return Err(format!(
                "shape {:?} and strides {:?} have different lengths",
                self.shape, self.strides
            ));
        }
        if self.nbytes().is_none() {
            return Err(format!(
                "the byte count of shape {:?} overflows 64 bits",
                self.shape
            ));
        }
        if self.numel() == Some(0) {
            return Ok(());
        }
        let mut last = Some(self.offset);
        for (&d, &s) in self.shape.iter().zip(self.strides) {
            last = last.and_then(|l| (d - 1).checked_mul(s).and_then(|x| l.checked_add(x)));
        }
        match last {
            Some(last) if last < storage_numel => {
                // The whole storage must be addressable in bytes too.
                if storage_numel.checked_mul(self.elem).and_then(|b| usize::try_from(b).ok()).is_none() {
                    return Err(format!("storage of {storage_numel} elements is too large to address"));
                }
                Ok(())
            }
            Some(last) => Err(format!(
                "{} reaches element {last}, past the end of its storage of {storage_numel} elements",
                describe()
            )),
            None => Err(format!("{} overflows 64 bits", describe())),
        }
    }

    /// Whether the view is a dense C-order block of its storage (dimensions
    /// of size 1 may have any stride).
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == Some(0) {
            return true;
        }
        let mut expected = 1u64;
        for (&d, &s) in self.shape.iter().zip(self.strides).rev() {
            if d == 1 {
                continue;
            }
            if s != expected {
                return false;
            }
            expected = expected.saturating_mul(d);
        }
        true
    }

    /// The view's bytes in C order, from `storage` (the whole storage's
    /// bytes). Call [`View::check`] first; this re-checks every access and
    /// fails rather than panics if the view does not fit.
    pub(crate) fn gather<'s>(&self, storage: &'s [u8]) -> Result<Cow<'s, [u8]>, String> {
        let oob = || "view outside its storage".to_string();
        let nbytes = self
            .nbytes()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(oob)?;
        let elem = usize::try_from(self.elem).map_err(|_| oob())?;
        let offset = usize::try_from(self.offset).map_err(|_| oob())?;
        if nbytes == 0 {
            return Ok(Cow::Borrowed(&[]));
        }
        if self.is_contiguous() {
            let start = offset.checked_mul(elem).ok_or_else(oob)?;
            let end = start.checked_add(nbytes).ok_or_else(oob)?;
            return storage.get(start..end).map(Cow::Borrowed).ok_or_else(oob);
        }

        // Merge the innermost dimensions that are contiguous into one block.
        let mut outer = self.shape.len();
        let mut block = 1usize;
        while outer > 0 {
            let (d, s) = (self.shape[outer - 1], self.strides[outer - 1]);
            if d == 1 {
                outer -= 1;
            } else if s == block as u64 {
                block = block
                    .checked_mul(usize::try_from(d).map_err(|_| oob())?)
                    .ok_or_else(oob)?;
                outer -= 1;
            } else {
                break;
            }
        }
        let block_bytes = block * elem;
        if outer == 0 {
            // Only size-1 dimensions around one contiguous block.
            let start = offset.checked_mul(elem).ok_or_else(oob)?;
            let end = start.checked_add(nbytes).ok_or_else(oob)?;
            return storage.get(start..end).map(Cow::Borrowed).ok_or_else(oob);
        }
        // The two innermost remaining dimensions are copied as one plane
        // (rows of strided blocks) per step, in tiles so that strided reads
        // reuse cache lines (transposes); the dimensions outside advance
        // with an odometer. With one dimension left, the plane is one row.
        let plane_dims = outer.min(2);
        let dims = &self.shape[outer - plane_dims..outer];
        let dim_strides = &self.strides[outer - plane_dims..outer];
        let to_usize = |v: u64| usize::try_from(v).ok();
        let (rows, row_stride) = if plane_dims == 2 {
            (
                to_usize(dims[0]).ok_or_else(oob)?,
                to_usize(dim_strides[0])
                    .and_then(|s| s.checked_mul(elem))
                    .ok_or_else(oob)?,
            )
        } else {
            (1, 0)
        };
        let cols = to_usize(dims[plane_dims - 1]).ok_or_else(oob)?;
        let col_stride = to_usize(dim_strides[plane_dims - 1])
            .and_then(|s| s.checked_mul(elem))
            .ok_or_else(oob)?;
        let plane = Plane {
            rows,
            cols,
            row_stride,
            col_stride,
            block: block_bytes,
        };
        let plane_bytes = rows
            .checked_mul(cols)
            .and_then(|n| n.checked_mul(block_bytes))
            .ok_or_else(oob)?;
        let shape = &self.shape[..outer - plane_dims];
        let strides = &self.strides[..outer - plane_dims];

        let mut out = Vec::new();
        out.try_reserve_exact(nbytes)
            .map_err(|_| format!("cannot allocate {nbytes} bytes to re-order the view"))?;
        out.resize(nbytes, 0);
        let mut index = vec![0u64; shape.len()];
        let mut pos = self.offset;
        for dst in out.chunks_exact_mut(plane_bytes) {
            let start = usize::try_from(pos)
                .ok()
                .and_then(|p| p.checked_mul(elem))
                .ok_or_else(oob)?;
            plane.copy(dst, storage, start).ok_or_else(oob)?;
            // Advance the odometer from the innermost outer dimension.
            let mut k = shape.len();
            while k > 0 {
                k -= 1;
                index[k] += 1;
                // Wrapping: the overshoot past the last index is undone just
                // below, and every position actually read is checked.
                pos = pos.wrapping_add(strides[k]);
                if index[k] < shape[k] {
                    break;
                }
                pos = pos.wrapping_sub(strides[k].wrapping_mul(shape[k]));
                index[k] = 0;
            }
        }
        Ok(Cow::Owned(out))
    }
}

/// A rows x cols grid of `block`-byte blocks, strides in bytes.
struct Plane {
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
    block: usize,
}

impl Plane {
    /// Side of the square tiles: 32 strided reads stay in cache.
    const TILE: usize = 32;

    /// Copies the plane starting at byte `start` of `src` into `dst` in C
    /// order. `None` if a block lies outside `src`.
    fn copy(&self, dst: &mut [u8], src: &[u8], start: usize) -> Option<()> {
        let row_bytes = self.cols.checked_mul(self.block)?;
        for i0 in (0..self.rows).step_by(Self::TILE) {
            for j0 in (0..self.cols).step_by(Self::TILE) {
                let n = (j0 + Self::TILE).min(self.cols) - j0;
                for i in i0..(i0 + Self::TILE).min(self.rows) {
                    let d = i
                        .checked_mul(row_bytes)?
                        .checked_add(j0.checked_mul(self.block)?)?;
                    let d = dst.get_mut(d..d.checked_add(n.checked_mul(self.block)?)?)?;
                    let s = start
                        .checked_add(i.checked_mul(self.row_stride)?)?
                        .checked_add(j0.checked_mul(self.col_stride)?)?;
                    copy_run(d, src, s, self.col_stride, self.block)?;
                }
            }
        }
        Some(())
    }
}

/// Copies `dst.len() / block` blocks of `block` bytes from `src`, the i-th
/// from `start + i * stride`. `None` if a block lies outside `src`.
fn copy_run(dst: &mut [u8], src: &[u8], start: usize, stride: usize, block: usize) -> Option<()> {
    // Fixed sizes let the compiler turn each copy into a single move: this
    // is the loop that transposes run through, one element at a time.
    match block {
        1 => copy_fixed::<1>(dst, src, start, stride),
        2 => copy_fixed::<2>(dst, src, start, stride),
        4 => copy_fixed::<4>(dst, src, start, stride),
        8 => copy_fixed::<8>(dst, src, start, stride),
        16 => copy_fixed::<16>(dst, src, start, stride),
        _ => {
            for (i, d) in dst.chunks_exact_mut(block).enumerate() {
                let s = start.checked_add(i.checked_mul(stride)?)?;
                d.copy_from_slice(src.get(s..s.checked_add(block)?)?);
            }
            Some(())
        }
    }
}

fn copy_fixed<const N: usize>(
    dst: &mut [u8],
    src: &[u8],
    start: usize,
    stride: usize,
) -> Option<()> {
    for (i, d) in dst.chunks_exact_mut(N).enumerate() {
        let s = start.checked_add(i.checked_mul(stride)?)?;
        d.copy_from_slice(src.get(s..s.checked_add(N)?)?);
    }
    Some(())
}

/// Reverses the bytes of every `unit`-byte element of `buf` in place
/// (big-endian storage to little-endian).
pub fn byteswap(buf: &mut [u8], unit: usize) {
    if unit > 1 {
        for chunk in buf.chunks_exact_mut(unit) {
            chunk.reverse();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn storage(n: usize) -> Vec<u8> {
        (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
    }

    fn gather(s: &[u8], offset: u64, shape: &[u64], strides: &[u64]) -> Vec<f32> {
        let v = View {
            offset,
            shape,
            strides,
            elem: 4,
        };
        v.check((s.len() / 4) as u64).unwrap();
        f32s(&v.gather(s).unwrap())
    }

    #[test]
    fn views() {
        let s = storage(12);
        // Transpose of a 3x4.
        assert_eq!(
            gather(&s, 0, &[4, 3], &[1, 4]),
            [0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]
        );
        // Column 1 of a 3x4.
        assert_eq!(gather(&s, 1, &[3], &[4]), [1., 5., 9.]);
        // Expanded row.
        assert_eq!(gather(&s, 0, &[2, 3], &[0, 1]), [0., 1., 2., 0., 1., 2.]);
        // Slice: borrowed.
        let v = View {
            offset: 8,
            shape: &[4],
            strides: &[1],
            elem: 4,
        };
        assert!(matches!(v.gather(&s).unwrap(), Cow::Borrowed(_)));
        // Every other row of a 4x3: blocks of 3.
        assert_eq!(gather(&s, 0, &[2, 3], &[6, 1]), [0., 1., 2., 6., 7., 8.]);
        // Scalar and empty.
        assert_eq!(gather(&s, 5, &[], &[]), [5.]);
        assert_eq!(gather(&s, 99, &[0, 4], &[4, 1]), Vec::<f32>::new());
    }

    /// Element-by-element reference for `gather`.
    fn naive(s: &[u8], offset: u64, shape: &[u64], strides: &[u64]) -> Vec<f32> {
        let all = f32s(s);
        let n: u64 = shape.iter().product();
        (0..n)
            .map(|mut flat| {
                let mut pos = offset;
                for (&d, &st) in shape.iter().zip(strides).rev() {
                    pos += (flat % d) * st;
                    flat /= d;
                }
                all[pos as usize]
            })
            .collect()
    }

    #[test]
    fn tiled_views_match_the_element_by_element_reference() {
        let s = storage(70 * 45 * 3);
        let cases: &[(u64, &[u64], &[u64])] = &[
            (0, &[45, 70], &[1, 45]),          // transpose, ragged tiles
            (0, &[3, 45, 70], &[3150, 1, 45]), // batched transpose
            (0, &[70, 3, 45], &[45, 3150, 1]), // permuted, contiguous rows
            (1, &[44, 3, 70], &[1, 3150, 45]), // offset, three strided dims
            (5, &[33, 2, 35], &[2, 1, 90]),    // interleaved
            (0, &[4, 45, 70], &[0, 1, 45]),    // expanded transpose
        ];
        for &(offset, shape, strides) in cases {
            assert_eq!(
                gather(&s, offset, shape, strides),
                naive(&s, offset, shape, strides),
                "{shape:?} {strides:?}"
            );
        }
    }

    #[test]
    fn bounds() {
        let v = View {
            offset: 200,
            shape: &[3],
            strides: &[1],
            elem: 4,
        };
        let e = v.check(3).unwrap_err();
        assert!(
            e.contains("storage offset 200") && e.contains("3 elements"),
            "{e}"
        );
        let v = View {
            offset: 0,
            shape: &[2, u64::MAX],
            strides: &[1, 1],
            elem: 4,
        };
        assert!(v.check(10).is_err());
        let v = View {
            offset: 0,
            shape: &[3],
            strides: &[u64::MAX],
            elem: 4,
        };
        assert!(v.check(10).unwrap_err().contains("overflows"));
    }

    #[test]
    fn swap() {
        let mut b = [1, 2, 3, 4, 5, 6, 7, 8];
        byteswap(&mut b, 4);
        assert_eq!(b, [4, 3, 2, 1, 8, 7, 6, 5]);
    }
}
