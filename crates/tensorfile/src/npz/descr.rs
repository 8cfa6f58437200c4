//! numpy dtype strings and safetensors dtypes, both ways.
//!
//! A dtype string is a byte order (`<` little, `>` big, `|` not
//! applicable, `=` native), a kind and an item size: `<f4`, `|b1`, `>i8`.
//! Every numpy dtype with a safetensors dtype maps to it; the types of
//! `ml_dtypes` (bfloat16, float8, float4, float6), which numpy saves as
//! opaque items (`<V2`, `<V1`, and `<f1` for float8_e5m2), are
//! [`Element::Opaque`]: the file does not say what they hold.

use crate::Dtype;

/// What an array's items are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    /// A dtype safetensors has, stored in this byte order.
    Plain {
        /// The safetensors dtype.
        dtype: Dtype,
        /// Whether the bytes of each value are big-endian.
        big_endian: bool,
    },
    /// Items of `itemsize` bytes whose meaning the file does not give (how
    /// numpy saves ml_dtypes arrays): read as the dtype the caller names.
    Opaque {
        /// Bytes per item.
        itemsize: u8,
    },
}

/// What a dtype string is, or why it is refused (the reason, in words).
///
/// # Errors
/// A dtype with no safetensors dtype (`<c16`, `<U2`, `|S2`, `<M8[s]`,
/// `<f16`), or one that needs pickle (`|O`).
pub(crate) fn element(descr: &str) -> Result<Element, String> {
    let (order, rest) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('=', descr),
    };
    // Native order: this library runs on little-endian machines only (a
    // file from numpy never says `=`: it writes the resolved order).
    let big_endian = order == '>';
    let kind = rest.chars().next().unwrap_or('?');
    let size: Option<u8> = rest.get(1..).and_then(|s| s.parse().ok());
    let plain = |dtype: Dtype| {
        Ok(Element::Plain {
            dtype,
            big_endian: big_endian && dtype.bits() > 8,
        })
    };
    // numpy's own types: the core's dtype table has their strings.
    if let Some(dtype) = size.and_then(|n| Dtype::from_numpy_kind(&format!("{kind}{n}"))) {
        return plain(dtype);
    }
    match (kind, size) {
        // ml_dtypes: float8_e5m2 says 'f1', the others 'V1' / 'V2'.
        ('f', Some(1)) | ('V', Some(1 | 2)) => Ok(Element::Opaque {
            itemsize: size.unwrap_or(1),
        }),
        ('O', _) => {
            Err("an object array: its data is a pickle, which tensorfile does not run".into())
        }
        ('c', _) => {
            Err("a complex type safetensors has no dtype for (it has C64, numpy's '<c8')".into())
        }
        ('f', _) => Err("a float width safetensors has no dtype for".into()),
        ('U' | 'S' | 'a', _) => Err("a string type: safetensors holds numbers only".into()),
        ('M' | 'm', _) => {
            Err("a datetime or timedelta type: safetensors has no dtype for it".into())
        }
        ('V', _) => Err("opaque items of a width no safetensors dtype has".into()),
        _ => Err("not a numpy dtype string tensorfile knows".into()),
    }
}

/// How the items of an opaque array hold `dtype`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opaque {
    /// Each item is one value's bytes, as they are.
    Whole,
    /// Each 1-byte item holds one value of this many bits in its low bits
    /// (packed into a bit stream for safetensors).
    LowBits(u32),
    /// The items cannot hold the dtype's values.
    Misfit,
}

/// How the items of an opaque array (of `itemsize` bytes) become `dtype`'s.
pub fn opaque_as(itemsize: u8, dtype: Dtype) -> Opaque {
    let bits = dtype.bits();
    if bits == 8 * u32::from(itemsize) {
        Opaque::Whole
    } else if dtype.is_sub_byte() && itemsize == 1 {
        Opaque::LowBits(bits)
    } else {
        Opaque::Misfit
    }
}

/// The dtype string an array of `dtype` is saved with, as numpy saves the
/// same array (ml_dtypes' strings for the types numpy has not), and
/// whether the values are unpacked to one per byte first (F4, F6).
pub fn descr_of(dtype: Dtype) -> (&'static str, bool) {
    if let Some(typestr) = dtype.numpy_typestr() {
        return (typestr, false);
    }
    // ml_dtypes' items, as numpy saves them: opaque bytes of the value's
    // width, except float8_e5m2's, which numpy calls 'f1'; a value below a
    // byte is saved one to a byte.
    match dtype {
        Dtype::F8_E5M2 => ("<f1", false),
        d if d.is_sub_byte() => ("<V1", true),
        d if d.size() == Some(2) => ("<V2", false),
        _ => ("<V1", false),
    }
}

/// Bytes swapped as a unit in a big-endian array of `dtype`: the value's
/// width, a component's for complex numbers.
pub fn swap_unit(dtype: Dtype) -> usize {
    match dtype {
        Dtype::C64 => 4,
        d => (d.bits() / 8) as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_comes_back() {
        for &d in Dtype::ALL {
            let (descr, unpacked) = descr_of(d);
            match element(descr).unwrap() {
                Element::Plain { dtype, big_endian } => {
                    assert_eq!(dtype, d);
                    assert!(!big_endian);
                }
                Element::Opaque { itemsize } => {
                    let packed = matches!(opaque_as(itemsize, d), Opaque::LowBits(_));
                    assert_eq!(packed, unpacked, "{d}");
                    assert_ne!(opaque_as(itemsize, d), Opaque::Misfit, "{d}");
                }
            }
        }
        assert_eq!(
            element(">f8").unwrap(),
            Element::Plain {
                dtype: Dtype::F64,
                big_endian: true
            }
        );
        assert_eq!(
            element(">i1").unwrap(),
            Element::Plain {
                dtype: Dtype::I8,
                big_endian: false
            }
        );
        for bad in [
            "|O", "<c16", "<U2", "|S2", "<M8[s]", "<f16", "|V3", "", "<", "x4",
        ] {
            assert!(element(bad).is_err(), "{bad}");
        }
        assert_eq!(opaque_as(2, Dtype::F8_E4M3), Opaque::Misfit);
        assert_eq!(opaque_as(2, Dtype::F4), Opaque::Misfit);
    }
}
