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

With ``framework="pt"`` the reference indexes a torch tensor, so
:func:`plan_torch` follows torch's rules instead (``torch/csrc/autograd/
python_variable_indexing.cpp``): stops past the end clamp, a list, array or
tensor indexes ("advanced" indexing), an integer out of range raises
IndexError, a step below one ValueError. The part torch does first (integers,
slices, None, Ellipsis) is read by the native slicer, so only those bytes are
read; the advanced part is then applied by the framework to what was read.
"""

from __future__ import annotations

import collections.abc
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

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


class IndexRules:
    """How a framework turns index objects into index arrays, as torch does
    (``indexing_tensor_from_data``): the torch rules for ``pt``; numpy's
    arrays standing in for torch's tensors to check the plan without torch."""

    def is_array(self, obj: Any) -> bool:
        """Whether ``obj`` is the framework's own tensor (used as it is)."""
        raise NotImplementedError

    def from_sequence(self, obj: Any) -> Any:
        """A sequence (list, numpy array) as torch converts it: a bool or
        uint8 mask stays one, anything else becomes int64."""
        raise NotImplementedError

    def positions(self, keep: bool) -> Any:
        """The index torch gives a Python bool on its new dimension: ``[0]``
        for True, none for False."""
        raise NotImplementedError

    def is_mask(self, array: Any) -> bool:
        """A bool or uint8 array: a mask over as many dimensions as it has."""
        raise NotImplementedError

    def is_integral(self, array: Any) -> bool:
        """An array of integers (or bools)."""
        raise NotImplementedError


class _NumpyRules(IndexRules):
    def is_array(self, obj: Any) -> bool:
        # torch reads numpy arrays as sequences.
        return False

    def from_sequence(self, obj: Any) -> Any:
        array = np.asarray(obj)
        if array.dtype.kind not in "biuf":
            raise TypeError(f"new(): invalid data type '{array.dtype}'")
        if array.dtype == np.bool_:
            return array
        if array.dtype == np.uint8:
            return array.astype(np.bool_)
        return array.astype(np.int64)

    def positions(self, keep: bool) -> Any:
        return np.zeros(1 if keep else 0, dtype=np.int64)

    def is_mask(self, array: Any) -> bool:
        return bool(array.dtype == np.bool_)

    def is_integral(self, array: Any) -> bool:
        return array.dtype.kind in "biu"


class _TorchRules(IndexRules):
    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def is_array(self, obj: Any) -> bool:
        return isinstance(obj, self.torch.Tensor)

    def from_sequence(self, obj: Any) -> Any:
        torch = self.torch
        tensor = torch.tensor(obj)
        if tensor.dtype in (torch.bool, torch.uint8):
            return tensor
        return tensor.to(torch.int64)

    def positions(self, keep: bool) -> Any:
        return self.torch.zeros(1 if keep else 0, dtype=self.torch.int64)

    def is_mask(self, array: Any) -> bool:
        return array.dtype in (self.torch.bool, self.torch.uint8)

    def is_integral(self, array: Any) -> bool:
        return not (array.dtype.is_floating_point or array.dtype.is_complex)


#: numpy arrays standing in for torch's tensors (no torch needed).
NUMPY_RULES: IndexRules = _NumpyRules()


def torch_rules() -> IndexRules:
    """torch's own rules (imports torch)."""
    import torch

    return _TorchRules(torch)


def _is_long(obj: Any) -> bool:
    """An integer as torch's THPUtils_checkLong sees one: a Python int that
    is not a bool, or a numpy integer scalar."""
    return (isinstance(obj, int) and not isinstance(obj, bool)) or isinstance(obj, np.integer)


def _is_sequence(obj: Any) -> bool:
    """What PySequence_Check accepts among index objects."""
    return isinstance(obj, (collections.abc.Sequence, np.ndarray)) and not isinstance(obj, dict)


def _as_tuple(index: Any, rules: IndexRules) -> bool:
    """torch's treatSequenceAsTuple: a short list holding a sequence, a
    slice, a tensor, None or Ellipsis is read as a tuple (deprecated)."""
    if isinstance(index, tuple):
        return True
    if rules.is_array(index) or type(index) is np.ndarray or not _is_sequence(index):
        return False
    try:
        items = list(index)
    except Exception:  # noqa: BLE001 - torch clears the error and moves on
        return False
    if len(items) >= 32:
        return False
    return any(
        rules.is_array(it) or _is_sequence(it) or isinstance(it, slice) or it is None or it is Ellipsis
        for it in items
    )


def _slice_bound(value: Any) -> Optional[int]:
    if value is None:
        return None
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("slice indices must be integers or None or have an __index__ method") from None


