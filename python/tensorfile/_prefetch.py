"""Prefetching: the tensors, or slices of them, a caller will ask for,
declared once (:class:`PrefetchPlan`), read ahead with the library's read
plans, and held by the handle until asked for (:class:`Held`)."""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import _index
from ._native import Buffer, SafetensorError, dtype_bits

# A slice as the handle holds it: one native argument per dimension of the
# tensor (an index, or (start, stop, step) with the stop at the last value
# taken), or None for the whole tensor.
Key = Optional[Tuple[Any, ...]]


class PrefetchPlan:
    """The tensors, or slices of them, that :meth:`safe_open.prefetch` reads
    ahead, declared once as ``get_slice(name)[index]`` would ask for them::

        plan = PrefetchPlan()
        plan.add("embed.weight")                 # the whole tensor
        plan.add("lm_head.weight", np.s_[:512])  # rows 0 to 511
        plan.add("q.weight", (slice(None), slice(0, 64)))

    ``index`` holds integers, slices and ``...`` (what selects bytes);
    ``None`` means the whole tensor. A name may be added with several
    slices. Nothing is checked against a file until the plan is used.
    """

    def __init__(self) -> None:
        self._entries: List[Tuple[str, Any]] = []

    def add(self, name: str, index: Any = None) -> "PrefetchPlan":
        """Adds the tensor ``name`` whole (``index`` None), or the slice
        ``index`` of it; returns the plan."""
        if not isinstance(name, str):
            raise TypeError(f"PrefetchPlan.add: a tensor name is a str, not {type(name).__name__}")
        if index is not None:
            check_basic(index, f"PrefetchPlan.add({name!r})")
        self._entries.append((name, index))
        return self

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<tensorfile.PrefetchPlan of {len(self._entries)} entries>"


def check_basic(index: Any, what: str) -> None:
    """Refuses an index that is not made of integers, slices and ``...``:
    a new axis, a boolean or an array selects no bytes of its own."""
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if item is Ellipsis or isinstance(item, slice):
            continue
        if isinstance(item, (bool, np.bool_)) or _index._as_int(item) is None:
            raise SafetensorError(
                f"{what}: index {item!r} is not an integer, a slice or ...; "
                "apply new axes and advanced indexes to the tensor read"
            )


def parse(index: Any, shape: Sequence[int], torch_rules: bool) -> Tuple[List[Any], Tuple[int, ...]]:
    """The native arguments and the result's shape of a basic ``index`` of a
    tensor of ``shape``, by the framework's rules (torch's clamp a stop past
    the end; numpy's, as the reference, refuse it)."""
    if torch_rules:
        parsed = _index.plan_torch(index, shape, _index.NUMPY_RULES)
        return parsed.args, parsed.shape
    plain = _index.plan(index, shape)
    return plain.args, plain.shape


