"""Types of the extension module ``tensorfile._native`` (built from
python/src/ with pyo3). The public API is re-exported by ``tensorfile``."""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__version__: str

PathLike = Union[str, "os.PathLike[str]"]

class SafetensorError(ValueError):
    """An error of tensorfile: a file that breaks a reader rule (the message
    names the rule and the place), a failed read or write, a tensor that is
    not there, a refused request. A ValueError, as the format page says a
    reader rejects a bad file."""

    #: The number (1 to 5) of the format's reader rule the file breaks, or None.
    rule: Optional[int]
    #: The file the error is about, when there is one.
    path: Optional[str]

class Buffer:
    """Bytes of one tensor with their numpy description; ``numpy.asarray``
    views them without a copy and keeps the buffer alive."""

    @property
    def __array_interface__(self) -> Dict[str, Any]: ...
    @property
    def dtype(self) -> str:
        """The format's dtype code (``"BF16"``)."""
    @property
    def address(self) -> int:
        """The address of the first byte."""
    @property
    def is_mapped(self) -> bool:
        """Whether the bytes are a private copy-on-write map of the file."""
    @property
    def is_loaded(self) -> bool:
        """Whether a read plan (a whole load, a prefetch) read the bytes into
        memory the library allocated for this tensor alone."""
    def __len__(self) -> int: ...

class Handle:
    """An open file, set, file object or buffer (what ``safe_open`` wraps);
    ``path`` may be an ``s3://``, ``http(s)://`` or ``hf://`` URL."""

    def __init__(
        self, path: PathLike, backend: str = "mmap", timeout: Optional[float] = None
    ) -> None: ...
    @staticmethod
    def from_bytes(data: bytes) -> "Handle": ...
    @staticmethod
    def from_fd(fd: int, name: PathLike, backend: str = "mmap") -> "Handle": ...
    @staticmethod
    def from_file_object(file: Any, name: PathLike) -> "Handle": ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> Optional[str]: ...
    @property
    def is_set(self) -> bool: ...
    @property
    def nbytes(self) -> int: ...
    def keys(self) -> List[str]: ...
    def offset_keys(self) -> List[str]: ...
    def metadata(self) -> Optional[Dict[str, str]]: ...
    def info(self, name: str) -> Tuple[str, List[int]]: ...
    def infos(self) -> List[Tuple[str, str, List[int]]]: ...
    def get(self, name: str) -> Buffer: ...
    def get_many(self, names: Sequence[str]) -> List[Buffer]: ...
    def get_cast(
        self,
        name: str,
        dtype: str,
        saturate: bool = False,
        allow_int: bool = False,
        strict: bool = False,
    ) -> Buffer: ...
    def slice(
        self, name: str, args: Sequence[Union[int, Tuple[Optional[int], Optional[int], int]]]
    ) -> Buffer: ...
    def read_plan(
        self,
        wants: Optional[
            Sequence[
                Tuple[str, Optional[Sequence[Union[int, Tuple[Optional[int], Optional[int], int]]]]]
            ]
        ] = None,
    ) -> Tuple[List[Tuple[str, Buffer]], Dict[str, int]]:
        """Tensors (or one slice of each) read with one read plan: ``(name,
        buffer)`` in read order, and ``tensors``, ``reads``, ``bytes_read``,
        ``peak_held``."""
    def read_into(
        self,
        name: str,
        args: Optional[Sequence[Union[int, Tuple[Optional[int], Optional[int], int]]]],
        address: int,
        length: int,
    ) -> None:
        """Reads the tensor (or slice) into ``length`` bytes at ``address``,
        which the caller keeps alive and writable during the call."""
    def __len__(self) -> int: ...
    def __contains__(self, name: str) -> bool: ...

class TensorSpec:
    """Describes one tensor passed to ``serialize`` / ``serialize_file``: its
    dtype (a numpy/torch name such as ``"float32"`` or a format code such as
    ``"F32"``; an unknown one raises SafetensorError here), its shape, and the
    address and length of its contiguous little-endian bytes, which the caller
    keeps alive and unchanged during every call that uses the spec. For
    torch's packed ``float4_e2m1fn_x2`` the storage shape may be given (the
    last dimension is doubled)."""

    def __init__(
        self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int
    ) -> None: ...
    @property
    def dtype(self) -> str:
        """The format's dtype code (``"F32"``)."""
    @property
    def shape(self) -> List[int]:
        """The header's shape, in elements."""
    @property
    def data_ptr(self) -> int: ...
    @property
    def data_len(self) -> int: ...

class Writer:
    """A file declared first (``(name, dtype, shape)`` triples) and then written
    tensor by tensor in any order, each at its place; atomic at ``commit``."""

    def __init__(
        self,
        filename: str,
        declaration: Sequence[Tuple[str, str, Sequence[int]]],
        metadata: Optional[Mapping[str, str]] = None,
        *,
        sync: bool = False,
        align: int = 8,
    ) -> None: ...
    def write(self, name: str, spec: TensorSpec) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    @property
    def missing(self) -> List[str]: ...

class Spool:
    """Tensors without a declaration, spooled beside ``filename`` until
    ``save`` lays them out in the canonical file, atomically."""

    def __init__(self, filename: str) -> None: ...
    def add(self, name: str, spec: TensorSpec) -> None: ...
    def save(
        self, metadata: Optional[Mapping[str, str]] = None, *, sync: bool = False, align: int = 8
    ) -> None: ...
    def abort(self) -> None: ...