def _unpack_slice(item: slice) -> Tuple[Optional[int], Optional[int], int]:
    """A slice's bounds and step, checked as torch checks them."""
    start, stop = _slice_bound(item.start), _slice_bound(item.stop)
    step = 1 if item.step is None else _slice_bound(item.step)
    if step == 0:
        raise ValueError("slice step cannot be zero")
    if step is None or step < 0:
        raise ValueError("step must be greater than zero")
    return start, stop, step


class TorchPlan:
    """An index parsed by torch's rules: the native arguments of the part
    torch applies first (one per dimension of the tensor), the shape of
    what that gives (with the dimensions None and bools add), and the
    advanced index to apply to it then (None when there is none)."""

    def __init__(self, args: List[NativeArg], shape: Tuple[int, ...], advanced: Optional[Tuple[Any, ...]]) -> None:
        self.args = args
        self.shape = shape
        self.advanced = advanced

    @property
    def empty(self) -> bool:
        """Whether the first part has no elements (nothing to read)."""
        return 0 in self.shape


def plan_torch(index: Any, shape: Sequence[int], rules: IndexRules) -> TorchPlan:
    """Parses ``index`` against ``shape`` as torch's ``Tensor.__getitem__``
    does, raising the exceptions torch raises (IndexError, ValueError,
    TypeError) for what it raises them (see the module documentation)."""
    if isinstance(index, slice):
        # torch checks a lone slice before the tensor's dimensions.
        _unpack_slice(index)
    items = list(index) if _as_tuple(index, rules) else [index]
    ndim = len(shape)
    specified = 0
    for item in items:
        if rules.is_array(item):
            specified += item.ndim if rules.is_mask(item) else 1
        elif not (item is None or item is Ellipsis or item is True or item is False):
            specified += 1
    if specified > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    # The dimensions of the result so far: (axis of the tensor or None for
    # an added one, length).
    dims: List[Tuple[Optional[int], int]] = [(axis, n) for axis, n in enumerate(shape)]
    args: List[NativeArg] = [(0, n, 1) for n in shape]
    # Advanced indexes by the dimension they start at: (index, how many
    # dimensions it spans: a mask spans as many as it has).
    advanced: Dict[int, Tuple[Any, int]] = {}
    dim = 0

    def select(at: int, position: int) -> None:
        if dim >= len(dims):
            if not dims:
                raise IndexError("invalid index of a 0-dim tensor")
            raise IndexError(f"Dimension out of range (got {dim} for {len(dims)} dimensions)")
        axis, n = dims[dim]
        if not -n <= at < n:
            raise IndexError(f"index {at} is out of bounds for dimension {position} with size {n}")
        if axis is not None:
            args[axis] = at + n if at < 0 else at
        del dims[dim]

    def add_dimension(record: Any = None) -> None:
        nonlocal dim
        dims.insert(dim, (None, 1))
        if record is not None:
            advanced[dim] = (record, 1)
        dim += 1

    def tensor(array: Any, position: int) -> None:
        nonlocal dim
        if array.ndim == 0 and rules.is_integral(array):
            if rules.is_mask(array):
                add_dimension(rules.positions(bool(array.item())))
            else:
                select(int(array.item()), position)
            return
        span = array.ndim if rules.is_mask(array) else 1
        advanced[dim] = (array, span)
        dim += span

    for position, item in enumerate(items):
        if _is_long(item):
            select(int(item), position)
        elif isinstance(item, slice):
            start, stop, step = _unpack_slice(item)
            if dim >= len(dims):
                raise IndexError(f"Dimension out of range (got {dim} for {len(dims)} dimensions)")
            axis, n = dims[dim]
            first, last, _ = slice(start, stop, step).indices(n)
            last = max(last, first)
            if axis is not None:
                args[axis] = (first, last, step)
            dims[dim] = (axis, -(-(last - first) // step))
            dim += 1
        elif item is Ellipsis:
            dim += ndim - specified
        elif item is None:
            add_dimension()
        elif item is True or item is False:
            add_dimension(rules.positions(item))
        elif rules.is_array(item):
            tensor(item, position)
        elif _is_sequence(item):
            tensor(rules.from_sequence(item), position)
        else:
            try:
                at = operator.index(item)
            except TypeError:
                raise IndexError(
                    "only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                    f"Variables are valid indices (got {type(item).__name__})"
                ) from None
            select(at, position)
    rest: Optional[Tuple[Any, ...]] = None
    if advanced:
        # The advanced indexes at their dimensions, full slices between.
        parts: List[Any] = []
        d = 0
        while d <= max(advanced):
            array, span = advanced.get(d, (slice(None), 1))
            parts.append(array)
            d += span
        rest = tuple(parts)
    return TorchPlan(args, tuple(n for _, n in dims), rest)