def key_of(args: Sequence[Any], shape: Sequence[int]) -> Tuple[Any, ...]:
    """The key of a slice: its arguments, one per dimension, each range
    written one way (its stop at the last value taken, a step of 1 for one
    value, ``(0, 0, 1)`` for none), so that two indexes taking the same
    values are one key. (A slice of every value is still a slice: asked
    for as one, it is handed over as one.)"""
    full = list(args) + [(0, int(n), 1) for n in shape[len(args) :]]
    out: List[Any] = []
    for arg, n in zip(full, shape):
        if isinstance(arg, int):
            out.append(arg)
            continue
        start, stop, step = arg
        count = max(0, -(-(stop - start) // step))
        if count == 0:
            out.append((0, 0, 1))
        else:
            out.append((start, start + (count - 1) * step + 1, step if count > 1 else 1))
    return tuple(out)


class Resolved:
    """A plan entry resolved against a file: name, key, native arguments
    (None for the whole tensor), dtype code and the result's shape."""

    def __init__(self, name: str, key: Key, args: Optional[List[Any]], code: str, shape: Tuple[int, ...]) -> None:
        self.name = name
        self.key = key
        self.args = args
        self.code = code
        self.shape = shape


def resolve(plan: Optional[PrefetchPlan], handle: Any, torch_rules: bool) -> List[Resolved]:
    """The entries of ``plan`` (every tensor whole without one) against the
    open ``handle``, in the file's order for no plan, the plan's otherwise;
    a tensor asked for whole takes no slice of it besides, and each slice
    is read once. An unknown name or a slice that does not fit raises, and
    then nothing is read."""
    if plan is None:
        return [
            Resolved(name, None, None, code, tuple(shape))
            for name, code, shape in handle.infos()
        ]
    if not isinstance(plan, PrefetchPlan):
        raise TypeError(f"prefetch(plan): a tensorfile.PrefetchPlan or None, not {type(plan).__name__}")
    whole = {name for name, index in plan if index is None}
    seen = set()
    out: List[Resolved] = []
    for name, index in plan:
        code, shape = handle.info(name)
        if index is None:
            key, args, result = None, None, tuple(shape)
        else:
            if name in whole:
                continue
            args, result = parse(index, shape, torch_rules)
            key = key_of(args, shape)
            args = list(key)
        if (name, key) in seen:
            continue
        seen.add((name, key))
        out.append(Resolved(name, key, args, code, tuple(result)))
    return out


def rounds(entries: Sequence[Resolved]) -> List[List[Resolved]]:
    """The entries in rounds that each name a tensor once (a read plan
    hands results over by name): most plans are one round; the k-th slice
    of a tensor is in round k."""
    out: List[List[Resolved]] = []
    count: Dict[str, int] = {}
    for entry in entries:
        k = count.get(entry.name, 0)
        count[entry.name] = k + 1
        if k == len(out):
            out.append([])
        out[k].append(entry)
    return out


class Held:
    """What a prefetch read, until asked for: by ``(name, key)``, a native
    buffer (host memory) or a device tensor. Taking one hands it over: the
    handle keeps no reference to it, so it is freed with the caller's last
    tensor over it. Shared by the handle's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: Dict[Tuple[str, Key], Any] = {}

    def replace(self, items: Dict[Tuple[str, Key], Any]) -> None:
        with self._lock:
            self._items = dict(items)

    def clear(self) -> None:
        self.replace({})

    def take(self, name: str, key: Key) -> Any:
        """The entry, handed over (None when there is none)."""
        with self._lock:
            return self._items.pop((name, key), None)

    def whole(self, name: str) -> Any:
        """The whole tensor ``name`` when held, kept (to cut slices from)."""
        with self._lock:
            return self._items.get((name, None))

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class Carrier:
    """A numpy array of a tensor's carrier (as native buffers describe their
    bytes) with its dtype code: what the frameworks' converters take."""

    def __init__(self, array: np.ndarray, code: str) -> None:
        self.array = array
        self.dtype = code
        self.__array_interface__ = array.__array_interface__


def carrier_index(code: str, key: Tuple[Any, ...], tensor_shape: Sequence[int], stored: Sequence[int]) -> Any:
    """The index of the slice ``key`` in a carrier array of shape
    ``stored``, or None when the carrier cannot express it (values below a
    byte cut inside a byte; the F6 types, stored flat)."""
    if not key:
        # A scalar: ``...`` keeps it an array.
        return Ellipsis
    plain = [a if isinstance(a, int) else slice(*a) for a in key]
    if dtype_bits(code) >= 8:
        return tuple(plain)
    # F4: two values a byte along the last dimension, halved in the carrier.
    last = int(tensor_shape[-1]) if tensor_shape else 0
    if code != "F4" or last % 2 or tuple(stored) != tuple(tensor_shape[:-1]) + (last // 2,):
        return None
    arg = key[-1]
    if isinstance(arg, int) or arg[2] != 1 or arg[0] % 2 or arg[1] % 2:
        return None
    return tuple(plain[:-1]) + (slice(arg[0] // 2, arg[1] // 2),)


def cut(whole: Any, code: str, tensor_shape: Sequence[int], key: Tuple[Any, ...]) -> Any:
    """The slice ``key`` of a held whole tensor in memory of its own: a
    :class:`Carrier` for a native buffer, a tensor for a device tensor; None
    when the held form cannot be cut there (then the slice is read)."""
    if isinstance(whole, Buffer):
        array = np.asarray(whole)
        at = carrier_index(code, key, tensor_shape, array.shape)
        if at is None:
            return None
        return Carrier(array[at].copy(order="C"), code)
    # A device tensor, of torch's dtype (F4 as its packed pairs).
    at = carrier_index(code, key, tensor_shape, tuple(whole.shape))
    if at is None:
        return None
    import torch

    return whole[at].clone(memory_format=torch.contiguous_format)
