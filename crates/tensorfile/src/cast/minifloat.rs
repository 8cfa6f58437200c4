//! Small binary floating-point formats, described by a few numbers, with one
//! exact encoder and one decoder for all of them.
//!
//! No maintained crate covers the 8-, 6- and 4-bit formats with ml_dtypes'
//! conventions (overflow to NaN for the "fn"/"fnuz" types, NaN to negative
//! zero for F4/F6, ties-up for E8M0), so they are written here once,
//! parameterized by [`Format`], and checked against the ml_dtypes vectors.
//!
//! Values enter the encoder as an exact triple `(-1)^neg * sig * 2^exp`, so
//! f32, f64 and 64-bit integers all round exactly once.

/// What a format does with a value beyond its largest finite magnitude
/// (infinities included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// Becomes infinity: this magnitude code (exponent all ones, mantissa 0).
    Inf(u32),
    /// Becomes the format's NaN.
    Nan,
    /// Clamps to the largest finite magnitude (formats with neither NaN nor infinity).
    Saturate,
}

/// How a NaN input is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NanRule {
    /// A fixed code for positive and for negative NaN.
    Fixed {
        /// Code for a NaN whose sign bit is clear.
        pos: u32,
        /// Code for a NaN whose sign bit is set.
        neg: u32,
    },
    /// IEEE style, as numpy does for F16: keep the sign and the top payload
    /// bits, forcing a nonzero mantissa.
    KeepPayload,
}

/// A small float format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Format {
    /// Total width in bits.
    pub bits: u32,
    /// Mantissa (fraction) bits.
    pub mbits: u32,
    /// Exponent bias.
    pub bias: i32,
    /// Whether the top bit is a sign bit (false only for E8M0).
    pub signed: bool,
    /// Whether negative zero exists (false for the "fnuz" types, whose 0x80 is NaN).
    pub neg_zero: bool,
    /// Largest finite magnitude code (sign bit clear).
    pub max_finite: u32,
    /// Overflow behaviour without the `saturate` option.
    pub overflow: Overflow,
    /// NaN encoding.
    pub nan: NanRule,
    /// Whether `saturate` applies (the F8 types).
    pub saturable: bool,
    /// Whether this is E8M0: powers of two only, exponent field 0 is 2^-127
    /// (no subnormals, no zero), ties round up.
    pub e8m0: bool,
}

impl Format {
    const fn ieee(bits: u32, mbits: u32, bias: i32, max_finite: u32) -> Format {
        Format {
            bits,
            mbits,
            bias,
            signed: true,
            neg_zero: true,
            max_finite,
            overflow: Overflow::Inf(max_finite + 1),
            nan: NanRule::KeepPayload,
            saturable: false,
            e8m0: false,
        }
    }

    /// The sign bit, as a code.
    pub const fn sign_bit(&self) -> u32 {
        1 << (self.bits - 1)
    }

    /// Smallest positive normal value's exponent.
    const fn emin(&self) -> i32 {
        1 - self.bias
    }
}

/// IEEE binary16 (numpy's float16 NaN conventions).
pub(crate) const F16: Format = Format::ieee(16, 10, 15, 0x7BFF);

/// bfloat16 (ml_dtypes: NaN becomes 0x7FC0 with the input's sign).
pub(crate) const BF16: Format = Format {
    nan: NanRule::Fixed {
        pos: 0x7FC0,
        neg: 0xFFC0,
    },
    ..Format::ieee(16, 7, 127, 0x7F7F)
};

/// F8_E5M2: IEEE-like, with infinities.
pub(crate) const F8_E5M2: Format = Format {
    nan: NanRule::Fixed {
        pos: 0x7E,
        neg: 0xFE,
    },
    saturable: true,
    ..Format::ieee(8, 2, 15, 0x7B)
};

