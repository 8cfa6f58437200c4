"""safetensors files and MLX arrays: ``save``, ``save_file``, ``load``,
``load_file``, as ``safetensors.mlx`` has them (MLX is imported with this
module, never by ``import tensorfile``).

MLX copies on load: it takes no memory it does not own (``mx.array`` and
``mx.from_dlpack`` both copy). Saving reads the arrays' memory through numpy
and writes the bytes the reference writes; BF16 arrays are saved too (as
their 16-bit patterns), which the reference cannot.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

import mlx.core as mx
import numpy as np

from . import _frameworks
from . import numpy as _numpy
from ._open import safe_open  # noqa: F401  (as the reference's module has it)

__all__ = ["save", "save_file", "load", "load_file"]

PathLike = Union[str, "os.PathLike[str]"]


def _array(value: mx.array) -> np.ndarray:
    """A numpy array of an MLX array; BF16, which numpy cannot take from MLX,
    through its bits."""
    if value.dtype == mx.bfloat16:
        return np.asarray(value.view(mx.uint16)).view(_frameworks.numpy_dtype("BF16"))
    return np.asarray(value)


def _arrays(tensors: Dict[str, mx.array]) -> Dict[str, np.ndarray]:
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, mx.array] but received {type(tensors)}")
    return {name: _array(value) for name, value in tensors.items()}


def save(tensors: Dict[str, mx.array], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors`` and ``metadata``.

    >>> from tensorfile.mlx import save
    >>> data = save({"embedding": mx.zeros((512, 1024))})
    """
    return _numpy.save(_arrays(tensors), metadata=metadata)


def save_file(
    tensors: Dict[str, mx.array],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    sync: bool = False,
) -> None:
    """Writes ``tensors`` and ``metadata`` to ``filename`` atomically (the old
    file or the new one, nothing left behind when interrupted); with ``sync``,
    on disk when this returns.

    >>> from tensorfile.mlx import save_file
    >>> save_file({"embedding": mx.zeros((512, 1024))}, "model.safetensors")
    """
    _numpy.save_file(_arrays(tensors), filename, metadata=metadata, sync=sync)


def load(data: bytes) -> Dict[str, mx.array]:
    """The arrays of a safetensors file held in ``data`` (MLX copies them)."""
    return _frameworks.load_bytes_as("mlx", data)


def load_file(
    filename: PathLike,
    *,
    backend: str = "mmap",
    dtype: Any = None,
    timeout: Optional[float] = None,
) -> Dict[str, mx.array]:
    """The arrays of ``filename``, read with parallel reads (both backends
    read this way) and copied into MLX's memory. With ``dtype``, float
    tensors are cast to it on load. ``filename`` may be a URL (see
    :class:`tensorfile.safe_open`), fetched within ``timeout`` seconds when
    given.

    >>> from tensorfile.mlx import load_file
    >>> weights = load_file("model.safetensors")
    """
    return _frameworks.load_file_as("mlx", filename, "cpu", backend, dtype, timeout)
