"""Tensor bytes from the native module as numpy arrays, torch tensors or mlx
arrays, without copying where the framework can view memory it does not own.

A native ``Buffer`` describes its bytes through the numpy array interface in a
*carrier* dtype numpy always has (``uint16`` for BF16, ``uint8`` for the
float8 types and for packed F4). ``numpy.asarray`` views it, keeping the
buffer (and so the memory map or allocation) alive as the array's base; the
carrier is then viewed as ml_dtypes' type (numpy) or torch's (torch). JAX,
TensorFlow and Paddle take the carrier through DLPack, which views it too (JAX
and TensorFlow only when it is 64-byte aligned; they copy otherwise). MLX
copies. Frameworks are imported only when asked for.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from ._native import SafetensorError, carrier, framework_dtype_names

# The names frameworks give the format's dtype codes, from the core's dtype
# table (one table for Rust and Python).
_FRAMEWORK_NAMES = framework_dtype_names()

# The format's dtype codes whose numpy type comes from ml_dtypes, by name.
_ML_DTYPES: Dict[str, str] = _FRAMEWORK_NAMES["ml_dtypes"]

# The format's dtype codes with numpy types of their own.
_NUMPY_DTYPES: Dict[str, Any] = {
    code: np.dtype(typestr) for code, typestr in _FRAMEWORK_NAMES["numpy"].items()
}
# Two values per byte, the last dimension halved (as torch's
# float4_e2m1fn_x2): numpy has no packed type, so the bytes come as uint8.
_NUMPY_DTYPES["F4"] = np.dtype(np.uint8)

# The types packed below a byte that no framework here can hold as they are.
_NO_CARRIER = {"F6_E2M3", "F6_E3M2"}

# torch's names of the format's dtypes (those torch has; looked up lazily,
# since older torch versions lack some).
_TORCH_NAMES: Dict[str, str] = _FRAMEWORK_NAMES["torch"]

_ml_dtypes_module: Any = None


def ml_dtypes() -> Any:
    """The ml_dtypes module, or None when it is not installed."""
    global _ml_dtypes_module
    if _ml_dtypes_module is None:
        try:
            _ml_dtypes_module = importlib.import_module("ml_dtypes")
        except ImportError:
            _ml_dtypes_module = False
    return _ml_dtypes_module or None


def numpy_dtype(code: str) -> np.dtype:
    """The numpy dtype of a format dtype code (ml_dtypes' for BF16 and the
    float8 types); SafetensorError when numpy cannot hold it."""
    plain = _NUMPY_DTYPES.get(code)
    if plain is not None:
        return np.dtype(plain)
    name = _ML_DTYPES.get(code)
    if name is not None:
        ml = ml_dtypes()
        if ml is None:
            raise SafetensorError(
                f"{code} has no numpy dtype without ml_dtypes: pip install ml_dtypes, "
                f"or read it cast with get_tensor(name, dtype='F32')"
            )
        return np.dtype(getattr(ml, name))
    raise SafetensorError(
        f"{code} has no numpy dtype: read it cast with get_tensor(name, dtype='F32')"
    )


def as_numpy(buffer: Any) -> np.ndarray:
    """A numpy array viewing a native buffer (no copy): its base keeps the
    buffer alive."""
    code = buffer.dtype
    if code in _NO_CARRIER:
        raise SafetensorError(
            f"{code} packs four values in three bytes, which no numpy or torch dtype holds: "
            f"read it cast with get_tensor(name, dtype='F32')"
        )
    array = np.asarray(buffer)
    name = _ML_DTYPES.get(code)
    if name is not None:
        array = array.view(numpy_dtype(code))
    return array


def torch_dtype(torch: Any, code: str) -> Any:
    """torch's dtype for a format dtype code; SafetensorError when this torch
    has none."""
    name = _TORCH_NAMES.get(code)
    dtype = getattr(torch, name, None) if name is not None else None
    if dtype is None:
        raise SafetensorError(
            f"{code} has no dtype in torch {torch.__version__}: "
            f"read it cast with get_tensor(name, dtype='F32')"
        )
    return dtype


def is_cpu(device: Any) -> bool:
    """Whether `device` names the CPU (None is the CPU)."""
    return device is None or device == "cpu" or str(device) == "cpu"


def torch_device(device: Any) -> Any:
    """A device as torch takes it: an int is a CUDA device index."""
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    return device


def is_cuda(device: Any) -> bool:
    """Whether ``device`` (as ``safe_open`` and ``load_file`` take it: a
    string, an int, a torch device) names a CUDA device."""
    if is_cpu(device):
        return False
    device = torch_device(device)
    return str(device).split(":", 1)[0] == "cuda"


def as_torch(buffer: Any, device: Any = "cpu") -> Any:
    """A torch tensor viewing a native buffer (no copy on the CPU)."""
    import torch

    code = buffer.dtype
    if code in _NO_CARRIER:
        as_numpy(buffer)  # raises, with the reason
    dtype = torch_dtype(torch, code)
    carrier = np.asarray(buffer)
    if carrier.dtype == np.uint16 and not hasattr(torch, "uint16"):
        # torch before 2.3 takes no uint16 from numpy; same width, same bytes.
        carrier = carrier.view(np.int16)
    tensor = torch.from_numpy(carrier)
    if tensor.dtype != dtype:
        tensor = tensor.view(dtype)
    if not is_cpu(device):
        tensor = tensor.to(torch_device(device))
    return tensor


def as_mlx(buffer: Any) -> Any:
    """An mlx array holding a native buffer's tensor (mlx copies)."""
    import mlx.core as mx

    code = buffer.dtype
    carrier = np.asarray(buffer) if code not in _NO_CARRIER else as_numpy(buffer)
    if code == "BF16":
        return mx.array(carrier).view(mx.bfloat16)
    if code in _ML_DTYPES or code == "F4":
        raise SafetensorError(
            f"{code} has no mlx dtype: read it cast with get_tensor(name, dtype='F32')"
        )
    return mx.array(carrier)


