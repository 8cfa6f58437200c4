"""safetensors files and torch tensors: ``save``, ``save_file``, ``load``,
``load_file``, ``save_model`` and ``load_model`` as ``safetensors.torch`` has
them, with the helpers for tensors that share memory (``storage_ptr``,
``storage_size``, ``_find_shared_tensors``, ``_remove_duplicate_names``, ...).

A file cannot hold two names for one piece of memory. ``save_file`` refuses
tensors that share memory; ``save_model`` keeps one name of each shared group
(recording the others in the metadata) and ``load_model`` ties them again
through the model's own sharing.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple, Union

import torch

from . import _frameworks, _native
from ._native import TensorSpec
from ._open import safe_open

__all__ = [
    "save",
    "save_file",
    "load",
    "load_file",
    "save_model",
    "load_model",
    "save_set_parts",
    "save_distributed",
]

PathLike = Union[str, "os.PathLike[str]"]

# Bytes per element of each torch dtype the format holds.
_SIZE: Dict[Any, int] = {}
# torch's dtype of each format dtype code torch has.
_TYPES: Dict[str, Any] = {}
for _code, _name in _frameworks._TORCH_NAMES.items():
    _dtype = getattr(torch, _name, None)
    if _dtype is not None:
        _TYPES[_code] = _dtype
        _SIZE[_dtype] = getattr(_dtype, "itemsize", None) or torch.empty((), dtype=_dtype).element_size()
del _code, _name, _dtype


def _getdtype(dtype_str: str) -> Any:
    """torch's dtype for a format dtype code."""
    return _frameworks.torch_dtype(torch, dtype_str)


def storage_ptr(tensor: torch.Tensor) -> int:
    """The address of the memory behind ``tensor`` (its storage's start), 0 for
    a tensor without memory (the meta device)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (NotImplementedError, RuntimeError):
        return 0


def storage_size(tensor: torch.Tensor) -> int:
    """The bytes of the storage behind ``tensor``."""
    try:
        return tensor.untyped_storage().nbytes()
    except (NotImplementedError, RuntimeError):
        return tensor.nelement() * tensor.element_size()


def _end_ptr(tensor: torch.Tensor) -> int:
    """One past the address of the tensor's last element (its start when it
    has none)."""
    if tensor.nelement() == 0:
        return tensor.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr() + (last + 1) * tensor.element_size()


def _is_complete(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` covers its whole storage, from its start."""
    return tensor.data_ptr() == storage_ptr(tensor) and (
        tensor.nelement() * tensor.element_size() == storage_size(tensor)
    )