def serialize(
    tensor_dict: Mapping[str, TensorSpec], metadata: Optional[Mapping[str, str]] = None
) -> bytes:
    """The canonical bytes of a safetensors file holding the tensors."""

def serialize_file(
    tensor_dict: Mapping[str, TensorSpec],
    filename: PathLike,
    metadata: Optional[Mapping[str, str]] = None,
    *,
    sync: bool = False,
) -> None:
    """Writes the canonical file atomically; with ``sync``, on disk on return."""

def deserialize(data: bytes) -> List[Tuple[str, Dict[str, Any]]]:
    """``[(name, {"dtype": code, "shape": [...], "data": bytearray}), ...]``,
    in ascending order of names."""

def load_file(path: PathLike, timeout: Optional[float] = None) -> List[Tuple[str, Buffer]]: ...
def load_bytes(data: bytes) -> List[Tuple[str, Buffer]]: ...
def rank_plan(
    handle: Handle, rules: str, world: int, rank: int
) -> List[Tuple[str, str, List[int], List[int], Optional[int], List[Tuple[int, int]]]]: ...
def read_rank_shares(handle: Handle, rules: str, world: int, rank: int, outs: List[Tuple[str, int, int]]) -> None: ...
def cooperative_plan(handle: Handle, world: int, names: Optional[List[str]] = None) -> Tuple[int, List[Tuple[str, str, List[int], int, int]]]: ...
def read_cooperative(
    handle: Handle, world: int, rank: int, address: int, length: int, names: Optional[List[str]] = None
) -> int: ...
def validate(path: PathLike, timeout: Optional[float] = None) -> Dict[str, Any]: ...
def load_pytorch(
    path: PathLike, key: Optional[str] = None, name: Optional[str] = None
) -> List[Tuple[str, Buffer]]: ...
def dtype_names() -> List[str]: ...
def is_float(code: str) -> bool: ...
def dtype_bits(code: str) -> int: ...
def carrier(code: str, shape: Sequence[int]) -> Tuple[str, List[int]]: ...
def framework_dtype_names() -> Dict[str, Dict[str, str]]: ...
def inspect_json(
    path: PathLike, hash: bool = False, timeout: Optional[float] = None
) -> str: ...
def convert(
    input: PathLike,
    output: PathLike,
    dtype: Optional[str] = None,
    *,
    saturate: bool = False,
    allow_int: bool = False,
    strict: bool = False,
    sync: bool = True,
    max_shard_size: Optional[int] = None,
    key: Optional[str] = None,
    name: Optional[str] = None,
    replace: bool = False,
) -> Dict[str, Any]: ...
def edit_metadata(
    path: PathLike,
    *,
    set: Mapping[str, str] = ...,
    unset: Sequence[str] = ...,
    rename: Mapping[str, str] = ...,
    rewrite: bool = False,
    sync: bool = True,
) -> Dict[str, Any]: ...
def consolidate_dcp(
    input: PathLike,
    output: PathLike,
    *,
    sync: bool = True,
) -> Dict[str, Any]: ...
def quantize(
    input: PathLike,
    output: PathLike,
    scheme: str,
    *,
    bits: Optional[int] = None,
    group_size: Optional[int] = None,
    global_scale: bool = False,
    include: Sequence[str] = ...,
    exclude: Sequence[str] = ...,
    sync: bool = True,
    max_shard_size: Optional[int] = None,
    replace: bool = False,
) -> Dict[str, Any]: ...
def dequantize(
    input: PathLike,
    output: PathLike,
    dtype: Optional[str] = None,
    *,
    config: Optional[PathLike] = None,
    bits: Optional[int] = None,
    group_size: Optional[int] = None,
    mode: Optional[str] = None,
    sync: bool = True,
    max_shard_size: Optional[int] = None,
    replace: bool = False,
) -> Dict[str, Any]: ...
def plan_set(
    out_dir: PathLike,
    groups: Sequence[Sequence[Tuple[str, str, Sequence[int]]]],
    *,
    max_shard_size: int,
    prefix: str,
    metadata: Optional[Dict[str, str]] = None,
    writers: int = 1,
) -> Dict[str, Any]:
    """Stages the plan of a set in ``out_dir``, a directory or a store's
    prefix (``s3://``, ``gs://``, ``az://``, ``abfss://``): ``{"plan_id",
    "staging", "files", "writers", "total_size"}``."""
def write_set_parts(
    out_dir: PathLike,
    tensors: Sequence[Tuple[str, str, Sequence[int], int, int]],
    writer: int,
    *,
    prefix: str,
    sync: bool = True,
) -> List[str]:
    """Writes the staged files of ``writer`` from ``(name, dtype, shape,
    address, length)`` tensors; the staged paths (URLs for a store)."""
def commit_set(out_dir: PathLike, *, prefix: str, sync: bool = True) -> Dict[str, Any]:
    """Checks and publishes the staged set, the index last: ``{"files",
    "index", "total_size"}``."""
def abort_set(out_dir: PathLike, *, prefix: str) -> None:
    """Removes the staged set (its staging folder or prefix)."""
