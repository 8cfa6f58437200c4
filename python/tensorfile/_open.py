"""``safe_open``: a safetensors file, a sharded set or a model directory,
opened lazily, its tensors handed out as they are asked for."""

from __future__ import annotations

import io
import math
import os
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _frameworks, _index, _prefetch, _staging
from ._native import Buffer, Handle, SafetensorError, dtype_bits, is_float
from ._prefetch import PrefetchPlan

PathLike = Union[str, "os.PathLike[str]"]


class safe_open:
    """Opens a safetensors file lazily and gives its tensors as asked.

    ``filename`` may also be a sharded set's index (``*.safetensors.index.json``)
    or a model directory: every shard's header is read and checked against the
    index, and the tensors of all shards are one namespace. It may be a URL
    too: ``s3://BUCKET/KEY``, ``http(s)://...`` or ``hf://ORG/REPO[@REV][/PATH]``
    (a file, an index, or a directory or repository), of which only headers
    are read on opening; each tensor or slice is then fetched with range
    requests of exactly its bytes into memory of its own, whatever the backend.
    For a URL, ``timeout`` (seconds) is one deadline from opening for all of
    the handle's remote reads (opening and every later tensor or slice),
    retries and waits included: past it, a ``SafetensorError`` that says the
    timeout ran out. Without it, a remote read fails only when the server
    stops keeping up (no connection within 10 s, no answer within 30 s, less
    than 1 KiB/s over 30 s). A value that is not a positive number of seconds
    is a ``ValueError``.

    ``framework`` is ``"np"``/``"numpy"``, ``"pt"``/``"torch"``/``"pytorch"``,
    ``"flax"``/``"jax"``, ``"tf"``/``"tensorflow"``, ``"paddle"`` or ``"mlx"``
    (the framework is imported when asked for, never before; ``device`` other
    than the CPU is for torch and Paddle). JAX, TensorFlow and Paddle view the
    bytes through DLPack (JAX copies what is not 64-byte aligned); MLX
    copies. With the
    ``"mmap"`` backend (the default) a tensor of 64 KiB or more is a private,
    copy-on-write map of its bytes in the file: no copy, writeable (writes
    never reach the file), freed when the last array over it goes. Like any
    map, it dies with SIGBUS if the file is truncated underneath; the
    ``"pread"`` backend reads every tensor into memory of its own instead.

    ``prefetch(plan)`` reads the tensors (or slices) of a
    :class:`PrefetchPlan` ahead, in parallel, and holds them until
    ``get_tensor`` or ``get_slice`` asks for them; ``read_into`` reads a
    tensor into memory the caller owns.

    Usable as a context manager (closed on exit; arrays handed out live on)
    or as a plain object, and from several threads at once.
    """

    def __init__(
        self,
        filename: PathLike,
        framework: str,
        device: Any = "cpu",
        *,
        backend: str = "mmap",
        timeout: Optional[float] = None,
    ) -> None:
        self._framework = _frameworks.framework(framework, device)
        self._device = device
        self._handle = Handle(os.fspath(filename), backend, timeout)
        self._held = _prefetch.Held()

    @classmethod
    def _of_handle(cls, handle: Handle, framework: str, device: Any) -> "safe_open":
        opened = cls.__new__(cls)
        opened._framework = _frameworks.framework(framework, device)
        opened._device = device
        opened._handle = handle
        opened._held = _prefetch.Held()
        return opened

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, _exc_type: Any, _exc_value: Any, _traceback: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the file (and frees what a prefetch holds that was not
        asked for); later calls raise SafetensorError."""
        self._held.clear()
        self._handle.close()

    def keys(self) -> List[str]:
        """The tensor names, sorted."""
        return self._handle.keys()

    def offset_keys(self) -> List[str]:
        """The tensor names in the order of their bytes in the file (shard by
        shard for a set)."""
        return self._handle.offset_keys()

    def metadata(self) -> Optional[Dict[str, str]]:
        """The header's ``__metadata__``, or None when it has none (for a set,
        the union of the shards')."""
        return self._handle.metadata()

    def get_tensor(self, name: str, dtype: Any = None) -> Any:
        """The tensor ``name`` in the framework asked for.

        With ``dtype`` (a float dtype: ``"bf16"``, ``"F32"``, ``"float16"``,
        ``torch.bfloat16``, ...) the tensor is cast on load, in memory of its own
        (read from the file, whatever a prefetch holds).

        A tensor a prefetch holds whole is handed over (the handle keeps it
        no longer) without reading the file; asked for again, it is read.
        """
        code = _frameworks.dtype_code(dtype)
        if code is None:
            held = self._held.take(name, None)
            if held is not None:
                return self._tensor_of(held)
            buffer = self._handle.get(name)
        else:
            buffer = self._handle.get_cast(name, code)
        return self._framework.convert(buffer, self._device)

    def get_tensors(self, dtype: Any = None) -> Dict[str, Any]:
        """Every tensor, by name, in the order of their bytes. With ``dtype``,
        the float tensors are cast to it (integers and booleans stay).

        With the ``mmap`` backend the tensors are maps of the file, as
        ``get_tensor`` gives them; otherwise they are read with one read plan
        (parallel reads, each tensor into memory of its own). Tensors a
        prefetch holds whole are handed over without reading."""
        names = self._handle.offset_keys()
        code = _frameworks.dtype_code(dtype)
        convert = self._framework.convert
        device = self._device
        if code is not None:
            buffers = [
                self._handle.get_cast(n, code) if is_float(self._handle.info(n)[0]) else self._handle.get(n)
                for n in names
            ]
            return {n: convert(b, device) for n, b in zip(names, buffers)}
        held = {}
        for n in names:
            h = self._held.take(n, None)
            if h is not None:
                held[n] = h
        rest = [n for n in names if n not in held]
        read = dict(zip(rest, self._handle.get_many(rest)))
        return {
            n: self._tensor_of(held[n]) if n in held else convert(read[n], device) for n in names
        }

    def prefetch(self, plan: Optional[PrefetchPlan] = None) -> None:
        """Reads the tensors, or slices, of ``plan`` ahead (every tensor
        whole without one) and holds them until asked for: ``get_tensor``
        hands over a tensor held whole, ``get_slice(name)[index]`` a slice
        the plan names with the same values (and cuts any slice, in memory
        of its own, from a tensor held whole), without reading the file
        again; anything else is read as usual. A held tensor or slice is
        handed over once, and the handle keeps it no longer: it is freed
        when the caller's last tensor over it goes. What was never asked
        for is freed by the next ``prefetch``, by ``close`` (or leaving a
        ``with`` block), or when the handle goes.

        The reads are one read plan on the library's pool (parallel
        positional reads for a file or a set, range requests merged across
        gaps below 1 MiB for a URL), the interpreter released, each tensor
        into memory allocated for it alone (huge pages from 2 MiB where they
        help). With
        ``framework="pt"`` on a CUDA device each tensor goes to the device
        through pinned staging buffers reused in a ring, read into while
        earlier copies run; on another device it is held on the host and
        moved when asked for. An unknown name or a slice that does not fit
        raises before anything is read.
        """
        torch_rules = self._framework.name == "pt"
        cuda = torch_rules and _frameworks.is_cuda(self._device)
        # Checked before anything held is let go or anything read.
        entries = _prefetch.resolve(plan, self._handle, torch_rules) if plan is not None or cuda else []
        self._held.clear()
        held: Dict[Tuple[str, _prefetch.Key], Any] = {}
        if cuda:
            held = self._to_device(entries)
        elif plan is None:
            pairs, _ = self._handle.read_plan(None)
            held = {(name, None): buffer for name, buffer in pairs}
        else:
            for entries_of_round in _prefetch.rounds(entries):
                by_name = {e.name: e for e in entries_of_round}
                pairs, _ = self._handle.read_plan([(e.name, e.args) for e in entries_of_round])
                for name, buffer in pairs:
                    held[(name, by_name[name].key)] = buffer
        self._held.replace(held)

    def _to_device(self, entries: List[_prefetch.Resolved]) -> Dict[Tuple[str, _prefetch.Key], Any]:
        """``entries`` read into the CUDA device through the staging ring."""
        import torch

        items = [_staging.Item((e.name, e.key), e.name, e.args, e.code, e.shape) for e in entries]
        shapes = {e.name: self._handle.info(e.name)[1] for e in entries}
        ops = _staging.TorchOps(torch, _frameworks.torch_device(self._device))

        def read(name: str, args: Any, out: Any) -> None:
            self._read_native(name, args, out, None)

        return _staging.load(ops, read, items, shapes)

    def _tensor_of(self, held: Any) -> Any:
        """A held entry as the framework's tensor (a device tensor as it is)."""
        if isinstance(held, (Buffer, _prefetch.Carrier)):
            return self._framework.convert(held, self._device)
        return held

    def _held_slice(self, name: str, code: str, shape: List[int], args: List[Any]) -> Any:
        """The slice ``args`` of ``name`` from what a prefetch holds (taken
        when held as that slice, cut from the tensor held whole), as the
        framework's tensor; None when nothing held has it."""
        key = _prefetch.key_of(args, shape)
        held = self._held.take(name, key)
        if held is not None:
            return self._tensor_of(held)
        whole = self._held.whole(name)
        if whole is None:
            return None
        part = _prefetch.cut(whole, code, shape, key)
        return None if part is None else self._tensor_of(part)

    def read_into(self, name: str, out: Any, index: Any = None) -> Any:
        """Reads the tensor ``name``, or its slice ``index`` (integers,
        slices and ``...``, as ``get_slice(name)[index]`` takes them), into
        ``out``, with no copy between: the bytes land in C order, the read
        split over the library's pool, the interpreter released. Returns
        ``out``.

        ``out`` is a writeable, C-contiguous numpy array or CPU torch tensor
        of the tensor's (or slice's) dtype and shape, or of uint8 holding
        exactly its bytes (what staging buffers are); anything else is a
        ValueError naming the tensor and both sizes. A prefetch's held
        tensors are not used: the file is read.
        """
        code, shape = self._handle.info(name)
        if index is None:
            args, result = None, tuple(shape)
        else:
            _prefetch.check_basic(index, f"read_into({name!r})")
            args, result = _prefetch.parse(index, shape, self._framework.name == "pt")
        self._read_native(name, args, out, (code, result))
        return out

    def _read_native(self, name: str, args: Any, out: Any, typed: Optional[Tuple[str, Tuple[int, ...]]]) -> None:
        """Checks ``out`` and reads into it. ``typed``: the dtype code and
        shape of what is read, which ``out`` may have instead of being
        bytes; None for staging buffers (bytes, sized by the caller)."""
        dest = _frameworks.Destination(out)
        if typed is None:
            expected = dest.nbytes
            what = f"tensor {name!r}"
        else:
            code, result = typed
            expected = math.prod(result) * dtype_bits(code) // 8
            what = f"tensor {name!r}" + ("" if args is None else f" slice {_slice_text(args)}")
            what += f" ({code} {list(result)}, {expected} bytes)"
        if dest.device != "cpu":
            raise ValueError(
                f"read_into: {what}: out ({dest.nbytes} bytes) is on {dest.device}; "
                "read_into fills CPU memory (read into pinned memory, then copy)"
            )
        if dest.nbytes != expected:
            raise ValueError(f"read_into: {what}: out holds {dest.nbytes} bytes, not {expected}")
        if not dest.contiguous:
            raise ValueError(f"read_into: {what}: out ({dest.nbytes} bytes) is not C-contiguous")
        if not dest.writeable:
            raise ValueError(f"read_into: {what}: out ({dest.nbytes} bytes) is read-only")
        if typed is not None and not dest.is_bytes and not dest.holds(*typed):
            raise ValueError(
                f"read_into: {what}: out is {dest.describe()} ({dest.nbytes} bytes): give an array "
                f"of the tensor's dtype and shape, or uint8 of {expected} bytes"
            )
        self._handle.read_into(name, args, dest.address, dest.nbytes)

    def get_slice(self, name: str) -> "TensorSlice":
        """A slice object for ``name``: ``get_shape()``, ``get_dtype()``, and
        indexing (ints, slices, ``...``, ``None``) that reads only the bytes the
        slice covers."""
        dtype, shape = self._handle.info(name)
        return TensorSlice(self, name, dtype, shape)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._handle

    def __len__(self) -> int:
        return len(self._handle)

    def __repr__(self) -> str:
        state = "closed" if self._handle.closed else "open"
        return f"<tensorfile.safe_open {self._handle.path!r} ({self._framework.name}, {state})>"