def _overlapping(names: Set[str], state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Splits names that share a storage into groups whose memory overlaps
    (two halves of one buffer are not shared)."""
    if len(names) < 2:
        return [names]
    spans = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in names)
    groups: List[Set[str]] = []
    reach = None
    for start, stop, name in spans:
        if reach is not None and start < reach:
            groups[-1].add(name)
            reach = max(reach, stop)
        else:
            groups.append({name})
            reach = stop
    return groups


def _find_shared_tensors(state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Groups of the names whose tensors overlap in memory (one group per
    tensor that shares with none), in the order the names first appear.
    Tensors without memory (meta, empty storage) are in no group."""
    by_storage: Dict[Tuple[Any, int, int], Set[str]] = {}
    for name, tensor in state_dict.items():
        if tensor.device.type == "meta":
            continue
        ptr, size = storage_ptr(tensor), storage_size(tensor)
        if ptr == 0 or size == 0:
            continue
        by_storage.setdefault((tensor.device, ptr, size), set()).add(name)
    groups: List[Set[str]] = []
    for names in by_storage.values():
        groups.extend(_overlapping(names, state_dict))
    return groups


def _remove_duplicate_names(
    state_dict: Dict[str, torch.Tensor],
    *,
    preferred_names: Optional[Iterable[str]] = None,
    discard_names: Optional[Iterable[str]] = None,
) -> Dict[str, List[str]]:
    """For each group of shared tensors, the name to keep and the names to
    drop (sorted). The kept name covers the whole storage; among those that
    do, one of ``preferred_names`` wins, then one not in ``discard_names``,
    then the first in sorted order. A group where no tensor covers its whole
    storage is a RuntimeError (keeping a part would lose the rest)."""
    preferred = set(preferred_names or ())
    discard = set(discard_names or ())
    removals: Dict[str, List[str]] = {}
    for group in _find_shared_tensors(state_dict):
        complete = {n for n in group if _is_complete(state_dict[n])}
        if not complete:
            raise RuntimeError(
                f"Cannot choose a name to keep among the tensors sharing memory {sorted(group)}: "
                "none covers its whole storage, so saving one would drop the rest. Save "
                "contiguous copies (tensor.clone()) instead; see "
                "https://huggingface.co/docs/safetensors/torch_shared_tensors"
            )
        candidates = (complete & preferred) or (complete - discard) or complete
        keep = min(candidates)
        dropped = sorted(n for n in group if n != keep)
        if dropped:
            removals[keep] = dropped
    return removals


def _check_for_save(tensors: Any) -> None:
    """Refuses what a file cannot hold, with the reference's texts."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(
                f"Key `{name}` is invalid, expected torch.Tensor but received {type(value)}"
            )
        if value.layout != torch.strided:
            sparse.append(name)
    if sparse:
        raise ValueError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not support."
            " You can make it a dense tensor before saving with `.to_dense()` but be aware this might"
            " make a much larger file than needed."
        )
    shared = [group for group in _find_shared_tensors(tensors) if len(group) > 1]
    if shared:
        raise RuntimeError(
            f"Some tensors share memory, which a file cannot hold twice: {shared}. "
            "Save the model with `save_model` (it keeps one name per shared tensor and ties "
            "them again on load), or save copies; see "
            "https://huggingface.co/docs/safetensors/torch_shared_tensors"
        )
    for name, value in tensors.items():
        if not value.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. "
                "Call `.contiguous()` on it first (or, for views of another tensor, save the "
                "whole tensor and slice it when loading)."
            )


def _specs(tensors: Dict[str, torch.Tensor], keep_alive: List[Any]) -> Dict[str, TensorSpec]:
    """A TensorSpec per tensor, over its memory (a CPU copy for tensors on
    other devices, kept alive by ``keep_alive``)."""
    _check_for_save(tensors)
    specs = {}
    for name, tensor in tensors.items():
        if tensor.device.type != "cpu":
            tensor = tensor.to("cpu")
        keep_alive.append(tensor)
        specs[name] = TensorSpec(
            dtype=str(tensor.dtype).rsplit(".", 1)[-1],
            shape=tuple(tensor.shape),
            data_ptr=tensor.data_ptr(),
            data_len=tensor.nelement() * tensor.element_size(),
        )
    return specs


def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors`` (contiguous, not
    sharing memory) and ``metadata``.

    >>> from tensorfile.torch import save
    >>> data = save({"embedding": torch.zeros((512, 1024))})
    """
    keep_alive: List[Any] = []
    return _native.serialize(_specs(tensors, keep_alive), metadata=metadata)


def save_file(
    tensors: Dict[str, torch.Tensor],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    sync: bool = False,
) -> None:
    """Writes ``tensors`` and ``metadata`` to ``filename`` atomically (the old
    file or the new one, nothing left behind when interrupted); with ``sync``,
    on disk when this returns.

    >>> from tensorfile.torch import save_file
    >>> save_file({"embedding": torch.zeros((512, 1024))}, "model.safetensors")
    """
    keep_alive: List[Any] = []
    _native.serialize_file(
        _specs(tensors, keep_alive), os.fspath(filename), metadata=metadata, sync=sync
    )


def load_file(
    filename: PathLike,
    device: Any = "cpu",
    *,
    backend: str = "mmap",
    dtype: Any = None,
    timeout: Optional[float] = None,
) -> Dict[str, torch.Tensor]:
    """The tensors of ``filename`` on ``device``, each read into memory of its
    own with parallel reads (nothing done to the file later affects them, and
    one tensor kept does not keep the others). Both backends read this way.
    On a CUDA device (``"cuda:N"``, or ``N``) the tensors go through pinned
    staging buffers reused in a ring, copied without blocking while the next
    are read (see :meth:`tensorfile.safe_open.prefetch`); on another device
    they are read on the host, then moved. With ``dtype``, float tensors are
    cast to it on load. ``filename`` may be a URL (``s3://``,
    ``http(s)://``, ``hf://``): the file is fetched with parallel range
    requests, all within ``timeout`` seconds when given (see
    :class:`tensorfile.safe_open`).

    >>> from tensorfile.torch import load_file
    >>> state_dict = load_file("model.safetensors")
    """
    _frameworks.check_backend(backend)
    if dtype is not None:
        with safe_open(filename, "pt", device, backend="pread", timeout=timeout) as f:
            return f.get_tensors(dtype=dtype)
    if _frameworks.is_cuda(device):
        with safe_open(filename, "pt", device, backend="pread", timeout=timeout) as f:
            f.prefetch()
            return {name: f.get_tensor(name) for name in f.keys()}
    pairs = _native.load_file(os.fspath(filename), timeout=timeout)
    return {name: _frameworks.as_torch(buffer, device) for name, buffer in pairs}


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """The tensors of a safetensors file held in ``data``, on the CPU, each
    copied once into memory of its own."""
    return {name: _frameworks.as_torch(buffer) for name, buffer in _native.load_bytes(data)}


def save_model(
    model: torch.nn.Module,
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    force_contiguous: bool = True,
) -> None:
    """Saves ``model``'s state dict, keeping one name for each group of
    tensors that share memory (the others are recorded in the metadata as
    ``dropped name: kept name``, unless the caller's metadata has the key).
    With ``force_contiguous``, tensors are made contiguous first."""
    state_dict = model.state_dict()
    metadata = dict(metadata) if metadata is not None else None
    for kept, dropped in _remove_duplicate_names(state_dict).items():
        for name in dropped:
            if metadata is None:
                metadata = {}
            metadata.setdefault(name, kept)
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as e:
        raise ValueError(
            f"{e} Or use save_model(..., force_contiguous=True), read the docs for potential caveats."
        ) from e


def load_model(
    model: torch.nn.Module,
    filename: PathLike,
    strict: bool = True,
    device: Any = "cpu",
    *,
    backend: str = "mmap",
    timeout: Optional[float] = None,
) -> Tuple[List[str], List[str]]:
    """Loads ``filename`` into ``model``, whose shared tensors need only one
    of their names in the file (whichever ``save_model`` kept). Returns the
    model's names the file did not set and the file's names the model did not
    use; with ``strict``, either being non-empty is a RuntimeError listing them.
    ``timeout`` is :func:`load_file`'s, for a URL."""
    state_dict = load_file(filename, device=device, backend=backend, timeout=timeout)
    removals = _remove_duplicate_names(model.state_dict(), preferred_names=state_dict.keys())
    missing_keys, unexpected_keys = model.load_state_dict(state_dict, strict=False)
    missing = set(missing_keys)
    unexpected = list(unexpected_keys)
    for dropped in removals.values():
        for name in dropped:
            if name in missing:
                # Set through the name it shares memory with.
                missing.discard(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        lines = [f"Error(s) in loading state_dict for {type(model).__name__}:"]
        if missing:
            listed = ", ".join(f'"{k}"' for k in sorted(missing))
            lines.append(f"    Missing key(s) in state_dict: {listed}")
        if unexpected:
            listed = ", ".join(f'"{k}"' for k in sorted(unexpected))
            lines.append(f"    Unexpected key(s) in state_dict: {listed}")
        raise RuntimeError("\n".join(lines))
    return sorted(missing), unexpected


def save_set_parts(
    tensors: Dict[str, torch.Tensor],
    outdir: PathLike,
    writer: int,
    *,
    prefix: str = "model",
    sync: bool = True,
) -> List[str]:
    """Writes the shards a staged set's plan (:func:`tensorfile.plan_set`)
    gives ``writer``, from ``tensors``, into the set's staging folder (or
    prefix, for a store's ``outdir``); :func:`tensorfile.commit_set` then
    publishes the set."""
    from ._sets import write_set_parts

    keep_alive: List[Any] = []
    return write_set_parts(_specs(tensors, keep_alive), outdir, writer, prefix=prefix, sync=sync)


def save_distributed(
    state_dict: Dict[str, torch.Tensor],
    outdir: PathLike,
    *,
    max_shard_size: int = 5_000_000_000,
    prefix: str = "model",
    metadata: Optional[Dict[str, str]] = None,
    group: Any = None,
    sync: bool = True,
) -> Dict[str, Any]:
    """Saves one sharded set from every rank of ``torch.distributed`` (or
    ``group``): each rank passes its own tensors and writes its own shards
    (split by ``max_shard_size``); rank 0 stages the plan, and commits once
    every rank has written (the index last). Nothing appears under
    ``outdir``'s names until then; if any rank fails, the set is aborted
    and every rank raises ``SafetensorError``. Returns ``{"files", "index",
    "total_size"}`` on every rank. The process group must be initialized;
    ``outdir`` must be on a file system every rank sees, or a store's
    prefix (``s3://bucket/checkpoint/``, ``gs://``, ``az://``), written as
    ``tensorfile shard --plan/--write-part/--commit`` writes one. A set
    already at ``outdir`` is refused (there is no ``replace``).

    >>> # in each rank, after torch.distributed.init_process_group(...)
    >>> save_distributed(my_part_of_the_state_dict, "checkpoint/")
    """
    import torch.distributed as dist

    from ._sets import run_distributed

    keep_alive: List[Any] = []
    specs: Any
    try:
        specs = _specs(state_dict, keep_alive)
    except Exception as e:  # shared with the other ranks, which would wait
        specs = e
    return run_distributed(
        dist,
        specs,
        outdir,
        group=group,
        max_shard_size=max_shard_size,
        prefix=prefix,
        metadata=metadata,
        sync=sync,
    )


def load_rank_share(
    path: PathLike, rules: str, world_size: int, rank: int, device: Any = "cpu"
) -> Dict[str, torch.Tensor]:
    """Rank ``rank``'s tensor-parallel share of ``path`` (a file, a sharded
    set's directory or index, or a URL) under ``rules`` (rule text or a
    preset's name, ``"llama"``; see :func:`tensorfile.rank_plan`), with
    ``world_size`` ranks: each tensor this rank reads, sliced as the rules
    say, on ``device``. Only the shares' bytes are read. The rank and world
    are given, not asked of ``torch.distributed``: any process can load any
    rank's share.

    >>> from tensorfile.torch import load_rank_share
    >>> shard = load_rank_share("model/", "llama", world_size=2, rank=0)
    """
    from ._ranks import load_rank_share as load

    return load(path, rules, world_size, rank, "pt", device)


def load_cooperative(
    path: PathLike, group: Any = None, device: Any = "cpu", names: Optional[List[str]] = None
) -> Dict[str, torch.Tensor]:
    """Every tensor of ``path`` (or those in ``names``: the replicated ones
    beside a rank plan, say) in every rank of ``torch.distributed``'s
    ``group`` (the default group when None), each byte read from storage
    once in all: each rank reads a disjoint, balanced segment of one flat
    buffer (cut at byte level, across tensors and files), then the ranks
    exchange their segments, with one ``all_gather_into_tensor`` on NCCL
    and a ``broadcast`` per segment on other backends (gloo). Collective:
    every rank of the group must call it with the same ``path``. Returns
    views of the flat buffer, on ``device`` (``"cuda:N"`` with NCCL: the
    segment is read into host memory, then copied to the device).

    >>> import torch.distributed as dist
    >>> dist.init_process_group("gloo")
    >>> state_dict = load_cooperative("model.safetensors")
    """
    import torch.distributed as dist

    from ._ranks import _handle, cooperative_plan, read_cooperative_share, view_tensors

    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    handle = _handle(path)
    plan = cooperative_plan(handle, world, names)
    start, stop = plan.segment(rank)
    if _frameworks.is_cpu(device):
        buffer = torch.empty(plan.nbytes, dtype=torch.uint8)
        read_cooperative_share(handle, world, rank, buffer, names)
    else:
        buffer = torch.empty(plan.nbytes, dtype=torch.uint8, device=_frameworks.torch_device(device))
        staging = torch.empty(stop - start, dtype=torch.uint8, pin_memory=torch.cuda.is_available())
        read_cooperative_share(handle, world, rank, staging, names)
        buffer[start:stop].copy_(staging)
    if world > 1:
        if dist.get_backend(group) == "nccl":
            # In place: this rank's segment is its input.
            dist.all_gather_into_tensor(buffer, buffer[start:stop], group=group)
        else:
            size = plan.nbytes // world
            for src in range(world):
                source = src if group is None else dist.get_global_rank(group, src)
                dist.broadcast(buffer[src * size : (src + 1) * size], source, group=group)
    return view_tensors(plan, buffer, "pt")