/// F8_E4M3 ("fn"): no infinity, NaN is S.1111.111, overflow is NaN.
pub(crate) const F8_E4M3: Format = Format {
    bits: 8,
    mbits: 3,
    bias: 7,
    signed: true,
    neg_zero: true,
    max_finite: 0x7E,
    overflow: Overflow::Nan,
    nan: NanRule::Fixed {
        pos: 0x7F,
        neg: 0xFF,
    },
    saturable: true,
    e8m0: false,
};

/// F8_E4M3FNUZ: no infinity, no negative zero, NaN is 0x80, bias 8.
pub(crate) const F8_E4M3FNUZ: Format = Format {
    bias: 8,
    neg_zero: false,
    max_finite: 0x7F,
    nan: NanRule::Fixed {
        pos: 0x80,
        neg: 0x80,
    },
    ..F8_E4M3
};

/// F8_E5M2FNUZ: no infinity, no negative zero, NaN is 0x80, bias 16.
pub(crate) const F8_E5M2FNUZ: Format = Format {
    mbits: 2,
    bias: 16,
    ..F8_E4M3FNUZ
};

/// F8_E8M0 ("fnu"): 2^(code - 127), 0xFF is NaN; no sign, no zero.
pub(crate) const F8_E8M0: Format = Format {
    bits: 8,
    mbits: 0,
    bias: 127,
    signed: false,
    neg_zero: false,
    max_finite: 0xFE,
    overflow: Overflow::Nan,
    nan: NanRule::Fixed {
        pos: 0xFF,
        neg: 0xFF,
    },
    saturable: true,
    e8m0: true,
};

/// F4 (E2M1): no NaN, no infinity; ml_dtypes maps NaN to -0 (and -NaN to +0).
pub(crate) const F4: Format = Format {
    bits: 4,
    mbits: 1,
    bias: 1,
    signed: true,
    neg_zero: true,
    max_finite: 0x7,
    overflow: Overflow::Saturate,
    nan: NanRule::Fixed { pos: 0x8, neg: 0x0 },
    saturable: false,
    e8m0: false,
};

/// F6_E2M3: no NaN, no infinity.
pub(crate) const F6_E2M3: Format = Format {
    bits: 6,
    mbits: 3,
    bias: 1,
    max_finite: 0x1F,
    nan: NanRule::Fixed {
        pos: 0x20,
        neg: 0x0,
    },
    ..F4
};

/// F6_E3M2: no NaN, no infinity.
pub(crate) const F6_E3M2: Format = Format {
    mbits: 2,
    bias: 3,
    ..F6_E2M3
};

/// An exactly representable input value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exact {
    /// NaN, with its sign and payload (fraction bits, left-aligned in 64 bits).
    Nan { neg: bool, payload: u64 },
    /// Infinity.
    Inf { neg: bool },
    /// Zero.
    Zero { neg: bool },
    /// `(-1)^neg * sig * 2^exp`, `sig != 0`.
    Finite { neg: bool, sig: u64, exp: i32 },
}

impl Exact {
    /// Splits an f32.
    pub fn from_f32(x: f32) -> Exact {
        let b = x.to_bits();
        let neg = b >> 31 != 0;
        let e = ((b >> 23) & 0xFF) as i32;
        let m = (b & 0x7F_FFFF) as u64;
        match (e, m) {
            (0xFF, 0) => Exact::Inf { neg },
            (0xFF, m) => Exact::Nan {
                neg,
                payload: m << 41,
            },
            (0, 0) => Exact::Zero { neg },
            (0, m) => Exact::Finite {
                neg,
                sig: m,
                exp: -149,
            },
            (e, m) => Exact::Finite {
                neg,
                sig: m | 1 << 23,
                exp: e - 150,
            },
        }
    }

