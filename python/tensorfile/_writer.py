"""Streaming saves: :class:`Writer` (declare, then write tensors in any order,
each at its place as it comes) and :func:`save_stream` (tensors from a
generator, through a spool). Memory: one tensor at a time; the file appears
atomically when all of it is written, and nothing is left otherwise."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native

__all__ = ["Writer", "save_stream"]

PathLike = Union[str, "os.PathLike[str]"]


def _dtype_name(dtype: Any) -> str:
    """A dtype's name as the native layer takes it: a format code (``"F32"``)
    or numpy's/torch's name (``"float32"``, ``"bfloat16"``)."""
    if isinstance(dtype, str):
        return dtype
    if type(dtype).__module__.startswith("torch"):
        return str(dtype).rsplit(".", 1)[-1]
    import numpy as np

    return np.dtype(dtype).name


def _declared(value: Any) -> Tuple[str, Tuple[int, ...]]:
    """(dtype, shape) of a declaration: a pair, or anything with ``.dtype``
    and ``.shape`` (an array, a torch meta tensor)."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        dtype, shape = value.dtype, value.shape
    else:
        dtype, shape = value
    return _dtype_name(dtype), tuple(int(d) for d in shape)


def _spec(name: str, tensor: Any, keep_alive: List[Any]) -> _native.TensorSpec:
    """The TensorSpec of one numpy array or torch tensor (contiguous,
    little-endian, on the CPU; a copy only where it is not)."""
    if type(tensor).__module__.startswith("torch"):
        from . import torch as _torch

        return _torch._specs({name: tensor}, keep_alive)[name]
    from . import numpy as _numpy

    return _numpy._specs({name: tensor}, keep_alive)[name]


class Writer:
    """A safetensors file written tensor by tensor, in any order.

    ``declaration`` maps every name to its dtype and shape (a ``(dtype,
    shape)`` pair, or anything with ``.dtype`` and ``.shape``), which fixes the
    canonical layout; then :meth:`write` puts each tensor at its place with a
    positional write as it comes (the GIL released), so it can be dropped at
    once: peak memory is one tensor. A tensor not declared, of another dtype or
    shape, or written twice raises ``SafetensorError``. :meth:`close` (or the
    end of a ``with`` block) checks every tensor was written and puts the file
    at ``filename`` atomically; an exception in the block, :meth:`abort`, or a
    process killed at any point leaves nothing under ``filename`` and no other
    file (see docs/saves.md). The bytes are those ``save_file`` writes.

    >>> with Writer("model.safetensors", {"a": ("float32", (2, 3))}) as w:
    ...     w.write("a", np.zeros((2, 3), np.float32))
    """

    def __init__(
        self,
        filename: PathLike,
        declaration: Mapping[str, Any],
        metadata: Optional[Dict[str, str]] = None,
        *,
        sync: bool = False,
        align: int = 8,
    ) -> None:
        decl = [(name, *_declared(value)) for name, value in declaration.items()]
        self._native = _native.Writer(os.fspath(filename), decl, metadata, sync=sync, align=align)

    def write(self, name: str, tensor: Any) -> None:
        """Writes ``tensor`` (a numpy array or torch tensor) as ``name``."""
        keep_alive: List[Any] = []
        self._native.write(name, _spec(name, tensor, keep_alive))

    @property
    def missing(self) -> List[str]:
        """The declared tensors not written yet, in file order."""
        return self._native.missing

    def close(self) -> None:
        """Checks every declared tensor was written and saves the file."""
        self._native.commit()

    def abort(self) -> None:
        """Drops the file being written: nothing is left of it."""
        self._native.abort()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def save_stream(
    filename: PathLike,
    tensors: Iterable[Tuple[str, Any]],
    metadata: Optional[Dict[str, str]] = None,
    *,
    sync: bool = False,
    align: int = 8,
) -> None:
    """Saves ``(name, tensor)`` pairs from any iterable (a generator) without a
    declaration: each tensor is appended to a spool (an unnamed file beside
    ``filename``) as it comes and dropped, and at the end laid out in the
    canonical file, atomically. Twice the I/O of a :class:`Writer` (every byte
    is written twice and read once), memory still one tensor; nothing is left
    of the spool, whatever happens."""
    spool = _native.Spool(os.fspath(filename))
    try:
        for name, tensor in tensors:
            keep_alive: List[Any] = []
            spool.add(name, _spec(name, tensor, keep_alive))
            # Dropped before the iterable makes the next one: one at a time.
            del tensor, keep_alive
        spool.save(metadata, sync=sync, align=align)
    finally:
        spool.abort()