def _shareable(carrier: np.ndarray) -> np.ndarray:
    """The carrier as DLPack exports it: numpy refuses to export read-only
    memory, so such an array is copied first."""
    return carrier if carrier.flags.writeable else carrier.copy()


def as_jax(buffer: Any, device: Any = "cpu") -> Any:
    """A JAX array of a native buffer's tensor on the CPU: the buffer's memory
    itself when it is 64-byte aligned (as ``load_file``'s reads are), a copy
    otherwise (JAX's own rule). As ``jnp.array`` does, 64-bit types become
    32-bit unless ``jax_enable_x64`` is set."""
    import jax

    return jax.device_put(as_numpy(buffer))


# The format's dtype codes TensorFlow has no dtype for.
_NO_TF = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F4"}


# TensorFlow takes memory of any alignment through DLPack, then aborts the
# process in the first operation on it unless it is 64-byte aligned
# (EIGEN_MAX_ALIGN_BYTES): other memory is copied.
_TF_ALIGN = 64


def as_tf(buffer: Any, device: Any = "cpu") -> Any:
    """A TensorFlow tensor viewing a native buffer's tensor when its memory is
    64-byte aligned (DLPack, no copy; BF16 is bit-cast from its uint16
    carrier, also without a copy), else a copy (as a map of the file at an
    unaligned offset may be)."""
    import tensorflow as tf

    code = buffer.dtype
    if code in _NO_TF:
        raise SafetensorError(
            f"{code} has no TensorFlow dtype: read it cast with get_tensor(name, dtype='F32')"
        )
    carrier = as_numpy(buffer) if code in _NO_CARRIER else np.asarray(buffer)
    tensor = None
    if carrier.ctypes.data % _TF_ALIGN == 0:
        try:
            tensor = tf.experimental.dlpack.from_dlpack(_shareable(carrier).__dlpack__())
        except (BufferError, TypeError, tf.errors.InvalidArgumentError):
            pass  # a type this TensorFlow's DLPack does not take
    if tensor is None:
        tensor = tf.convert_to_tensor(carrier)
    if code == "BF16":
        tensor = tf.bitcast(tensor, tf.bfloat16)
    return tensor


# Paddle's names of the format's dtypes (those Paddle has).
_PADDLE_NAMES: Dict[str, str] = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "C64": "complex64",
}


def paddle_dtype(paddle: Any, code: str) -> Any:
    """Paddle's dtype for a format dtype code; SafetensorError when Paddle
    has none."""
    name = _PADDLE_NAMES.get(code)
    dtype = getattr(paddle, name, None) if name is not None else None
    if dtype is None:
        raise SafetensorError(
            f"{code} has no dtype in paddle {paddle.__version__}: "
            f"read it cast with get_tensor(name, dtype='F32')"
        )
    return dtype


def paddle_device(device: Any) -> Any:
    """A device as Paddle names it: CUDA devices (``"cuda:N"``, ``N``) are
    ``"gpu:N"``."""
    if isinstance(device, int) and not isinstance(device, bool):
        return f"gpu:{device}"
    text = str(device)
    if text == "cuda":
        return "gpu:0"
    if text.startswith("cuda:"):
        return "gpu:" + text[len("cuda:") :]
    return device


