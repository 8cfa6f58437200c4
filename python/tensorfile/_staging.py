"""Tensors read into a device's memory through staging buffers reused in a
ring: the way ``device="cuda:N"`` loads (``safe_open(...).prefetch()``,
``tensorfile.torch.load_file``).

Each tensor (or slice) is read in pieces of at most one staging buffer,
C order: a piece is read into the next buffer of the ring with
``read_into`` (one read split over the library's pool, the interpreter
released), then copied to the tensor's device memory without waiting
(``copy_(..., non_blocking=True)`` on a stream of its own), and an event
recorded after the copy. A buffer is read into again only once the event of
its last copy has completed, so the reads of the next pieces overlap the
copies of the last ones, and a tensor larger than a buffer goes through
several. On CUDA the buffers are pinned host memory (``pin_memory=True``),
which the copy engine reads directly.

The ring is plain Python over what :class:`TorchOps` does with torch, so its
logic (ordering, reuse only after completion, splitting, exact bytes) runs
with any other ``ops`` as well: the tests give it fakes that copy only when
an event is waited for, as a device would, and catch a buffer reused early.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple, Union

from . import _frameworks
from ._native import SafetensorError, carrier, dtype_bits

# One native slice argument: an index, or (start, stop, step).
NativeArg = Union[int, Tuple[int, int, int]]

#: Bytes of one staging buffer: large enough that a read of it keeps every
#: thread of the pool busy (the pool splits it into pieces of 1 MiB or
#: more), small enough that a ring of them is a small part of host memory.
STAGING_BYTES = 64 << 20

#: Buffers in the ring: one being read into while the copies of the others
#: drain.
STAGING_COUNT = 3


class Item:
    """One tensor or slice to load: its name, the native slice arguments
    (``None`` for the whole tensor), the format's dtype code, the shape of
    the result (the slice's) and the key its result is returned under."""

    def __init__(
        self, key: Hashable, name: str, args: Optional[List[NativeArg]], code: str, shape: Sequence[int]
    ) -> None:
        self.key = key
        self.name = name
        self.args = args
        self.code = code
        self.shape = tuple(int(n) for n in shape)
        bits = dtype_bits(code)
        self.bits = bits
        self.nbytes = math.prod(self.shape) * bits // 8


class Piece:
    """A part of a result in C order: ``nbytes`` bytes from ``offset``, the
    result's elements at ``index`` (the leading dimensions' positions, then
    ``(start, stop)`` on the next dimension, the rest whole)."""

    def __init__(self, offset: int, nbytes: int, index: Tuple[Any, ...]) -> None:
        self.offset = offset
        self.nbytes = nbytes
        self.index = index

    def __repr__(self) -> str:
        return f"Piece({self.offset}, {self.nbytes}, {self.index})"


def pieces(shape: Sequence[int], bits: int, capacity: int) -> List[Piece]:
    """A result of ``shape`` (``bits`` per value) cut into C-order pieces of
    at most ``capacity`` bytes, each a block the native slicer can read:
    whole rows of the first dimension whose rows fit, several per piece;
    where a row is larger than ``capacity``, the next dimension's rows of
    each, and so on. Values below a byte are cut at whole bytes."""
    shape = tuple(int(n) for n in shape)
    total_bits = math.prod(shape) * bits
    if total_bits == 0:
        return []
    if total_bits <= capacity * 8 or not shape:
        return [Piece(0, total_bits // 8, ())]
    # The first dimension whose rows (one position of it, every value of
    # the dimensions after it) fit in a buffer, each position of the
    # dimensions before it starting on a byte.
    for depth, n in enumerate(shape):
        row_bits = math.prod(shape[depth + 1 :]) * bits
        # Rows below a byte go by as many as fill whole bytes.
        granule = 1 if row_bits % 8 == 0 else 8 // math.gcd(8, row_bits)
        on_bytes = (math.prod(shape[depth:]) * bits) % 8 == 0
        if on_bytes and row_bits * granule <= capacity * 8:
            break
    else:
        raise SafetensorError(
            f"a tensor of shape {list(shape)} ({bits} bits a value) cannot be cut at whole bytes "
            f"into staging buffers of {capacity} bytes"
        )
    per_piece = (capacity * 8 // (row_bits * granule)) * granule
    out: List[Piece] = []
    outer = shape[:depth]
    offset_bits = 0
    for position in itertools.product(*(range(m) for m in outer)):
        for start in range(0, n, per_piece):
            stop = min(start + per_piece, n)
            size_bits = (stop - start) * row_bits
            out.append(Piece(offset_bits // 8, size_bits // 8, tuple(position) + ((start, stop),)))
            offset_bits += size_bits
    return out


def compose(
    args: Optional[List[NativeArg]], tensor_shape: Sequence[int], index: Tuple[Any, ...]
) -> Optional[List[NativeArg]]:
    """The native slice arguments of a piece (``index``, in the result's
    coordinates, as :func:`pieces` gives it) of the slice ``args`` of a
    tensor of ``tensor_shape``: a position in the result maps through each
    range of ``args`` (an index of ``args`` is no dimension of the result).
    ``None`` (the whole tensor) for the one piece of a whole tensor."""
    if args is None and not index:
        return None
    if args is None:
        args = [(0, int(n), 1) for n in tensor_shape]
    args = list(args) + [(0, int(n), 1) for n in tensor_shape[len(args) :]]
    out: List[NativeArg] = []
    axis = 0
    for arg in args:
        if isinstance(arg, int):
            out.append(arg)
            continue
        start, stop, step = arg
        if axis < len(index):
            at = index[axis]
            if isinstance(at, tuple):
                first, last = at
                # Ends at the last value taken, which is within the slice.
                out.append((start + first * step, start + (last - 1) * step + 1, step))
            else:
                out.append(start + at * step)
        else:
            out.append((start, stop, step))
        axis += 1
    return out


class TorchOps:
    """What the ring does with torch, on ``device``: on CUDA, pinned
    staging buffers, copies on a stream of the load's own, events; on any
    other device (the CPU in the tests), plain buffers and copies that are
    done when they return."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.stream = None
        if self.cuda:
            self.stream = torch.cuda.Stream(device=self.device)
            # Memory allocated for the results on the current stream may
            # still be in use there: the copies wait for it.
            self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def host(self, nbytes: int) -> Any:
        return self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=self.cuda)

    def view(self, host: Any, nbytes: int) -> Any:
        return host[:nbytes]

    def device_bytes(self, nbytes: int) -> Any:
        return self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)

    def copy(self, dst: Any, offset: int, src: Any) -> Any:
        """Copies ``src`` to ``dst[offset:]`` without waiting; the event
        that completes with the copy (None when it is done already)."""
        region = dst[offset : offset + src.numel()]
        if not self.cuda:
            region.copy_(src)
            return None
        with self.torch.cuda.stream(self.stream):
            region.copy_(src, non_blocking=True)
            event = self.torch.cuda.Event()
            event.record(self.stream)
        return event

    def wait(self, event: Any) -> None:
        if event is not None:
            event.synchronize()

    def finish(self) -> None:
        """Work queued later on the current stream sees every copy."""
        if self.cuda:
            self.torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def typed(self, data: Any, code: str, shape: Tuple[int, ...]) -> Any:
        """The result's bytes as a tensor of its dtype and shape (a view)."""
        _, stored = carrier(code, list(shape))
        return data.view(_frameworks.torch_dtype(self.torch, code)).reshape(tuple(stored))


class Slot:
    """A staging buffer and the event of its last copy."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.event: Any = None


class Ring:
    """Staging buffers used in turn; :meth:`next` gives the next one once
    its last copy has completed."""

    def __init__(self, ops: Any, count: int, size: int) -> None:
        self.ops = ops
        self.slots = [Slot(ops.host(size)) for _ in range(max(count, 1))]
        self._turn = itertools.cycle(self.slots)

    def next(self) -> Slot:
        slot = next(self._turn)
        if slot.event is not None:
            self.ops.wait(slot.event)
            slot.event = None
        return slot

    def drain(self) -> None:
        for slot in self.slots:
            if slot.event is not None:
                self.ops.wait(slot.event)
                slot.event = None


#: ``read(name, native_args, out)``: fills ``out`` (a staging view of
#: exactly the piece's bytes) with the piece.
Reader = Callable[[str, Optional[List[NativeArg]], Any], None]


def load(
    ops: Any,
    read: Reader,
    items: Sequence[Item],
    tensor_shapes: Dict[str, Sequence[int]],
    *,
    size: int = STAGING_BYTES,
    count: int = STAGING_COUNT,
) -> Dict[Hashable, Any]:
    """Reads ``items`` into device memory through a ring of ``count``
    staging buffers of ``size`` bytes (fewer, and smaller, when the items
    need less): ``{item.key: tensor}``, each in memory of its own on the
    device, of its dtype and shape. ``tensor_shapes`` gives each tensor's
    shape in the file (to map a slice's pieces)."""
    largest = max((item.nbytes for item in items), default=0)
    size = max(min(size, largest), 1)
    total = sum(item.nbytes for item in items)
    ring = Ring(ops, min(count, max(-(-total // size), 1)), size)
    out: Dict[Hashable, Any] = {}
    try:
        for item in items:
            data = ops.device_bytes(item.nbytes)
            for piece in pieces(item.shape, item.bits, size):
                slot = ring.next()
                staged = ops.view(slot.host, piece.nbytes)
                args = compose(item.args, tensor_shapes[item.name], piece.index)
                read(item.name, args, staged)
                slot.event = ops.copy(data, piece.offset, staged)
            out[item.key] = ops.typed(data, item.code, item.shape)
    finally:
        # Never free a buffer a copy may still read.
        ring.drain()
    ops.finish()
    return out