    /// Splits an f64.
    pub fn from_f64(x: f64) -> Exact {
        let b = x.to_bits();
        let neg = b >> 63 != 0;
        let e = ((b >> 52) & 0x7FF) as i32;
        let m = b & 0xF_FFFF_FFFF_FFFF;
        match (e, m) {
            (0x7FF, 0) => Exact::Inf { neg },
            (0x7FF, m) => Exact::Nan {
                neg,
                payload: m << 12,
            },
            (0, 0) => Exact::Zero { neg },
            (0, m) => Exact::Finite {
                neg,
                sig: m,
                exp: -1074,
            },
            (e, m) => Exact::Finite {
                neg,
                sig: m | 1 << 52,
                exp: e - 1075,
            },
        }
    }

    /// An integer, exactly.
    pub fn from_i128(v: i128) -> Exact {
        let neg = v < 0;
        let mag = v.unsigned_abs();
        if mag == 0 {
            return Exact::Zero { neg: false };
        }
        // Integers of the dtype table fit 64 bits of magnitude; fold any
        // wider value's low bits into a sticky bit so rounding stays exact.
        let lz = mag.leading_zeros();
        if lz >= 64 {
            Exact::Finite {
                neg,
                sig: mag as u64,
                exp: 0,
            }
        } else {
            let shift = 64 - lz;
            let sticky = u64::from(mag & ((1u128 << shift) - 1) != 0);
            Exact::Finite {
                neg,
                sig: ((mag >> shift) as u64) << 1 | sticky,
                exp: shift as i32 - 1,
            }
        }
    }
}

/// Encodes an exact value into `fmt` with one rounding (to nearest, ties to
/// even; ties up for E8M0). Returns the code in the low `fmt.bits` bits.
pub(crate) fn encode(fmt: &Format, x: Exact, saturate: bool) -> u32 {
    let saturate = saturate && fmt.saturable;
    let (neg, mag) = match x {
        Exact::Nan { neg, payload } => return nan_code(fmt, neg, payload),
        Exact::Inf { neg } => (neg, u32::MAX),
        Exact::Zero { neg } => (neg, 0),
        Exact::Finite { neg, sig, exp } => (neg, magnitude(fmt, sig, exp)),
    };
    if fmt.e8m0 {
        // No sign and no zero: negatives and zeros are NaN; tiny positives
        // clamp to the smallest code (ml_dtypes).
        if neg || matches!(x, Exact::Zero { .. }) {
            return nan_code(fmt, neg, 0);
        }
    }
    let mag = if mag > fmt.max_finite {
        match (saturate, fmt.overflow) {
            (true, _) | (false, Overflow::Saturate) => fmt.max_finite,
            (false, Overflow::Inf(inf)) => inf,
            (false, Overflow::Nan) => return nan_code(fmt, neg, 0),
        }
    } else {
        mag
    };
    if !fmt.signed || !neg || (mag == 0 && !fmt.neg_zero) {
        mag
    } else {
        mag | fmt.sign_bit()
    }
}

fn nan_code(fmt: &Format, neg: bool, payload: u64) -> u32 {
    match fmt.nan {
        NanRule::Fixed { pos, neg: n } => {
            if neg {
                n
            } else {
                pos
            }
        }
        NanRule::KeepPayload => {
            let ebits = fmt.bits - 1 - fmt.mbits;
            let top = (payload >> (64 - fmt.mbits)) as u32;
            let m = if top == 0 { 1 } else { top };
            let code = ((1 << ebits) - 1) << fmt.mbits | m;
            if neg {
                code | fmt.sign_bit()
            } else {
                code
            }
        }
    }
}

