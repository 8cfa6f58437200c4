//! The PyTorch loader's tests: one binary, so that the library is linked once;
//! each file is a module.

mod hostile;
mod manifest;
mod no_panic;
mod weights_only;
