//! `tensorfile._native`: the extension module under the `tensorfile` Python
//! package. A thin layer over the library: it opens, reads, slices, casts
//! and writes through `tensorfile`'s own API, hands tensor bytes to Python
//! as `Buffer`s (objects with the numpy array interface, which keep the
//! memory alive), and turns the library's errors into `SafetensorError`s
//! that name the rule and the place. The Python modules beside it give the
//! safetensors API on top. The GIL is released around every read, parse
//! and write.

use pyo3::prelude::*;

mod buffer;
mod errors;
mod extras;
mod handle;
mod pyfile;
mod ranks;
mod remote;
mod sets;
mod transforms;
mod write;

pub use errors::SafetensorError;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SafetensorError", py.get_type::<SafetensorError>())?;
    m.add_class::<buffer::Buffer>()?;
    m.add_class::<handle::Handle>()?;
    m.add_class::<write::TensorSpec>()?;
    m.add_class::<write::Writer>()?;
    m.add_class::<write::Spool>()?;
    m.add_function(wrap_pyfunction!(write::serialize, m)?)?;
    m.add_function(wrap_pyfunction!(write::serialize_file, m)?)?;
    m.add_function(wrap_pyfunction!(write::deserialize, m)?)?;
    m.add_function(wrap_pyfunction!(handle::load_file, m)?)?;
    m.add_function(wrap_pyfunction!(handle::load_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(extras::validate, m)?)?;
    m.add_function(wrap_pyfunction!(extras::load_pytorch, m)?)?;
    m.add_function(wrap_pyfunction!(extras::dtype_names, m)?)?;
    m.add_function(wrap_pyfunction!(extras::is_float, m)?)?;
    m.add_function(wrap_pyfunction!(extras::dtype_bits, m)?)?;
    m.add_function(wrap_pyfunction!(extras::carrier, m)?)?;
    m.add_function(wrap_pyfunction!(extras::framework_dtype_names, m)?)?;
    m.add_function(wrap_pyfunction!(extras::inspect_json, m)?)?;
    m.add_function(wrap_pyfunction!(ranks::rank_plan, m)?)?;
    m.add_function(wrap_pyfunction!(ranks::read_rank_shares, m)?)?;
    m.add_function(wrap_pyfunction!(ranks::cooperative_plan, m)?)?;
    m.add_function(wrap_pyfunction!(ranks::read_cooperative, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::convert, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::quantize, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::edit_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::consolidate_dcp, m)?)?;
    m.add_function(wrap_pyfunction!(sets::plan_set, m)?)?;
    m.add_function(wrap_pyfunction!(sets::write_set_parts, m)?)?;
    m.add_function(wrap_pyfunction!(sets::commit_set, m)?)?;
    m.add_function(wrap_pyfunction!(sets::abort_set, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
