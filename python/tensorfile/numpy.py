"""safetensors files and numpy arrays: ``save``, ``save_file``, ``load``,
``load_file``, as ``safetensors.numpy`` has them.

BF16 and the float8 types load as ml_dtypes arrays (install ml_dtypes); F4
loads as uint8 bytes, two values per byte, the last dimension halved (as
torch's ``float4_e2m1fn_x2``).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Union

import numpy as np

from . import _frameworks, _native
# Also names of this module as the reference's has them (Paddle imports
# safe_open from safetensors.numpy).
from ._native import TensorSpec, deserialize, serialize, serialize_file  # noqa: F401
from ._open import safe_open  # noqa: F401

__all__ = ["save", "save_file", "load", "load_file", "save_set_parts"]

PathLike = Union[str, "os.PathLike[str]"]


# dtype -> its name: ``dtype.name`` is built anew on every access (about
# 2.5 us, most of the per-array cost of a dict of tiny arrays).
_DTYPE_NAMES: Dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = dtype.name
        if len(_DTYPE_NAMES) < 256:  # bounded: structured dtypes are endless
            _DTYPE_NAMES[dtype] = name
    return name


def _specs(tensor_dict: Dict[str, np.ndarray], keep_alive: List[Any]) -> Dict[str, TensorSpec]:
    """A TensorSpec per array: C-contiguous and little-endian (a copy only
    for arrays that are not), the copies kept alive by ``keep_alive``."""
    if not isinstance(tensor_dict, dict):
        raise ValueError(f"Expected a dict of [str, np.ndarray] but received {type(tensor_dict)}")
    specs = {}
    for name, value in tensor_dict.items():
        array = np.asarray(value)
        if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and sys.byteorder == "big"):
            array = array.astype(array.dtype.newbyteorder("<"))
        # An array that is not C-contiguous is written in C order (the
        # reference writes its memory as it lies, which is wrong for views).
        if not array.flags.c_contiguous:
            # (Not np.ascontiguousarray: it makes 0-d arrays 1-d.)
            array = array.copy(order="C")
        keep_alive.append(array)
        specs[name] = TensorSpec(
            dtype=_dtype_name(array.dtype),
            shape=array.shape,
            data_ptr=array.ctypes.data,
            data_len=array.nbytes,
        )
    return specs


def save(tensor_dict: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding ``tensor_dict``'s arrays (the
    canonical layout the reference writes) and ``metadata``.

    >>> from tensorfile.numpy import save
    >>> data = save({"embedding": np.zeros((512, 1024))})
    """
    keep_alive: List[Any] = []
    return _native.serialize(_specs(tensor_dict, keep_alive), metadata=metadata)


def save_file(
    tensor_dict: Dict[str, np.ndarray],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    sync: bool = False,
) -> None:
    """Writes ``tensor_dict``'s arrays and ``metadata`` to ``filename``
    atomically: readers see the old file or the new one, never a part, and an
    interrupted save leaves nothing behind. With ``sync``, the file and its
    directory are on disk when this returns (the reference never syncs).

    >>> from tensorfile.numpy import save_file
    >>> save_file({"embedding": np.zeros((512, 1024))}, "model.safetensors")
    """
    keep_alive: List[Any] = []
    _native.serialize_file(
        _specs(tensor_dict, keep_alive), os.fspath(filename), metadata=metadata, sync=sync
    )


def _arrays(pairs: List[Any]) -> Dict[str, np.ndarray]:
    return {name: _frameworks.as_numpy(buffer) for name, buffer in pairs}


def load(data: bytes) -> Dict[str, np.ndarray]:
    """The arrays of a safetensors file held in ``data``, each copied once
    into memory of its own (writeable; one kept does not keep the others).

    >>> from tensorfile.numpy import load
    >>> arrays = load(open("model.safetensors", "rb").read())
    """
    return _arrays(_native.load_bytes(data))


def load_file(
    filename: PathLike, *, dtype: Any = None, timeout: Optional[float] = None
) -> Dict[str, np.ndarray]:
    """The arrays of the safetensors file ``filename``, each read into memory
    of its own (parallel reads on the library's pool, huge pages from 2 MiB where they help;
    writeable; nothing done to the file later affects them, and one array
    kept does not keep the others). With ``dtype``, every
    float tensor is cast to it (integers and booleans stay as they are).
    ``filename`` may be a URL (``s3://``, ``http(s)://``, ``hf://``): the file
    is fetched with parallel range requests, all within ``timeout`` seconds
    when given (see :class:`tensorfile.safe_open`).

    >>> from tensorfile.numpy import load_file
    >>> arrays = load_file("model.safetensors")
    """
    if dtype is not None:
        with safe_open(filename, "np", backend="pread", timeout=timeout) as f:
            return f.get_tensors(dtype=dtype)
    return _arrays(_native.load_file(os.fspath(filename), timeout=timeout))


def save_set_parts(
    tensor_dict: Dict[str, np.ndarray],
    outdir: PathLike,
    writer: int,
    *,
    prefix: str = "model",
    sync: bool = True,
) -> List[str]:
    """Writes the shards a staged set's plan (:func:`tensorfile.plan_set`)
    gives ``writer``, from ``tensor_dict``, into the set's staging folder
    (or prefix, for a store's ``outdir``: ``s3://``, ``gs://``, ``az://``);
    :func:`tensorfile.commit_set` then publishes the set. Returns the
    staged paths.

    >>> import tensorfile
    >>> from tensorfile.numpy import save_set_parts
    >>> tensors = {"a": np.zeros(4), "b": np.ones(4)}
    >>> _ = tensorfile.plan_set("out", {"a": ("F64", [4]), "b": ("F64", [4])},
    ...                         writers=2, max_shard_size=32)
    >>> _ = save_set_parts({"a": tensors["a"]}, "out", 0)  # in writer 0
    >>> _ = save_set_parts({"b": tensors["b"]}, "out", 1)  # in writer 1
    >>> _ = tensorfile.commit_set("out")  # in one process, after both
    """
    from ._sets import write_set_parts

    keep_alive: List[Any] = []
    return write_set_parts(_specs(tensor_dict, keep_alive), outdir, writer, prefix=prefix, sync=sync)


def load_rank_share(path: Union[str, "os.PathLike[str]"], rules: str, world_size: int, rank: int) -> Dict[str, np.ndarray]:
    """Rank ``rank``'s tensor-parallel share of ``path`` under ``rules``
    with ``world_size`` ranks, as numpy arrays (see
    :func:`tensorfile.torch.load_rank_share`): only the shares' bytes are
    read."""
    from ._ranks import load_rank_share as load

    return load(path, rules, world_size, rank, "numpy", "cpu")
