"""safetensors files and TensorFlow tensors: ``save``, ``save_file``,
``load``, ``load_file``, as ``safetensors.tensorflow`` has them (TensorFlow is
imported with this module, never by ``import tensorfile``).

Loading hands TensorFlow the memory the file was read into through DLPack,
without a copy (BF16 is bit-cast in place from its 16-bit carrier); ``load``
copies the bytes given once. Saving goes through ``Tensor.numpy()``, which
TensorFlow may copy, and writes the bytes the reference writes. TensorFlow has
no float8 types: such tensors are refused unless cast on load (``dtype``).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

import numpy as np
import tensorflow as tf

from . import _frameworks
from . import numpy as _numpy
from ._open import safe_open  # noqa: F401  (as the reference's module has it)

__all__ = ["save", "save_file", "load", "load_file"]

PathLike = Union[str, "os.PathLike[str]"]


def _arrays(tensors: Dict[str, tf.Tensor]) -> Dict[str, np.ndarray]:
    """numpy arrays of the tensors (in a new dict: the caller's is left as it
    was, where the reference replaces its values)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, tf.Tensor] but received {type(tensors)}")
    return {name: value.numpy() for name, value in tensors.items()}


def save(tensors: Dict[str, tf.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors`` and ``metadata``.

    >>> from tensorfile.tensorflow import save
    >>> data = save({"embedding": tf.zeros((512, 1024))})
    """
    return _numpy.save(_arrays(tensors), metadata=metadata)


def save_file(
    tensors: Dict[str, tf.Tensor],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    sync: bool = False,
) -> None:
    """Writes ``tensors`` and ``metadata`` to ``filename`` atomically (the old
    file or the new one, nothing left behind when interrupted); with ``sync``,
    on disk when this returns.

    >>> from tensorfile.tensorflow import save_file
    >>> save_file({"embedding": tf.zeros((512, 1024))}, "model.safetensors")
    """
    _numpy.save_file(_arrays(tensors), filename, metadata=metadata, sync=sync)


def load(data: bytes) -> Dict[str, tf.Tensor]:
    """The tensors of a safetensors file held in ``data``, each copied once
    into memory of its own."""
    return _frameworks.load_bytes_as("tf", data)


def load_file(
    filename: PathLike,
    *,
    backend: str = "mmap",
    dtype: Any = None,
    timeout: Optional[float] = None,
) -> Dict[str, tf.Tensor]:
    """The tensors of ``filename``, each read into memory of its own with
    parallel reads (both backends read this way), which TensorFlow then holds
    without a copy. With ``dtype``, float tensors are cast to it on load.
    ``filename`` may be a URL (see :class:`tensorfile.safe_open`), fetched
    within ``timeout`` seconds when given.

    >>> from tensorfile.tensorflow import load_file
    >>> weights = load_file("model.safetensors")
    """
    return _frameworks.load_file_as("tf", filename, "cpu", backend, dtype, timeout)
