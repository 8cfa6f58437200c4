//! Loading across processes (`tensorfile_core::ranks`): each rank's share
//! of a tensor-parallel layout, and cooperative loads' segments, planned
//! and read here; the collectives are the Python layer's (torch's).

use pyo3::prelude::*;
use tensorfile_core::ranks::{rank_plan as plan_ranks, Cooperative, RankRules, Share};

use crate::errors;
use crate::handle::Handle;

/// One share as Python sees it: name, dtype code, share shape, full shape,
/// the dimension split (None: whole) and the parts along it.
type PyShare = (
    String,
    &'static str,
    Vec<u64>,
    Vec<u64>,
    Option<usize>,
    Vec<(u64, u64)>,
);

/// A tensor of a cooperative layout as Python sees it: name, dtype code,
/// shape, offset in the flat buffer, bytes.
type PyPlaced = (String, &'static str, Vec<u64>, u64, u64);

/// Rules from their text, or a preset's name (a word without `=`).
fn rules(text: &str) -> tensorfile_core::Result<RankRules> {
    let word = text.trim();
    if !word.contains('=') && !word.is_empty() && !word.contains(char::is_whitespace) {
        RankRules::preset(word)
    } else {
        RankRules::parse(text)
    }
}

/// The error, naming the file or set opened (rule text errors name their
/// line instead).
fn named(handle: &Handle, e: tensorfile_core::Error) -> PyErr {
    match (handle.opened(), &e) {
        (_, tensorfile_core::Error::RankRules { .. }) | (None, _) => errors::error(e.into()),
        (Some(path), _) => errors::error(e.at(path).into()),
    }
}

fn shares(handle: &Handle, text: &str, world: usize, rank: usize) -> PyResult<Vec<Share>> {
    let source = handle.source()?;
    let rules = rules(text).map_err(|e| named(handle, e))?;
    plan_ranks(source.infos(), &rules, world, rank).map_err(|e| named(handle, e))
}

/// Rank `rank`'s shares of the tensors open in `handle` under `rules`
/// (rule text or a preset's name) with `world` ranks, in data order.
#[pyfunction]
pub fn rank_plan(
    handle: &Handle,
    rules: &str,
    world: usize,
    rank: usize,
) -> PyResult<Vec<PyShare>> {
    Ok(shares(handle, rules, world, rank)?
        .into_iter()
        .map(|s| {
            let parts = s.parts.iter().map(|p| (p.start, p.end)).collect();
            (s.name, s.dtype.name(), s.shape, s.full_shape, s.dim, parts)
        })
        .collect())
}

/// Reads rank `rank`'s shares named in `outs` (name, address, length: the
/// Python layer's checked, C-contiguous, writable memory of each share's
/// size, alive and untouched until this returns), the interpreter released.
#[pyfunction]
pub fn read_rank_shares(
    py: Python<'_>,
    handle: &Handle,
    rules: &str,
    world: usize,
    rank: usize,
    outs: Vec<(String, usize, usize)>,
) -> PyResult<()> {
    let plan = shares(handle, rules, world, rank)?;
    let source = handle.source()?;
    py.detach(|| -> tensorfile_core::Result<()> {
        for (name, address, length) in &outs {
            let share = plan.iter().find(|s| &s.name == name).ok_or_else(|| {
                tensorfile_core::Error::NotFound(format!("{name} (in rank {rank}'s plan)"))
            })?;
            let ptr = if *length == 0 {
                std::ptr::NonNull::<u8>::dangling().as_ptr()
            } else {
                *address as *mut u8
            };
            // SAFETY: `length` writable bytes at `address`, alive and
            // untouched by anyone else during this call (see above); a
            // dangling, aligned pointer for no bytes.
            let out = unsafe { std::slice::from_raw_parts_mut(ptr, *length) };
            share.read_into(&*source, out)?;
        }
        Ok(())
    })
    .map_err(|e| errors::error(e.into()))
}

/// The layout of the tensors named (all when `names` is None), in data
/// order; a name the file does not hold is an error naming it.
fn layout(handle: &Handle, world: usize, names: Option<&[String]>) -> PyResult<Cooperative> {
    let source = handle.source()?;
    let infos = source.infos();
    let chosen = match names {
        None => infos,
        Some(names) => {
            let wanted: std::collections::HashSet<&str> =
                names.iter().map(String::as_str).collect();
            if let Some(missing) = names
                .iter()
                .find(|n| !infos.iter().any(|i| i.name == n.as_str()))
            {
                return Err(named(
                    handle,
                    tensorfile_core::Error::NotFound(missing.clone()),
                ));
            }
            infos
                .into_iter()
                .filter(|i| wanted.contains(i.name))
                .collect()
        }
    };
    Cooperative::new(chosen, world).map_err(|e| named(handle, e))
}

/// The cooperative layout of the tensors open in `handle` (those in
/// `names`, or all) for `world` ranks: the flat buffer's length and each
/// tensor's (name, dtype code, shape, offset in the buffer, bytes), in data
/// order.
#[pyfunction]
#[pyo3(signature = (handle, world, names = None))]
pub fn cooperative_plan(
    handle: &Handle,
    world: usize,
    names: Option<Vec<String>>,
) -> PyResult<(u64, Vec<PyPlaced>)> {
    let coop = layout(handle, world, names.as_deref())?;
    let tensors = coop
        .tensors
        .into_iter()
        .map(|t| (t.name, t.dtype.name(), t.shape, t.at, t.nbytes))
        .collect();
    Ok((coop.len, tensors))
}

/// Reads rank `rank`'s segment of the cooperative layout for `world`
/// ranks (of the tensors in `names`, or all) into the flat buffer of
/// `length` bytes at `address`, or its segment alone (held as
/// [`read_rank_shares`] says); returns the bytes read.
#[pyfunction]
#[pyo3(signature = (handle, world, rank, address, length, names = None))]
pub fn read_cooperative(
    py: Python<'_>,
    handle: &Handle,
    world: usize,
    rank: usize,
    address: usize,
    length: usize,
    names: Option<Vec<String>>,
) -> PyResult<u64> {
    let source = handle.source()?;
    let coop = layout(handle, world, names.as_deref())?;
    if rank >= world {
        return Err(errors::msg(format!(
            "rank {rank} is outside a world of {world}"
        )));
    }
    py.detach(|| {
        let ptr = if length == 0 {
            std::ptr::NonNull::<u8>::dangling().as_ptr()
        } else {
            address as *mut u8
        };
        // SAFETY: as in `read_rank_shares`.
        let buf = unsafe { std::slice::from_raw_parts_mut(ptr, length) };
        coop.read_share(rank, &*source, buf)
    })
    .map_err(|e| errors::error(e.into()))
}
