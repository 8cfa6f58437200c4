"""safetensors files and Paddle tensors: ``save``, ``save_file``, ``load``,
``load_file``, as ``safetensors.paddle`` has them (Paddle is imported with
this module, never by ``import tensorfile``).

Loading on the CPU hands Paddle the memory the file was read into through
DLPack, without a copy; on another device (``"gpu:N"``, or ``"cuda:N"`` or
``N`` as the reference takes them) each tensor is then copied there. ``load``
copies the bytes given once. Saving writes each tensor's memory as it lies
(no copy on the CPU; tensors on other devices are copied to the CPU first),
the bytes the reference writes. Paddle has no unsigned types wider than a
byte: U16, U32 and U64 tensors are refused unless cast on load.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Union

import paddle

from . import _frameworks, _native
from ._native import TensorSpec
from ._open import safe_open  # noqa: F401  (as the reference's module has it)

__all__ = ["save", "save_file", "load", "load_file"]

PathLike = Union[str, "os.PathLike[str]"]


def _specs(tensors: Dict[str, paddle.Tensor], keep_alive: List[Any]) -> Dict[str, TensorSpec]:
    """A TensorSpec per tensor over its memory (a CPU copy for tensors on
    other devices, kept alive by ``keep_alive``); the reference's errors for
    what it refuses."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, paddle.Tensor] but received {type(tensors)}")
    for name, value in tensors.items():
        if not isinstance(value, paddle.Tensor):
            raise ValueError(
                f"Key `{name}` is invalid, expected paddle.Tensor but received {type(value)}"
            )
    specs = {}
    for name, tensor in tensors.items():
        if not tensor.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. "
                "Call `.contiguous()` on it first (or, for views of another tensor, save the "
                "whole tensor and slice it when loading)."
            )
        if not tensor.place.is_cpu_place():
            tensor = tensor.cpu()
        keep_alive.append(tensor)
        count = 1
        for n in tensor.shape:
            count *= int(n)
        specs[name] = TensorSpec(
            dtype=str(tensor.dtype).rsplit(".", 1)[-1],
            shape=tuple(int(n) for n in tensor.shape),
            data_ptr=tensor.data_ptr() if count else 0,
            data_len=count * tensor.element_size(),
        )
    return specs


def save(tensors: Dict[str, paddle.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors`` (contiguous) and
    ``metadata``.

    >>> from tensorfile.paddle import save
    >>> data = save({"embedding": paddle.zeros((512, 1024))})
    """
    keep_alive: List[Any] = []
    return _native.serialize(_specs(tensors, keep_alive), metadata=metadata)


def save_file(
    tensors: Dict[str, paddle.Tensor],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    sync: bool = False,
) -> None:
    """Writes ``tensors`` and ``metadata`` to ``filename`` atomically (the old
    file or the new one, nothing left behind when interrupted); with ``sync``,
    on disk when this returns.

    >>> from tensorfile.paddle import save_file
    >>> save_file({"embedding": paddle.zeros((512, 1024))}, "model.safetensors")
    """
    keep_alive: List[Any] = []
    _native.serialize_file(
        _specs(tensors, keep_alive), os.fspath(filename), metadata=metadata, sync=sync
    )


def load(data: bytes, device: Any = "cpu") -> Dict[str, paddle.Tensor]:
    """The tensors of a safetensors file held in ``data``, each copied once
    into memory of its own, on ``device``."""
    return _frameworks.load_bytes_as("paddle", data, device)


def load_file(
    filename: PathLike,
    device: Any = "cpu",
    *,
    backend: str = "mmap",
    dtype: Any = None,
    timeout: Optional[float] = None,
) -> Dict[str, paddle.Tensor]:
    """The tensors of ``filename`` on ``device``, each read into memory of
    its own with parallel reads (both backends read this way), which Paddle
    then holds without a copy on the CPU. With ``dtype``, float tensors are
    cast to it on load. ``filename`` may be a URL (see
    :class:`tensorfile.safe_open`), fetched within ``timeout`` seconds when
    given.

    >>> from tensorfile.paddle import load_file
    >>> state_dict = load_file("model.safetensors")
    """
    return _frameworks.load_file_as("paddle", filename, device, backend, dtype, timeout)
