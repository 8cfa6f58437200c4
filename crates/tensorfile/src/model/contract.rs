//! The course's reading contracts: which dtypes a reader of a course model
//! accepts (a policy of the course this toolkit serves, not of the format).

use std::fmt;

use crate::{Accept, Dtype, DtypeSet};

/// Which dtypes a reader accepts. A well-formed file with a dtype outside
/// the contract is refused with the core's `UnsupportedFormat` error,
/// distinct from a malformed file. Pass one to
/// [`ReadOptions::accept`](crate::ReadOptions::accept).
///
/// ```
/// use tensorfile::{Contract, Dtype, ReadOptions};
/// let options = ReadOptions::default().accept(Contract::V0);
/// assert!(!options.accept.allows(Dtype::BF16));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Contract {
    /// Every dtype of the format.
    #[default]
    Any,
    /// The course's contract v0 (its first lessons and its tracer engine):
    /// F32 only.
    V0,
}

impl Contract {
    /// Whether the contract allows tensors of this dtype.
    pub fn allows(self, dtype: Dtype) -> bool {
        Accept::from(self).allows(dtype)
    }
}

impl From<Contract> for Accept {
    fn from(c: Contract) -> Accept {
        match c {
            Contract::Any => Accept::default(),
            Contract::V0 => Accept::new("contract v0 (F32 only)", DtypeSet::of(&[Dtype::F32])),
        }
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Contract::Any => "any (every dtype)",
            Contract::V0 => "v0 (F32 only)",
        })
    }
}