/// The rounded magnitude code of `sig * 2^exp` (`sig != 0`), possibly above
/// `max_finite` (saturated to `u32::MAX` far out of range).
fn magnitude(fmt: &Format, sig: u64, exp: i32) -> u32 {
    // floor(log2(value))
    let e = exp + (63 - sig.leading_zeros() as i32);
    if fmt.e8m0 {
        let msb = 63 - sig.leading_zeros();
        let up = if e == -fmt.bias {
            // Between 2^-127 and 2^-126 (f32 subnormals) ml_dtypes rounds
            // anything above 2^-127 up.
            sig != 1 << msb
        } else {
            // Round half up: up iff the bit after the leading one is set.
            msb > 0 && (sig >> (msb - 1)) & 1 == 1
        };
        let code = e + fmt.bias + i32::from(up);
        return code.clamp(0, 0x100) as u32;
    }
    let m = fmt.mbits as i32;
    // Exponent of the quantum (one unit in the last place) at this magnitude.
    let q = e.max(fmt.emin()) - m;
    let shift = q - exp;
    let n: u64 = if shift <= 0 {
        // Exact: fewer significant bits than the format holds, so no overflow.
        sig << (-shift) as u32
    } else if shift >= 66 {
        0 // below half the smallest quantum
    } else {
        let s = sig as u128;
        let kept = s >> shift;
        let rem = s & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        let up = rem > half || (rem == half && kept & 1 == 1);
        (kept + u128::from(up)) as u64
    };
    // One formula for normals and subnormals: (biased exponent - 1) shifted
    // into place, plus the significand with its implicit bit (which carries
    // into the exponent when rounding up). For subnormals q + m is emin =
    // 1 - bias, so the exponent term is 0.
    let biased = (q + m + fmt.bias - 1) as i64;
    let code = (biased << m) + n as i64;
    code.clamp(0, u32::MAX as i64) as u32
}

/// Decodes a code into the bits of the f32 it denotes (every format here is
/// exactly representable in f32). NaNs decode to the quiet NaN with the
/// code's sign, as ml_dtypes does.
pub(crate) const fn decode_bits(fmt: &Format, code: u32) -> u32 {
    if fmt.e8m0 {
        return match code {
            0xFF => 0x7FC0_0000,
            0 => 0x0040_0000, // 2^-127 is an f32 subnormal
            c => c << 23,
        };
    }
    let neg = fmt.signed && code & fmt.sign_bit() != 0;
    let sign = if neg { 0x8000_0000 } else { 0 };
    let mag = code & (fmt.sign_bit() - 1);
    if is_nan_code(fmt, code) {
        return sign | 0x7FC0_0000;
    }
    if let Overflow::Inf(inf) = fmt.overflow {
        if mag == inf {
            return sign | 0x7F80_0000;
        }
    }
    let m = fmt.mbits;
    let efield = (mag >> m) as i32;
    let frac = mag & ((1 << m) - 1);
    if efield == 0 {
        if frac == 0 {
            return sign;
        }
        // Subnormal: frac * 2^(emin - m); normalize for f32.
        let lz = frac.leading_zeros() as i32 - (32 - m as i32);
        let e = fmt.emin() - 1 - lz; // exponent of the leading one
        let f = (frac << (lz + 1)) & ((1 << m) - 1);
        return sign | (((e + 127) as u32) << 23) | f << (23 - m);
    }
    let e = efield - fmt.bias;
    sign | (((e + 127) as u32) << 23) | frac << (23 - m)
}

/// Whether `code` is a NaN of `fmt`.
pub(crate) const fn is_nan_code(fmt: &Format, code: u32) -> bool {
    let mag = code & (fmt.sign_bit() - 1);
    match (fmt.overflow, fmt.nan) {
        // F4/F6 have no NaN: their "NaN codes" are zeros.
        (Overflow::Saturate, _) => false,
        // IEEE-like: every code with exponent all ones and a nonzero mantissa.
        (Overflow::Inf(inf), _) => mag > inf,
        (Overflow::Nan, NanRule::Fixed { pos, neg }) => code == pos || code == neg,
        (Overflow::Nan, NanRule::KeepPayload) => false,
    }
}

/// A table of the f32 bits of every code of an 8-bit-or-narrower format.
pub(crate) const fn table<const N: usize>(fmt: &Format) -> [u32; N] {
    let mut t = [0u32; N];
    let mut i = 0;
    while i < N {
        t[i] = decode_bits(fmt, i as u32);
        i += 1;
    }
    t
}