def as_paddle(buffer: Any, device: Any = "cpu") -> Any:
    """A Paddle tensor viewing a native buffer's tensor on the CPU (DLPack,
    no copy; BF16 and float8 are views of their integer carriers); on another
    device, a copy there."""
    import paddle

    code = buffer.dtype
    dtype = paddle_dtype(paddle, code)
    carrier = np.asarray(buffer)
    if carrier.dtype == np.uint16:
        # Paddle's DLPack reads uint16 as a type it cannot view as bfloat16;
        # int16 it can (the same bytes).
        carrier = carrier.view(np.int16)
    if carrier.size == 0:
        tensor = paddle.empty(list(carrier.shape), dtype=dtype)
    else:
        tensor = paddle.utils.dlpack.from_dlpack(_shareable(carrier))
        if tensor.dtype != dtype:
            tensor = tensor.view(dtype)
    if not is_cpu(device):
        tensor = tensor.to(paddle_device(device))
    return tensor


class Framework:
    """How one framework's tensors are made from buffers."""

    def __init__(
        self,
        name: str,
        convert: Callable[[Any, Any], Any],
        empty: Callable[[str, Tuple[int, ...], Any], Any],
        reshape: Callable[[Any, Tuple[int, ...]], Any],
    ) -> None:
        self.name = name
        self.convert = convert
        self.empty = empty
        self.reshape = reshape


def _numpy_empty(code: str, shape: Tuple[int, ...], device: Any) -> Any:
    return np.empty(shape, dtype=numpy_dtype(code))


def _torch_empty(code: str, shape: Tuple[int, ...], device: Any) -> Any:
    import torch

    device = "cpu" if is_cpu(device) else torch_device(device)
    return torch.empty(shape, dtype=torch_dtype(torch, code), device=device)


def _mlx_empty(code: str, shape: Tuple[int, ...], device: Any) -> Any:
    import mlx.core as mx

    return mx.array(np.empty(shape, dtype=numpy_dtype(code)))


def _jax_empty(code: str, shape: Tuple[int, ...], device: Any) -> Any:
    import jax.numpy as jnp

    return jnp.zeros(shape, dtype=numpy_dtype(code))


def _tf_empty(code: str, shape: Tuple[int, ...], device: Any) -> Any:
    import tensorflow as tf

    if code in _NO_TF:
        raise SafetensorError(f"{code} has no TensorFlow dtype")
    return tf.convert_to_tensor(np.empty(shape, dtype=numpy_dtype(code)))


def _paddle_empty(code: str, shape: Tuple[int, ...], device: Any) -> Any:
    import paddle

    tensor = paddle.empty(list(shape), dtype=paddle_dtype(paddle, code))
    return tensor if is_cpu(device) else tensor.to(paddle_device(device))


def _tf_reshape(tensor: Any, shape: Tuple[int, ...]) -> Any:
    import tensorflow as tf

    return tf.reshape(tensor, shape)


def _numpy_convert(buffer: Any, device: Any) -> Any:
    return as_numpy(buffer)


def _mlx_convert(buffer: Any, device: Any) -> Any:
    return as_mlx(buffer)


def _reshape(tensor: Any, shape: Tuple[int, ...]) -> Any:
    return tensor.reshape(shape)


_NUMPY = Framework("numpy", _numpy_convert, _numpy_empty, _reshape)
_TORCH = Framework("pt", as_torch, _torch_empty, _reshape)
_MLX = Framework("mlx", _mlx_convert, _mlx_empty, _reshape)
_JAX = Framework("flax", as_jax, _jax_empty, _reshape)
_TF = Framework("tensorflow", as_tf, _tf_empty, _tf_reshape)
_PADDLE = Framework("paddle", as_paddle, _paddle_empty, _reshape)

_NAMES: Dict[str, Framework] = {
    "np": _NUMPY,
    "numpy": _NUMPY,
    "pt": _TORCH,
    "torch": _TORCH,
    "pytorch": _TORCH,
    "mlx": _MLX,
    "flax": _JAX,
    "jax": _JAX,
    "tf": _TF,
    "tensorflow": _TF,
    "paddle": _PADDLE,
}

# The module each framework needs, imported when the framework is asked for.
_MODULES = {_TORCH: "torch", _MLX: "mlx.core", _JAX: "jax", _TF: "tensorflow", _PADDLE: "paddle"}


