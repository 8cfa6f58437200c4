"""What the reference cannot do: strict validation, the tensors of PyTorch
checkpoints without running pickle, and the CLI's transforms (convert,
quantize, dequantize) as functions."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from . import _frameworks, _native

PathLike = Union[str, "os.PathLike[str]"]


def validate(path: PathLike, *, timeout: Optional[float] = None) -> Dict[str, Any]:
    """Checks a safetensors file (or, for a directory or an index, a whole
    sharded set) against the format's reader rules, reading only headers.

    ``path`` may be a URL (``s3://``, ``http(s)://``, ``hf://``): only headers
    are fetched. ``timeout`` (seconds) is one deadline for all of those
    requests, retries and waits included: past it, the file is reported as
    unreadable with an ``error`` that says the timeout ran out. Without it, a
    remote read fails only when the server stops keeping up (no connection
    within 10 s, no answer within 30 s, less than 1 KiB/s over 30 s). A value
    that is not a positive number of seconds is a ``ValueError``.

    Returns the keys of ``tensorfile validate --json``: ``file``, ``valid``,
    ``rule`` (the number of the rule broken, or None), ``error`` (what is
    wrong and where, or None) and ``warnings``; a valid set adds ``shards``,
    ``tensors`` and ``data_bytes``, and a GGUF file (checked too) has
    ``format`` and no ``rule``. Never raises for an invalid or unreadable
    file: that is reported the same way.

    >>> tensorfile.validate("model.safetensors")["valid"]
    True
    """
    return _native.validate(os.fspath(path), timeout=timeout)


def load_pytorch(
    path: PathLike,
    framework: str = "np",
    device: Any = "cpu",
    *,
    key: Optional[str] = None,
    name: Optional[str] = None,
) -> Dict[str, Any]:
    """The tensors of a ``torch.save`` checkpoint (zip, legacy or tar format),
    read without executing anything: a safe replacement for
    ``torch.load(path, weights_only=True)`` that needs no torch.

    The pickle is interpreted by a restricted machine that only rebuilds
    tensors and containers; nested containers give dotted names
    (``"model.layer.weight"``). ``key`` keeps the subtree at that path
    (``"model"``, ``"state_dict"``); ``name`` names a bare top-level tensor.
    Tensors come as numpy arrays (``framework="np"``) or torch tensors
    (``"pt"``, on ``device``), in memory of their own, in the checkpoint's order.

    >>> state_dict = tensorfile.load_pytorch("pytorch_model.bin", "pt")
    """
    fw = _frameworks.framework(framework, device)
    pairs = _native.load_pytorch(os.fspath(path), key=key, name=name)
    return {n: fw.convert(buffer, device) for n, buffer in pairs}


def convert(
    input: PathLike,
    output: PathLike,
    dtype: Any = None,
    *,
    saturate: bool = False,
    allow_int: bool = False,
    strict: bool = False,
    sync: bool = True,
    max_shard_size: Optional[int] = None,
    key: Optional[str] = None,
    name: Optional[str] = None,
    replace: bool = False,
) -> Dict[str, Any]:
    """``tensorfile convert``: casts the float tensors of ``input`` to
    ``dtype`` (``"bf16"``, ``"F32"``, ``"f8_e4m3"``, ...; the companions of
    quantized weights keep theirs) and writes ``output`` atomically, one
    piece of one tensor at a time; without ``dtype``, the canonical rewrite.

    ``input`` may be a safetensors file, a set (an index or a model directory:
    ``output`` is then a directory holding one shard per input shard, or cut
    at ``max_shard_size`` bytes) or a PyTorch checkpoint, converted without
    running pickle (``key``/``name`` as in :func:`load_pytorch`). ``saturate``
    clamps values beyond an F8 target's range; ``strict`` refuses any value the
    cast changes beyond rounding (nothing is written); ``allow_int`` allows
    integer targets. Returns the summary ``tensorfile convert --json`` prints
    (``losses`` counts, per tensor, the values that overflowed, became NaN,
    saturated or flushed to zero).

    ``output`` may be at ``s3://``, ``gs://`` or ``az://``: made in a private
    temporary directory, then uploaded (a set's index last); one already
    there is refused unless ``replace=True``.

    >>> tensorfile.convert("model.safetensors", "model-bf16.safetensors", "bf16")["cast"]
    """
    return _native.convert(
        os.fspath(input),
        os.fspath(output),
        _frameworks.dtype_code(dtype),
        saturate=saturate,
        allow_int=allow_int,
        strict=strict,
        sync=sync,
        max_shard_size=max_shard_size,
        key=key,
        name=name,
        replace=replace,
    )


def edit_metadata(
    path: PathLike,
    *,
    set: Optional[Mapping[str, str]] = None,
    unset: Sequence[str] = (),
    rename: Optional[Mapping[str, str]] = None,
    rewrite: bool = False,
    sync: bool = True,
) -> Dict[str, Any]:
    """``tensorfile edit``: sets (``set``) and removes (``unset``) metadata
    keys and renames tensors (``rename``, old name to new, all at once) of the
    safetensors file at ``path``. When the file is canonical for its alignment,
    the new header pads to the old one's length within the first 4096 bytes and
    no tensor moves, only the header is written, in place (one write, synced);
    otherwise, or with ``rewrite=True``, the file is rewritten atomically. The
    result is the same file either way: what ``tensorfile rewrite --align A``
    gives for the edited header. Returns the summary ``tensorfile edit --json``
    prints (``in_place``, and ``reason`` when not).

    An in-place edit is the one exception to "readers keep the old file's
    bytes": a process that has the file open or mapped (a ``safe_open``) sees
    the new header, never changed data. A symbolic link is never edited in
    place: the file it leads to is rewritten. ``path`` may be an object at
    ``s3://``, ``gs://`` or ``az://``: it is fetched, edited and put back
    whole, replacing it.

    >>> tensorfile.edit_metadata("model.safetensors", set={"format": "pt"})
    """
    return _native.edit_metadata(
        os.fspath(path),
        set=dict(set or {}),
        unset=list(unset),
        rename=dict(rename or {}),
        rewrite=rewrite,
        sync=sync,
    )


def consolidate_dcp(input: PathLike, output: PathLike, *, sync: bool = True) -> Dict[str, Any]:
    """``tensorfile merge`` of a torch distributed checkpoint: the directory
    ``input`` holding the per-rank files ``torch.distributed.checkpoint``
    writes with ``HuggingFaceStorageWriter(save_distributed=True)``
    (``shard-R-model-K-of-N.safetensors``, pieces of tensors with their
    offsets in ``DCP_SHARDING_INFO``) is checked whole (pieces agree on
    dtype, do not overlap, cover every tensor), then each tensor is assembled
    from its pieces with positional reads and writes, never held whole, the
    GIL released. ``output`` ending in ``.safetensors`` gets one canonical
    file; otherwise it is a directory that gets the set torch's
    ``fqn_to_index_mapping`` says (``model-0000K-of-0000N.safetensors`` and
    ``model.safetensors.index.json``), all files or none. The tensors are
    those torch's own consolidation writes, byte for byte. Returns the
    summary ``tensorfile merge --json`` prints (``dcp_ranks``, ``files``,
    ``tensors``, ...); raises ``SafetensorError`` for anything else than
    such a checkpoint, and for a broken one (nothing is written then).

    >>> tensorfile.consolidate_dcp("ckpt/sharded", "ckpt/model")
    """
    return _native.consolidate_dcp(os.fspath(input), os.fspath(output), sync=sync)


def quantize(
    input: PathLike,
    output: PathLike,
    scheme: str,
    *,
    bits: Optional[int] = None,
    group_size: Optional[int] = None,
    global_scale: bool = False,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    sync: bool = True,
    max_shard_size: Optional[int] = None,
    replace: bool = False,
) -> Dict[str, Any]:
    """``tensorfile quantize``: quantizes the weights of ``input`` (a
    safetensors file or set) into ``output`` with ``scheme``:
    ``"int4-g32-sym"`` (and other groups, ``int4-gG-sym``), ``"mlx-affine"``
    with ``bits`` and ``group_size`` (MLX's ``mx.quantize`` byte for byte),
    ``"mlx-mxfp4"``, ``"mlx-mxfp8"``, ``"mlx-nvfp4"`` (``global_scale`` adds
    nvfp4's per-tensor scale). ``include``/``exclude`` are globs over tensor
    names. Returns the summary ``tensorfile quantize --json`` prints.
    ``output`` may be in a store, as for :func:`convert` (``replace``).

    >>> tensorfile.quantize("model.safetensors", "q.safetensors", "mlx-affine", bits=4, group_size=64)
    """
    return _native.quantize(
        os.fspath(input),
        os.fspath(output),
        scheme,
        bits=bits,
        group_size=group_size,
        global_scale=global_scale,
        include=list(include),
        exclude=list(exclude),
        sync=sync,
        max_shard_size=max_shard_size,
        replace=replace,
    )


def dequantize(
    input: PathLike,
    output: PathLike,
    dtype: Any = None,
    *,
    config: Optional[PathLike] = None,
    bits: Optional[int] = None,
    group_size: Optional[int] = None,
    mode: Optional[str] = None,
    sync: bool = True,
    max_shard_size: Optional[int] = None,
    replace: bool = False,
) -> Dict[str, Any]:
    """``tensorfile dequantize``: turns the quantized weights of ``input``
    back into floats (``dtype``, default the scales' dtype) in ``output``.
    int4 files say their group in their metadata; MLX parameters come from
    ``config`` (a config.json's ``quantization``), from ``bits``,
    ``group_size`` and ``mode``, from the config.json of ``input``'s model, or
    from the metadata of a file tensorfile quantized; never guessed. Returns
    the summary ``tensorfile dequantize --json`` prints. ``output`` may be in
    a store, as for :func:`convert` (``replace``)."""
    return _native.dequantize(
        os.fspath(input),
        os.fspath(output),
        _frameworks.dtype_code(dtype),
        config=None if config is None else os.fspath(config),
        bits=bits,
        group_size=group_size,
        mode=mode,
        sync=sync,
        max_shard_size=max_shard_size,
        replace=replace,
    )


def inspect(
    path: PathLike, *, hash: bool = False, timeout: Optional[float] = None
) -> Dict[str, Any]:
    """What ``tensorfile inspect --json`` says about ``path``, as a dict (the
    same schema): for a safetensors file, sizes, metadata, every tensor in
    data order, parameters, alignment, warnings and quantized weights; for a
    set (a directory or an index), each shard, every tensor with its shard and
    the totals; for a PyTorch checkpoint, its format, tensors (with storage,
    offset and strides) and non-tensor values; for a GGUF file, its version,
    byte order, metadata, tensor infos and totals per ggml type. With
    ``hash``, each tensor's sha256 (this reads every byte). ``path`` may be a URL of a safetensors
    file or set (``s3://``, ``http(s)://``, ``hf://``): only headers (and a
    config.json beside them) are fetched, unless hashing. For a URL,
    ``timeout`` (seconds) is one deadline for all of the call's remote reads,
    retries and waits included: past it, a ``SafetensorError`` that says the
    timeout ran out. Without it, a remote read fails only when the server
    stops keeping up (no connection within 10 s, no answer within 30 s, less
    than 1 KiB/s over 30 s). A value that is not a positive number of seconds
    is a ``ValueError``.

    >>> tensorfile.inspect("model.safetensors")["parameters"]
    """
    return json.loads(_native.inspect_json(os.fspath(path), hash=hash, timeout=timeout))
