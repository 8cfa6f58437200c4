"""safetensors files and JAX arrays: ``save``, ``save_file``, ``load``,
``load_file``, as ``safetensors.flax`` has them (JAX is imported with this
module, never by ``import tensorfile``).

Loading hands JAX the memory the file was read into, without a copy, where
JAX can use it (64-byte aligned, on the CPU: ``load_file`` always is);
otherwise JAX copies. ``load`` copies the bytes given once. Saving reads the
arrays' memory through numpy (no copy on the CPU) and writes the bytes the
reference writes. BF16 and the float8 types load as JAX's (ml_dtypes') types;
as with ``jnp.array``, 64-bit types become 32-bit unless ``jax_enable_x64``
is set.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

import jax
import numpy as np

from . import _frameworks
from . import numpy as _numpy
from ._open import safe_open  # noqa: F401  (as the reference's module has it)

__all__ = ["save", "save_file", "load", "load_file"]

PathLike = Union[str, "os.PathLike[str]"]


def _arrays(tensors: Dict[str, jax.Array]) -> Dict[str, np.ndarray]:
    """numpy views of the arrays (in a new dict: the caller's is left as it
    was, where the reference replaces its values)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, jax.Array] but received {type(tensors)}")
    return {name: np.asarray(value) for name, value in tensors.items()}


def save(tensors: Dict[str, jax.Array], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors`` and ``metadata``.

    >>> from tensorfile.flax import save
    >>> data = save({"embedding": jax.numpy.zeros((512, 1024))})
    """
    return _numpy.save(_arrays(tensors), metadata=metadata)


def save_file(
    tensors: Dict[str, jax.Array],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    sync: bool = False,
) -> None:
    """Writes ``tensors`` and ``metadata`` to ``filename`` atomically (the old
    file or the new one, nothing left behind when interrupted); with ``sync``,
    on disk when this returns.

    >>> from tensorfile.flax import save_file
    >>> save_file({"embedding": jax.numpy.zeros((512, 1024))}, "model.safetensors")
    """
    _numpy.save_file(_arrays(tensors), filename, metadata=metadata, sync=sync)


def load(data: bytes) -> Dict[str, jax.Array]:
    """The arrays of a safetensors file held in ``data``, on the CPU, each
    copied once into memory of its own."""
    return _frameworks.load_bytes_as("flax", data)


def load_file(
    filename: PathLike,
    *,
    backend: str = "mmap",
    dtype: Any = None,
    timeout: Optional[float] = None,
) -> Dict[str, jax.Array]:
    """The arrays of ``filename`` on the CPU, each read into memory of its own
    with parallel reads (both backends read this way), which JAX then holds
    without a copy. With ``dtype``, float tensors are cast to it on load.
    ``filename`` may be a URL (see :class:`tensorfile.safe_open`), fetched
    within ``timeout`` seconds when given.

    >>> from tensorfile.flax import load_file
    >>> params = load_file("model.safetensors")
    """
    return _frameworks.load_file_as("flax", filename, "cpu", backend, dtype, timeout)