/// What [`encode_f32_fast`] does with overflow, decided once per slice so
/// the per-value code has no branch on the options.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OverflowTo {
    /// The magnitude an overflowing value gets (max finite or infinity).
    mag: u32,
    /// Whether overflow gives NaN instead.
    nan: bool,
}

impl OverflowTo {
    /// The overflow rule of `fmt` under the `saturate` option.
    #[inline(always)]
    pub fn new(fmt: &Format, saturate: bool) -> OverflowTo {
        match (saturate && fmt.saturable, fmt.overflow) {
            (true, _) | (false, Overflow::Saturate) => OverflowTo {
                mag: fmt.max_finite,
                nan: false,
            },
            (false, Overflow::Inf(inf)) => OverflowTo {
                mag: inf,
                nan: false,
            },
            (false, Overflow::Nan) => OverflowTo { mag: 0, nan: true },
        }
    }
}

/// Encodes an f32 into a format with subnormals (every format here but
/// E8M0), branch-free so that loops over slices vectorize. Same result as
/// [`encode`] on `Exact::from_f32(x)`.
///
/// The normal range rounds with integer arithmetic on the f32 bits (add
/// half a quantum minus one plus the lowest kept bit, then truncate: ties
/// to even). The subnormal range lets the FPU round: adding
/// `2^(emin - m + 23)` puts the quantum at the f32 unit in the last place.
#[inline(always)]
pub(crate) fn encode_f32_fast(fmt: &Format, x: f32, ovf: OverflowTo) -> u32 {
    let bits = x.to_bits();
    let neg = bits >> 31 != 0;
    let a = bits & 0x7FFF_FFFF;
    let m = fmt.mbits;
    let sh = 23 - m;
    let min_normal_bits = ((fmt.emin() + 127) as u32) << 23;
    let rounded = a + ((1 << (sh - 1)) - 1) + ((a >> sh) & 1);
    let normal = (rounded >> sh).wrapping_sub(((127 - fmt.bias) as u32) << m);
    let magic = f32::from_bits(((fmt.emin() - m as i32 + 23 + 127) as u32) << 23);
    let sub = (f32::from_bits(a) + magic)
        .to_bits()
        .wrapping_sub(magic.to_bits());
    let mag = if a < min_normal_bits { sub } else { normal };
    let over = mag > fmt.max_finite;
    let mag = if over { ovf.mag } else { mag };
    let to_nan = (a > 0x7F80_0000) | (over & ovf.nan);
    let keep_sign = neg & (fmt.neg_zero | (mag != 0));
    let signed = mag | if keep_sign { fmt.sign_bit() } else { 0 };
    let (nan_pos, nan_neg) = match fmt.nan {
        NanRule::Fixed { pos, neg } => (pos, neg),
        // Only F16 keeps payloads, and F16 does not come through here.
        NanRule::KeepPayload => (0, 0),
    };
    let nan = if neg { nan_neg } else { nan_pos };
    if to_nan {
        nan
    } else {
        signed
    }
}

/// Encodes an f32 into E8M0 (see [`F8_E8M0`]), branch-free.
#[inline(always)]
pub(crate) fn encode_f32_e8m0(x: f32, saturate: bool) -> u32 {
    let bits = x.to_bits();
    let a = bits & 0x7FFF_FFFF;
    // Half up: adding half the mantissa range carries into the exponent.
    let normal = (a + 0x40_0000) >> 23;
    // f32 subnormals: 2^-127 is 0x0040_0000; ml_dtypes rounds anything above it up.
    let sub = u32::from(a > 0x0040_0000);
    let code = if a < 0x0080_0000 { sub } else { normal };
    let code = if code > 0xFE {
        if saturate && a <= 0x7F80_0000 {
            0xFE
        } else {
            0xFF
        }
    } else {
        code
    };
    if bits >> 31 != 0 || a == 0 || a > 0x7F80_0000 {
        0xFF
    } else {
        code
    }
}
