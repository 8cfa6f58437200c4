"""What the reference cannot do: strict validation, and the tensors of
PyTorch checkpoints without running pickle."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

from . import _frameworks, _native

PathLike = Union[str, "os.PathLike[str]"]


def validate(path: PathLike) -> Dict[str, Any]:
    """Checks a safetensors file (or, for a directory or an index, a whole
    sharded set) against the format's reader rules, reading only headers.

    Returns the keys of ``tensorfile validate --json``: ``file``, ``valid``,
    ``rule`` (the number of the rule broken, or None), ``error`` (what is
    wrong and where, or None) and ``warnings``. Never raises for an invalid
    or unreadable file: that is reported the same way.

    >>> tensorfile.validate("model.safetensors")["valid"]
    True
    """
    return _native.validate(os.fspath(path))


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