class TensorSlice:
    """One tensor of an open file, to be sliced: ``f.get_slice(name)[:, :128]``."""

    def __init__(self, owner: safe_open, name: str, dtype: str, shape: List[int]) -> None:
        self._owner = owner
        self._name = name
        self._dtype = dtype
        self._shape = shape

    def get_shape(self) -> List[int]:
        """The tensor's shape."""
        return list(self._shape)

    def get_dtype(self) -> str:
        """The tensor's dtype as the header names it (``"F32"``)."""
        return self._dtype

    @property
    def shape(self) -> List[int]:
        """The tensor's shape."""
        return list(self._shape)

    @property
    def dtype(self) -> str:
        """The tensor's dtype as the header names it."""
        return self._dtype

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, index: Any) -> Any:
        fw = self._owner._framework
        if fw.name == "pt" and self._dtype != "F4":
            # The reference indexes a torch tensor: torch's rules.
            rules = _index.torch_rules()
            plan = _index.plan_torch(index, self._shape, rules)
            if plan.advanced is not None and _frameworks.is_cpu(self._owner._device):
                # torch itself over the whole tensor, which is mapped where
                # the file is (or held by a prefetch, then left held): only
                # the pages the index selects are read.
                whole = self._owner._held.whole(self._name)
                if whole is not None:
                    return self._owner._tensor_of(whole)[index]
                return self._owner.get_tensor(self._name)[index]
            return self._by_torch_rules(index, fw, rules)
        plan = _index.plan(index, self._shape)
        if plan.empty:
            return fw.empty(self._dtype, plan.shape, self._owner._device)
        return self._read(plan.args, plan.shape, fw)

    def _by_torch_rules(self, index: Any, fw: Any, rules: "_index.IndexRules") -> Any:
        """``index`` by torch's rules: the basic part read natively, the
        advanced part applied by ``fw`` to what was read."""
        plan = _index.plan_torch(index, self._shape, rules)
        if plan.empty:
            tensor = fw.empty(self._dtype, plan.shape, self._owner._device)
        else:
            tensor = self._read(plan.args, plan.shape, fw)
        if plan.advanced is not None:
            tensor = tensor[plan.advanced]
        return tensor

    def _read(self, args: List[Any], shape: Tuple[int, ...], fw: Any) -> Any:
        """The native slice of ``args``, in ``fw``'s tensor of ``shape``."""
        owner = self._owner
        tensor = owner._held_slice(self._name, self._dtype, self._shape, args)
        if tensor is None:
            buffer = owner._handle.slice(self._name, args)
            tensor = fw.convert(buffer, owner._device)
        if self._dtype == "F4" and shape:
            # The carrier holds a byte per pair of values.
            shape = shape[:-1] + (shape[-1] // 2,)
        if tuple(tensor.shape) != shape:
            tensor = fw.reshape(tensor, shape)
        return tensor

    def __repr__(self) -> str:
        return f"<tensorfile slice {self._name!r} {self._dtype} {self._shape}>"


def _slice_text(args: List[Any]) -> str:
    """Native slice arguments as numpy writes the index: ``[0:4, 2]``."""
    parts = []
    for arg in args:
        if isinstance(arg, int):
            parts.append(str(arg))
        else:
            start, stop, step = arg
            parts.append(f"{start}:{stop}" + ("" if step == 1 else f":{step}"))
    return "[" + ", ".join(parts) + "]"


def _descriptor(f: Any) -> Optional[int]:
    """The descriptor of a real file behind a file object (a file opened
    with ``open``, in either mode, or fsspec's local file), else None. Wrappers
    that transform the bytes (gzip, ...) have none: their ``fileno`` is the
    compressed file's, so only chains of io's own file types are followed."""
    seen = 0
    obj = f
    while obj is not None and seen < 8:
        seen += 1
        if isinstance(obj, io.FileIO):
            try:
                return obj.fileno()
            except (OSError, ValueError):
                return None
        if isinstance(obj, (io.TextIOWrapper, io.BufferedReader, io.BufferedRandom)):
            obj = getattr(obj, "buffer", None) or getattr(obj, "raw", None)
            continue
        # fsspec's LocalFileOpener holds the real file as `f`.
        inner = getattr(obj, "f", None)
        if type(obj).__name__ == "LocalFileOpener" and inner is not None:
            obj = inner
            continue
        return None
    return None


def _safe_open_handle(
    f: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap"
) -> safe_open:
    """``safe_open`` over an open Python file object: the file's descriptor
    when it is a real file (read as ``safe_open`` reads a path), else the
    object's own ``seek`` and ``read`` (fsspec's remote files, ``io.BytesIO``),
    fetching only the header now and each tensor when asked for."""
    _frameworks.framework(framework, device)
    name = getattr(f, "name", None)
    name = os.fspath(name) if isinstance(name, (str, os.PathLike)) else f"<{type(f).__name__}>"
    fd = _descriptor(f)
    if fd is not None and hasattr(Handle, "from_fd"):
        handle = Handle.from_fd(fd, name, backend)
    else:
        binary = f.buffer if isinstance(f, io.TextIOBase) and hasattr(f, "buffer") else f
        if not (hasattr(binary, "seek") and hasattr(binary, "read")):
            raise SafetensorError(
                f"_safe_open_handle needs a file object with seek() and read(), not {type(f).__name__}"
            )
        handle = Handle.from_file_object(binary, name)
    return safe_open._of_handle(handle, framework, device)
