//! One set, many writers: `plan_set`, `write_set_parts`, `commit_set` and
//! `abort_set` over the library's `StagedSet` (the protocol and its
//! guarantees are documented there and in docs/saves.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorfile::set::{Sharding, SplitSummary, StagedPlan, StagedSet};
use tensorfile::{Dtype, Metadata, TensorRef, TensorSpec, WriteOptions};

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

/// What `plan_set` returns: the plan's id, its staging folder, its files
/// (their final paths) and each file's writer.
fn planned<'py>(py: Python<'py>, set: &StagedSet, out_dir: &Path) -> PyResult<Bound<'py, PyDict>> {
    let plan = set.plan();
    let d = PyDict::new(py);
    d.set_item("plan_id", plan.id())?;
    d.set_item("staging", set.stage().staging().display().to_string())?;
    let files: Vec<String> = plan
        .parts()
        .iter()
        .map(|p| out_dir.join(&p.file).display().to_string())
        .collect();
    d.set_item("files", files)?;
    let writers: Vec<usize> = plan.parts().iter().map(|p| p.writer).collect();
    d.set_item("writers", writers)?;
    d.set_item("total_size", plan.total_size())?;
    Ok(d)
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
    let set = py
        .detach(|| {
            let plan = if groups.len() == 1 && writers > 1 {
                StagedPlan::new(
                    &prefix,
                    &groups[0],
                    metadata.as_ref(),
                    &Sharding::MaxSize(max_shard_size),
                    writers,
                    &options,
                )?
            } else {
                StagedPlan::per_writer(
                    &prefix,
                    &groups,
                    max_shard_size,
                    metadata.as_ref(),
                    &options,
                )?
            };
            StagedSet::prepare(&out_dir, plan)
        })
        .map_err(|e| errors::error(e.into()))?;
    planned(py, &set, &out_dir)
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
    let mut items = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, ptr, len) in tensors {
        let dtype = Dtype::from_name(&dtype)
            .ok_or_else(|| errors::msg(format!("tensor {name:?}: unknown dtype {dtype:?}")))?;
        if len > 0 && ptr == 0 {
            return Err(errors::msg(format!(
                "tensor {name:?}: data_ptr is null but data_len is {len}"
            )));
        }
        items.push((name, dtype, shape, ptr, len));
    }
    py.detach(|| {
        let refs: Vec<TensorRef<'_>> = items
            .iter()
            .map(|(name, dtype, shape, ptr, len)| TensorRef {
                name,
                dtype: *dtype,
                shape,
                data: if *len == 0 {
                    &[]
                } else {
                    // SAFETY: the caller keeps `len` bytes at `ptr` alive and
                    // unchanged for this call (as TensorSpec's contract
                    // says); the null address was refused above.
                    unsafe { std::slice::from_raw_parts(*ptr as *const u8, *len) }
                },
            })
            .collect();
        let set = StagedSet::open(&out_dir, &prefix)?;
        let written = set.write_parts_of(writer, &refs, sync)?;
        let staging = set.stage().staging();
        Ok::<_, tensorfile::CoreError>(
            written
                .iter()
                .map(|&k| {
                    staging
                        .join(&set.plan().parts()[k].file)
                        .display()
                        .to_string()
                })
                .collect(),
        )
    })
    .map_err(|e| errors::error(e.into()))
}

fn summary<'py>(py: Python<'py>, s: &SplitSummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let files: Vec<String> = s.files.iter().map(|f| f.display().to_string()).collect();
    d.set_item("files", files)?;
    d.set_item("index", s.index.as_ref().map(|i| i.display().to_string()))?;
    d.set_item("total_size", s.total_size)?;
    Ok(d)
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
    let s = py
        .detach(|| StagedSet::open(&out_dir, &prefix)?.commit(sync))
        .map_err(|e| errors::error(e.into()))?;
    summary(py, &s)
}

/// Removes the staged set for `prefix` in `out_dir`.
#[pyfunction]
#[pyo3(signature = (out_dir, *, prefix))]
pub fn abort_set(py: Python<'_>, out_dir: PathBuf, prefix: String) -> PyResult<()> {
    py.detach(|| StagedSet::open(&out_dir, &prefix)?.abort())
        .map_err(|e| errors::error(e.into()))
}
