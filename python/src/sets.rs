//! One set, many writers: `plan_set`, `write_set_parts`, `commit_set` and
//! `abort_set`, each a step of tensorfile-ops' `shard` run with Python's
//! plan and tensors (`ShardRequest::run_step`), in a directory or under a
//! store's prefix, as `tensorfile shard --plan/--write-part/--commit/--abort`
//! (the protocol and its guarantees are documented at the library's
//! `StagedSet` and in docs/saves.md).

use std::collections::BTreeMap;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorfile::set::{SetStep, Sharding, StagedPlan};
use tensorfile::{Dtype, Metadata, TensorRef, TensorSpec, WriteOptions};
use tensorfile_ops::shard::{ShardReport, ShardRequest};

use crate::errors;

/// A tensor's declaration from Python: `(name, dtype code, shape)`.
type Decl = (String, String, Vec<u64>);

fn specs(decls: Vec<Decl>) -> PyResult<Vec<TensorSpec>> {
    decls
        .into_iter()
        .map(|(name, dtype, shape)| {
            let dtype = Dtype::from_name(&dtype)
                .ok_or_else(|| errors::msg(format!("tensor {name:?}: unknown dtype {dtype:?}")))?;
            Ok(TensorSpec::new(name, dtype, shape))
        })
        .collect()
}

/// The request of `step` on the set `prefix` at `out_dir`.
fn request(out_dir: PathBuf, prefix: String, sync: bool, step: SetStep) -> ShardRequest {
    ShardRequest {
        out_dir,
        prefix,
        sync,
        step: Some(step),
        ..ShardRequest::default()
    }
}

/// Runs `step` without the GIL, with the plan and tensors given.
fn run<T: tensorfile::TensorData>(
    py: Python<'_>,
    request: &ShardRequest,
    plan: Option<StagedPlan>,
    tensors: &[T],
) -> PyResult<ShardReport> {
    py.detach(|| request.run_step(plan, tensors))
        .map_err(errors::error)
}

fn paths(files: &[PathBuf]) -> Vec<String> {
    files.iter().map(|f| f.display().to_string()).collect()
}

/// Stages a plan in `out_dir`: `groups` is a list, per writer, of
/// `(name, dtype code, shape)`. With one group and `writers` > 1, the
/// group's tensors are split by size and the files dealt round-robin;
/// otherwise each writer's own tensors are split into files of its own.
#[pyfunction]
#[pyo3(signature = (out_dir, groups, *, max_shard_size, prefix, metadata = None, writers = 1))]
pub fn plan_set<'py>(
    py: Python<'py>,
    out_dir: PathBuf,
    groups: Vec<Vec<Decl>>,
    max_shard_size: u64,
    prefix: String,
    metadata: Option<BTreeMap<String, String>>,
    writers: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let metadata: Option<Metadata> = metadata;
    let groups = groups
        .into_iter()
        .map(specs)
        .collect::<PyResult<Vec<_>>>()?;
    let options = WriteOptions::default();
    let plan = py
        .detach(|| {
            if groups.len() == 1 && writers > 1 {
                StagedPlan::new(
                    &prefix,
                    &groups[0],
                    metadata.as_ref(),
                    &Sharding::MaxSize(max_shard_size),
                    writers,
                    &options,
                )
            } else {
                StagedPlan::per_writer(
                    &prefix,
                    &groups,
                    max_shard_size,
                    metadata.as_ref(),
                    &options,
                )
            }
        })
        .map_err(|e| errors::error(e.into()))?;
    let file_writers: Vec<usize> = plan.parts().iter().map(|p| p.writer).collect();
    let step = SetStep::Plan {
        writers: plan.writers(),
    };
    let report = run::<TensorRef<'_>>(py, &request(out_dir, prefix, true, step), Some(plan), &[])?;
    let d = PyDict::new(py);
    d.set_item("plan_id", report.plan_id)?;
    d.set_item("staging", report.staging.map(|p| p.display().to_string()))?;
    d.set_item("files", paths(&report.files))?;
    d.set_item("writers", file_writers)?;
    d.set_item("total_size", report.total_size)?;
    Ok(d)
}

/// Writes the files the staged plan gives `writer`, from `tensors`: a list
/// of `(name, dtype code, shape, data address, data length)` whose memory
/// the caller keeps alive for the call. Returns the staged paths.
#[pyfunction]
#[pyo3(signature = (out_dir, tensors, writer, *, prefix, sync = true))]
pub fn write_set_parts(
    py: Python<'_>,
    out_dir: PathBuf,
    tensors: Vec<(String, String, Vec<u64>, usize, usize)>,
    writer: usize,
    prefix: String,
    sync: bool,
) -> PyResult<Vec<String>> {
    let specs = crate::write::Specs::from_tuples(tensors)?;
    let refs = specs.refs();
    let step = SetStep::WritePart { writer };
    let report = run(py, &request(out_dir, prefix, sync, step), None, &refs)?;
    Ok(paths(&report.files))
}

/// Checks every staged part, publishes them, writes the index last and
/// removes the staging folder. Returns `{"files", "index", "total_size"}`.
#[pyfunction]
#[pyo3(signature = (out_dir, *, prefix, sync = true))]
pub fn commit_set<'py>(
    py: Python<'py>,
    out_dir: PathBuf,
    prefix: String,
    sync: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let request = request(out_dir, prefix, sync, SetStep::Commit);
    let report = run::<TensorRef<'_>>(py, &request, None, &[])?;
    let d = PyDict::new(py);
    d.set_item("files", paths(&report.files))?;
    d.set_item("index", report.index.map(|i| i.display().to_string()))?;
    d.set_item("total_size", report.total_size)?;
    Ok(d)
}

/// Removes the staged set for `prefix` in `out_dir`.
#[pyfunction]
#[pyo3(signature = (out_dir, *, prefix))]
pub fn abort_set(py: Python<'_>, out_dir: PathBuf, prefix: String) -> PyResult<()> {
    run::<TensorRef<'_>>(
        py,
        &request(out_dir, prefix, true, SetStep::Abort),
        None,
        &[],
    )
    .map(drop)
}
