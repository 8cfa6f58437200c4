"""One set, many writers: a sharded set planned once, written by several
processes (each its own shards), committed by one.

The processes share nothing but the file system, or a bucket: ``OUTDIR``
is a directory or a store's prefix (``s3://bucket/out/``, ``gs://``,
``az://``, ``abfss://``). The plan is staged in
``OUTDIR/.tensorfile-set-<id>/plan.json``; each writer writes its shards
there, each atomically (in a bucket, each an upload, complete or absent);
the commit checks every shard against the plan, moves them into ``OUTDIR``
(in a bucket, a server-side copy) and writes the index last. Until the
commit nothing appears under ``OUTDIR``'s own names. These are the steps of
``tensorfile shard --plan/--write-part/--commit/--abort``, run by the same
code (tensorfile-ops). See docs/saves.md and docs/remote.md.

These functions take tensors as :class:`tensorfile.TensorSpec` dicts; the
framework modules (``tensorfile.numpy``, ``tensorfile.torch``) take arrays.
:func:`run_distributed` is the protocol over a ``torch.distributed``-like
module, which ``tensorfile.torch.save_distributed`` uses.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from ._native import SafetensorError, TensorSpec

PathLike = Union[str, "os.PathLike[str]"]

#: huggingface_hub's default shard size, 5 GB.
DEFAULT_MAX_SHARD_SIZE = 5_000_000_000


def _decls(specs: Mapping[str, Any]) -> List[Tuple[str, str, List[int]]]:
    """``(name, dtype code, shape)`` for each entry: a TensorSpec or a
    ``(dtype code, shape)`` pair."""
    out = []
    for name, spec in specs.items():
        if isinstance(spec, TensorSpec):
            out.append((name, spec.dtype, list(spec.shape)))
        else:
            dtype, shape = spec
            out.append((name, str(dtype), [int(d) for d in shape]))
    return out


def plan_set(
    outdir: PathLike,
    specs: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]],
    *,
    writers: int = 1,
    max_shard_size: int = DEFAULT_MAX_SHARD_SIZE,
    prefix: str = "model",
    metadata: Optional[Dict[str, str]] = None,
) -> Dict[str, Any]:
    """Stages the plan of a set in ``outdir`` (a directory, created if
    needed, or a store's prefix) and returns ``{"plan_id", "staging",
    "files", "writers", "total_size"}`` (``writers``: each file's writer;
    ``staging`` and ``files`` are URLs for a store).

    ``specs`` is either one dict of the whole set's tensors (name to
    :class:`TensorSpec` or ``(dtype code, shape)``), split by
    ``max_shard_size`` as huggingface_hub splits and dealt to ``writers``
    writers round-robin; or a list of such dicts, one per writer (each
    rank's own tensors), each split into shards of its own.

    Every process may call it with the same arguments, at once; a different
    plan for the same ``prefix`` while one is staged raises
    ``SafetensorError``, as does a ``outdir`` already holding a set with
    this prefix (``...: already exists``): as the CLI's ``--plan``, there is
    no ``replace``; remove the old set first.
    """
    if isinstance(specs, Mapping):
        groups = [_decls(specs)]
    else:
        groups = [_decls(g) for g in specs]
        writers = 1
    return _native.plan_set(
        os.fspath(outdir),
        groups,
        max_shard_size=int(max_shard_size),
        prefix=prefix,
        metadata=metadata,
        writers=int(writers),
    )


def write_set_parts(
    tensor_specs: Mapping[str, TensorSpec],
    outdir: PathLike,
    writer: int,
    *,
    prefix: str = "model",
    sync: bool = True,
) -> List[str]:
    """Writes the shards the staged plan gives ``writer`` (0-based) into the
    staging folder, each atomically, from ``tensor_specs`` (which must hold
    each of their tensors; others are ignored). Returns the staged paths.
    Running it again replaces that writer's shards only."""
    tensors = [
        (name, s.dtype, list(s.shape), s.data_ptr, s.data_len) for name, s in tensor_specs.items()
    ]
    return _native.write_set_parts(os.fspath(outdir), tensors, int(writer), prefix=prefix, sync=sync)


def commit_set(outdir: PathLike, *, prefix: str = "model", sync: bool = True) -> Dict[str, Any]:
    """Checks every staged shard against the plan (present, complete, the
    planned header), moves them into ``outdir``, writes the index last and
    removes the staging folder; returns ``{"files", "index", "total_size"}``.
    Run it in one process, once every writer is done; run it again after
    an interrupted commit."""
    return _native.commit_set(os.fspath(outdir), prefix=prefix, sync=sync)


def abort_set(outdir: PathLike, *, prefix: str = "model") -> None:
    """Removes the staged set (its plan and shards; in a bucket, everything
    under the staging prefix, pending uploads included)."""
    _native.abort_set(os.fspath(outdir), prefix=prefix)


def run_distributed(
    dist: Any,
    local_specs: Union[Dict[str, TensorSpec], BaseException],
    outdir: PathLike,
    *,
    group: Any = None,
    max_shard_size: int = DEFAULT_MAX_SHARD_SIZE,
    prefix: str = "model",
    metadata: Optional[Dict[str, str]] = None,
    sync: bool = True,
    write: Optional[Callable[..., List[str]]] = None,
) -> Optional[Dict[str, Any]]:
    """The protocol over ``dist`` (``torch.distributed``, or anything with
    its ``get_rank``, ``get_world_size``, ``all_gather_object``,
    ``broadcast_object_list`` and ``barrier``), every rank calling it with
    its own tensors:

    1. every rank shares its tensors' names, dtypes and shapes; rank 0
       stages the plan (each rank's tensors in shards of its own, numbered
       rank by rank) and tells the others whether that worked;
    2. each rank writes its shards;
    3. every rank shares whether it succeeded; rank 0 commits if all did,
       aborts otherwise, and tells the others.

    ``local_specs`` may be the exception taking a rank's tensors raised: the
    rank then still joins the collectives, and every rank raises.

    Returns the commit's summary on every rank. Raises ``SafetensorError``
    on every rank when any rank failed (naming the ranks and their errors);
    the set is then aborted, and nothing appears under ``outdir``'s names.
    ``outdir`` may be a store's prefix (``s3://``, ``gs://``, ``az://``):
    every rank then needs the store's credentials.
    """
    write = write or write_set_parts
    rank = dist.get_rank(group) if group is not None else dist.get_rank()
    size = dist.get_world_size(group) if group is not None else dist.get_world_size()
    kw: Dict[str, Any] = {} if group is None else {"group": group}

    def gather(obj: Any) -> List[Any]:
        out: List[Any] = [None] * size
        dist.all_gather_object(out, obj, **kw)
        return out

    def from_rank0(obj: Any) -> Any:
        box = [obj]
        # ``src`` is a global rank: rank 0 of the group.
        src = 0 if group is None else _global_rank(dist, group, 0)
        dist.broadcast_object_list(box, src=src, **kw)
        return box[0]

    def fail(errors: List[Any]) -> None:
        said = "; ".join(f"rank {r}: {e}" for r, e in enumerate(errors) if e is not None)
        raise SafetensorError(f"{os.fspath(outdir)}: the distributed save failed ({said})")

    # A rank whose tensors could not be taken still joins every collective.
    if isinstance(local_specs, BaseException):
        shared: Any = (None, f"{type(local_specs).__name__}: {local_specs}")
    else:
        shared = ({name: (s.dtype, list(s.shape)) for name, s in local_specs.items()}, None)
    gathered = gather(shared)
    if any(e is not None for _, e in gathered):
        fail([e for _, e in gathered])
    per_rank = [d for d, _ in gathered]
    planned: Optional[str] = None
    if rank == 0:
        try:
            plan_set(outdir, per_rank, max_shard_size=max_shard_size, prefix=prefix, metadata=metadata)
        except Exception as e:  # every rank must hear of it
            planned = f"{type(e).__name__}: {e}"
    planned = from_rank0(planned)
    if planned is not None:
        fail([planned] + [None] * (size - 1))
    error: Optional[str] = None
    try:
        write(local_specs, outdir, rank, prefix=prefix, sync=sync)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    errors = gather(error)
    outcome: Any = None
    if rank == 0:
        try:
            if any(e is not None for e in errors):
                abort_set(outdir, prefix=prefix)
                outcome = ("failed", errors)
            else:
                outcome = ("ok", commit_set(outdir, prefix=prefix, sync=sync))
        except Exception as e:
            outcome = ("failed", [f"{type(e).__name__}: {e}"] + [None] * (size - 1))
    outcome = from_rank0(outcome)
    if outcome[0] != "ok":
        fail(outcome[1])
    return outcome[1]


def _global_rank(dist: Any, group: Any, group_rank: int) -> int:
    """The global rank of ``group_rank`` in ``group``."""
    get = getattr(dist, "get_global_rank", None)
    if get is not None:
        return int(get(group, group_rank))
    return group_rank