def framework(name: Any, device: Any) -> Framework:
    """The framework of that name, checked with its device: the framework is
    imported now (mlx as mlx.core, so nothing needs importing first)."""
    if not isinstance(name, str) or name not in _NAMES:
        supported = ", ".join(sorted(_NAMES))
        raise SafetensorError(f"framework {name} is invalid: use one of {supported}")
    chosen = _NAMES[name]
    module = _MODULES.get(chosen)
    if chosen is _TORCH:
        importlib.import_module("torch")
    elif module is not None:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise SafetensorError(f"framework {name} needs {module} installed: {e}") from e
    if chosen not in (_TORCH, _PADDLE) and not is_cpu(device):
        raise SafetensorError(f"Device {device} is not supported for framework {chosen.name}")
    return chosen


def check_backend(backend: str) -> None:
    """Refuses a ``backend`` other than the two ``safe_open`` knows."""
    if backend not in ("mmap", "pread"):
        raise SafetensorError(
            f"backend {backend!r} is not supported: use \"mmap\" (the default) or \"pread\""
        )


def load_file_as(
    name: str, filename: Any, device: Any, backend: str, dtype: Any, timeout: Optional[float]
) -> Dict[str, Any]:
    """``load_file`` of the framework ``name``: every tensor read into memory
    of its own (both backends read this way), then handed to the framework as
    its ``convert`` does; with ``dtype``, float tensors cast on load."""
    import os

    from . import _native
    from ._open import safe_open

    check_backend(backend)
    chosen = framework(name, device)
    if dtype is not None:
        with safe_open(filename, name, device, backend="pread", timeout=timeout) as f:
            return f.get_tensors(dtype=dtype)
    pairs = _native.load_file(os.fspath(filename), timeout=timeout)
    return {key: chosen.convert(buffer, device) for key, buffer in pairs}


def load_bytes_as(name: str, data: bytes, device: Any = "cpu") -> Dict[str, Any]:
    """``load`` of the framework ``name``: the tensors of a file held in
    ``data``, each copied once into memory of its own, then handed over."""
    from . import _native

    chosen = framework(name, device)
    return {key: chosen.convert(buffer, device) for key, buffer in _native.load_bytes(data)}


def dtype_code(dtype: Optional[str]) -> Optional[str]:
    """A dtype asked for on load, as the format names it (``"bf16"`` and
    ``"bfloat16"`` both give ``"BF16"``); None stays None."""
    if dtype is None:
        return None
    if not isinstance(dtype, str):
        if type(dtype).__module__.startswith("torch"):
            # torch.bfloat16 prints as "torch.bfloat16".
            dtype = str(dtype).rsplit(".", 1)[-1]
        else:
            # numpy dtypes and scalar types (np.float16), ml_dtypes' too.
            dtype = np.dtype(dtype).name
    for code, name in _TORCH_NAMES.items():
        if dtype == name:
            return code
    return dtype


class Destination:
    """Memory a caller gives ``read_into``: a numpy array or a torch tensor
    on the CPU, described by the address and length of its bytes (read
    straight into, with no copy between)."""

    def __init__(self, out: Any) -> None:
        torch = sys.modules.get("torch")
        if isinstance(out, np.ndarray):
            self.address = int(out.__array_interface__["data"][0])
            self.nbytes = int(out.nbytes)
            self.writeable = bool(out.flags.writeable)
            self.contiguous = bool(out.flags.c_contiguous)
            self.device = "cpu"
            self.dtype: Any = out.dtype
            self.is_bytes = out.dtype == np.uint8
        elif torch is not None and isinstance(out, torch.Tensor):
            self.address = int(out.data_ptr())
            self.nbytes = out.numel() * out.element_size()
            self.writeable = True
            self.contiguous = bool(out.is_contiguous())
            self.device = str(out.device)
            self.dtype = out.dtype
            self.is_bytes = out.dtype == torch.uint8
        else:
            raise TypeError(
                f"read_into: out is a numpy array or a torch tensor, not {type(out).__name__}"
            )
        self.shape = tuple(int(n) for n in out.shape)
        self._torch = torch if not isinstance(out, np.ndarray) else None

    def describe(self) -> str:
        dtype = str(self.dtype).rsplit(".", 1)[-1]
        return f"{dtype} {list(self.shape)}"

    def holds(self, code: str, shape: Tuple[int, ...]) -> bool:
        """Whether it is an array of the format's dtype ``code`` and shape
        ``shape`` (in the carrier numpy or torch gives that dtype)."""
        _, stored = carrier(code, list(shape))
        if self.shape != tuple(stored):
            return False
        try:
            if self._torch is not None:
                return self.dtype == torch_dtype(self._torch, code)
            return self.dtype == numpy_dtype(code)
        except SafetensorError:
            return False
