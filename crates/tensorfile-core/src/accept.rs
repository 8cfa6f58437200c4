//! Which dtypes a reader accepts: every one by default, or a named subset
//! (a course's contract, a runtime that only computes in F32).
//!
//! A well-formed file holding a dtype outside the set is refused with
//! [`crate::Error::UnsupportedFormat`], which is distinct from a malformed
//! file ([`crate::Error::Format`]).
//!
//! ```
//! use tensorfile_core::{Accept, Dtype, DtypeSet};
//! let f32_only = Accept::new("F32 only", DtypeSet::of(&[Dtype::F32]));
//! assert!(f32_only.allows(Dtype::F32));
//! assert!(!f32_only.allows(Dtype::BF16));
//! assert!(Accept::default().allows(Dtype::BF16));
//! ```

use std::fmt;

use crate::Dtype;

/// A set of dtypes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DtypeSet(u64);

impl DtypeSet {
    /// Every dtype.
    pub const ALL: DtypeSet = DtypeSet(u64::MAX);

    /// The set of these dtypes.
    pub const fn of(dtypes: &[Dtype]) -> DtypeSet {
        let mut bits = 0u64;
        let mut i = 0;
        while i < dtypes.len() {
            bits |= 1 << dtypes[i] as u8;
            i += 1;
        }
        DtypeSet(bits)
    }

    /// Whether `dtype` is in the set.
    pub const fn contains(self, dtype: Dtype) -> bool {
        self.0 & (1 << dtype as u8) != 0
    }
}

/// The dtypes a reader accepts, with a name for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Accept {
    name: &'static str,
    dtypes: DtypeSet,
}

impl Default for Accept {
    /// Every dtype of the format.
    fn default() -> Accept {
        Accept::new("any dtype", DtypeSet::ALL)
    }
}

impl Accept {
    /// Accepts `dtypes`; `name` says which policy this is in errors
    /// (`"contract v0 (F32 only)"`).
    pub const fn new(name: &'static str, dtypes: DtypeSet) -> Accept {
        Accept { name, dtypes }
    }

    /// Whether tensors of this dtype are accepted.
    pub const fn allows(self, dtype: Dtype) -> bool {
        self.dtypes.contains(dtype)
    }

    /// Whether every dtype is accepted.
    pub fn is_any(self) -> bool {
        self.dtypes == DtypeSet::ALL
    }

    /// The policy's name.
    pub fn name(self) -> &'static str {
        self.name
    }
}

impl fmt::Display for Accept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}
