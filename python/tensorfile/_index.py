"""Indexing a tensor's slice object: numpy's rules where the reference is
wrong, the reference's where its tests pin them.

As numpy: negative bounds count from the end (and clamp at the start),
``start >= stop`` is empty, a dimension of length 0 slices to nothing, ``None``
and booleans add a dimension (of length 1, or 0 for ``False``) instead of
``True`` reading as index 1. As the reference (its tests pin these texts): a
stop past the end, or a start past it, raises "Error during slicing [..] with
shape [..]: index N out of bounds for tensor dimension #d of size n"; a
negative index before the start raises "Invalid index -6 for dimension 1 of
size 5"; non-empty lists are refused; steps must be positive.
"""

from __future__ import annotations

import operator
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._native import SafetensorError

# What the native slicer takes per dimension: an index, or (start, stop, step).
NativeArg = Union[int, Tuple[int, int, int]]


def _text(item: Any) -> str:
    """One index as the reference writes it in errors."""
    if isinstance(item, slice):
        start = "" if item.start is None else str(item.start)
        stop = "" if item.stop is None else str(item.stop)
        text = f"{start}:{stop}"
        if item.step is not None:
            text += f":{item.step}"
        return text
    if isinstance(item, list):
        return "0:0"
    return str(item)


def _as_int(item: Any) -> Optional[int]:
    """An integer index (Python or numpy integer), else None. Booleans are
    not integers here: numpy reads them as a new dimension."""
    if isinstance(item, (bool, np.bool_)):
        return None
    try:
        return operator.index(item)
    except TypeError:
        return None


def _adds_dimension(item: Any) -> bool:
    """Whether an index item adds a dimension (None, a boolean) as numpy's do."""
    return item is None or isinstance(item, (bool, np.bool_))


def _bound(value: Any) -> Optional[int]:
    if value is None:
        return None
    number = _as_int(value)
    if number is None:
        raise SafetensorError(
            f"Slice bounds must be integers or None, got {type(value).__name__}"
        )
    return number


class Plan:
    """A parsed index: the native arguments, and the shape of the result
    (with the dimensions ``None`` and booleans add)."""

    def __init__(self, args: List[NativeArg], shape: Tuple[int, ...], empty: bool) -> None:
        self.args = args
        self.shape = shape
        # A False index: the result has no elements, nothing is read.
        self.empty = empty


def plan(index: Any, shape: Sequence[int]) -> Plan:
    """Parses ``index`` against ``shape`` (see the module documentation)."""
    items = list(index) if isinstance(index, tuple) else [index]
    # Kinds: "new" (None/bool, adds a dimension), "..." and those that
    # consume a dimension.
    ellipses = sum(1 for it in items if it is Ellipsis)
    if ellipses > 1:
        raise SafetensorError("Only one ellipsis (...) is allowed in slice index")
    for position, item in enumerate(items):
        if (
            item is None
            or item is Ellipsis
            or isinstance(item, (bool, np.bool_, slice, list))
            or _as_int(item) is not None
        ):
            continue
        raise SafetensorError(
            f"Unsupported slice index at position {position}: expected slice, int, or ellipsis"
        )
    consuming = sum(1 for it in items if it is not Ellipsis and not _adds_dimension(it))
    ndim = len(shape)
    # The ellipsis stands for the dimensions nothing else takes.
    expanded: List[Any] = []
    for item in items:
        if item is Ellipsis:
            expanded.extend([slice(None)] * max(ndim - consuming, 0))
        else:
            expanded.append(item)
    shown = "[" + ", ".join(_text(it) for it in expanded if not _adds_dimension(it)) + "]"
    dims = list(shape)

    def out_of_bounds(position: int, axis: int) -> SafetensorError:
        return SafetensorError(
            f"Error during slicing {shown} with shape {dims}: index {position} out of bounds "
            f"for tensor dimension #{axis} of size {dims[axis]}"
        )

    if consuming > ndim:
        raise SafetensorError(
            f"Error during slicing {shown} with shape {dims}: "
            "more slicing indexes than dimensions in tensor"
        )

    args: List[NativeArg] = []
    out_shape: List[int] = []
    empty = False
    axis = 0
    for item in expanded:
        if _adds_dimension(item):
            size = 0 if item is not None and not bool(item) else 1
            empty = empty or size == 0
            out_shape.append(size)
            continue
        n = dims[axis]
        if isinstance(item, list):
            if item:
                raise SafetensorError("Non empty lists are not implemented")
            args.append((0, 0, 1))
            out_shape.append(0)
        elif isinstance(item, slice):
            step = 1 if item.step is None else _bound(item.step)
            if step is None or step <= 0:
                raise SafetensorError(f"Slice step must be a positive integer, got {item.step}")
            start = _bound(item.start)
            stop = _bound(item.stop)
            if start is None:
                start = 0
            elif start < 0:
                start = max(start + n, 0)
            elif start > n:
                raise out_of_bounds(start, axis)
            if stop is None:
                stop = n
            elif stop < 0:
                stop = max(stop + n, 0)
            elif stop > n:
                raise out_of_bounds(stop - 1, axis)
            stop = max(stop, start)
            args.append((start, stop, step))
            out_shape.append(-(-(stop - start) // step))
        else:
            at = _as_int(item)
            if at is None:  # checked above; for the type checker
                raise SafetensorError(f"Unsupported slice index {item!r}")
            if at < 0:
                if at < -n:
                    raise SafetensorError(f"Invalid index {at} for dimension {axis} of size {n}")
                at += n
            elif at >= n:
                raise out_of_bounds(at, axis)
            args.append(at)
        axis += 1
    out_shape.extend(dims[axis:])
    return Plan(args, tuple(out_shape), empty)
