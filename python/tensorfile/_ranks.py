"""Loading across processes: each rank's share of a tensor-parallel layout
(:func:`rank_plan`), and cooperative loads where each rank reads a disjoint
segment of the bytes every rank needs (:func:`cooperative_plan`). Plans and
reads are the native library's (``tensorfile_core::ranks``); the
collectives are the caller's (``tensorfile.torch.load_cooperative`` runs
them over ``torch.distributed``)."""

from __future__ import annotations

import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from . import _frameworks, _native
from ._native import Handle, SafetensorError

PathLike = Union[str, "os.PathLike[str]"]


class Share(NamedTuple):
    """What one rank reads of one tensor: ``shape`` is the share's,
    ``full_shape`` the tensor's; ``dim`` the dimension split (None: the
    whole tensor) and ``parts`` the ``(start, stop)`` positions along it,
    one per section, put together in order."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    full_shape: Tuple[int, ...]
    dim: Optional[int]
    parts: Tuple[Tuple[int, int], ...]


class Placed(NamedTuple):
    """A tensor in a cooperative load's flat buffer: its bytes are
    ``buffer[at:at + nbytes]`` (``at`` 64-byte aligned)."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    at: int
    nbytes: int


class CooperativePlan(NamedTuple):
    """A cooperative load's layout: one flat buffer of ``nbytes`` (a
    multiple of ``world_size``), cut into ``world_size`` equal segments;
    rank ``r`` reads the tensor bytes of :meth:`segment` ``(r)``."""

    nbytes: int
    world_size: int
    tensors: Tuple[Placed, ...]

    def segment(self, rank: int) -> Tuple[int, int]:
        """Rank ``rank``'s ``(start, stop)`` in the flat buffer."""
        size = self.nbytes // self.world_size
        return rank * size, rank * size + size


def _handle(path: Any) -> Handle:
    if isinstance(path, Handle):
        return path
    # Rank loads read every byte they need; nothing is mapped.
    return Handle(os.fspath(path), "pread")


def _check_world(world_size: int, rank: Optional[int] = None) -> None:
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise SafetensorError(f"world_size must be a positive int, not {world_size!r}")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size):
        raise SafetensorError(f"rank {rank!r} is outside a world of {world_size}")


def rank_plan(path: PathLike, rules: str, world_size: int, rank: int) -> List[Share]:
    """Rank ``rank``'s shares of the tensors in ``path`` (a file, a sharded
    set's directory or index, or a URL) under ``rules`` with
    ``world_size`` ranks, in data order; tensors another rank owns are left
    out. ``rules`` is rule text (``"*.o_proj.weight = split(1)"``, one rule
    a line, first match wins, see docs/python.md) or a preset's name
    (``"llama"``). Every process computes every rank's plan alike."""
    _check_world(world_size, rank)
    return [
        Share(name, code, tuple(shape), tuple(full), dim, tuple(tuple(p) for p in parts))
        for name, code, shape, full, dim, parts in _native.rank_plan(_handle(path), rules, world_size, rank)
    ]


def load_rank_share(
    path: PathLike, rules: str, world_size: int, rank: int, framework: str = "numpy", device: Any = "cpu"
) -> Dict[str, Any]:
    """Rank ``rank``'s shares (see :func:`rank_plan`) read from ``path``:
    name to a tensor of the share's shape, in ``framework``'s type, on
    ``device``. Only the shares' bytes are read."""
    _check_world(world_size, rank)
    fw = _frameworks.framework(framework, device)
    handle = _handle(path)
    plan = rank_plan(handle, rules, world_size, rank)
    out: Dict[str, Any] = {}
    targets: List[Tuple[str, int, int]] = []
    for share in plan:
        array = fw.empty(share.dtype, share.shape, "cpu")
        dest = _frameworks.Destination(array)
        targets.append((share.name, dest.address, dest.nbytes))
        out[share.name] = array
    _native.read_rank_shares(handle, rules, world_size, rank, targets)
    if fw.name == "pt" and not _frameworks.is_cpu(device):
        device = _frameworks.torch_device(device)
        out = {k: v.to(device) for k, v in out.items()}
    return out


def cooperative_plan(path: PathLike, world_size: int, names: Optional[List[str]] = None) -> CooperativePlan:
    """The cooperative layout of the tensors in ``path`` (those in
    ``names``, in data order, or all) for ``world_size`` ranks (see
    :class:`CooperativePlan`)."""
    _check_world(world_size)
    nbytes, tensors = _native.cooperative_plan(_handle(path), world_size, _names(names))
    placed = tuple(Placed(n, c, tuple(s), at, size) for n, c, s, at, size in tensors)
    return CooperativePlan(nbytes, world_size, placed)


def read_cooperative_share(
    path: PathLike, world_size: int, rank: int, out: Any, names: Optional[List[str]] = None
) -> int:
    """Reads rank ``rank``'s segment of the cooperative layout of ``path``
    (of the tensors in ``names``, or all) into ``out``: the whole flat
    buffer (a writeable, C-contiguous uint8 numpy array or CPU torch tensor
    of the plan's ``nbytes``; only the segment is written) or the segment
    alone. Returns the bytes read."""
    _check_world(world_size, rank)
    dest = _frameworks.Destination(out)
    if dest.device != "cpu" or not dest.contiguous or not dest.writeable or not dest.is_bytes:
        raise ValueError(
            f"read_cooperative_share: out ({dest.describe()} on {dest.device}) must be a writeable, "
            "C-contiguous uint8 array on the CPU"
        )
    return _native.read_cooperative(_handle(path), world_size, rank, dest.address, dest.nbytes, _names(names))


def _names(names: Optional[List[str]]) -> Optional[List[str]]:
    if names is None:
        return None
    if isinstance(names, str):
        raise TypeError("names is a list of tensor names, not a str")
    return list(names)


def view_tensors(plan: CooperativePlan, buffer: Any, framework: str = "numpy") -> Dict[str, Any]:
    """The tensors of a filled flat buffer, as views of it (no copy)."""
    out: Dict[str, Any] = {}
    if framework == "numpy":
        for t in plan.tensors:
            raw = buffer[t.at : t.at + t.nbytes]
            out[t.name] = raw.view(_frameworks.numpy_dtype(t.dtype)).reshape(t.shape)
        return out
    import torch

    for t in plan.tensors:
        raw = buffer[t.at : t.at + t.nbytes]
        out[t.name] = raw.view(_frameworks.torch_dtype(torch, t.dtype)).reshape(t.shape)
    return out
