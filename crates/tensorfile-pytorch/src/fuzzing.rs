//! Entry points for the fuzz targets and tests of the parsers inside this
//! crate (the pickle interpreter): not part of the API.

use crate::pickle::{Limits, Pickle, PickleError};

/// Runs the restricted pickle interpreter on `data` with default
/// limits; returns the bytes it used, or its error.
pub fn pickle(data: &[u8]) -> Result<usize, PickleError> {
    Pickle::parse(data, &Limits::default()).map(|(_, used)| used)
}

/// Runs the interpreter with `limits`; returns the bytes used and the
/// bytes the interpreter held at the end.
pub fn pickle_with(data: &[u8], limits: &Limits) -> Result<(usize, usize), PickleError> {
    Pickle::parse(data, limits).map(|(p, used)| (used, p.bytes_held()))
}
