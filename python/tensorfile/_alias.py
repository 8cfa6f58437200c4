"""Serving as the ``safetensors`` package for code that imports it itself
(transformers' ``from_pretrained``, diffusers, accelerate)."""

from __future__ import annotations

import importlib
import sys


def patch_safetensors(numpy: bool = True, torch: bool = True) -> None:
    """Makes ``import safetensors``, ``import safetensors.torch`` and
    ``import safetensors.numpy`` give tensorfile's modules, in this process,
    by entries in ``sys.modules``: call it before importing the code that
    loads (a module that imported the reference before keeps the
    reference's functions). The reference package stays installed: some
    libraries check its version from its metadata (transformers does).

    >>> import tensorfile
    >>> tensorfile.patch_safetensors()
    >>> from transformers import AutoModelForCausalLM   # loads with tensorfile
    """
    tensorfile = importlib.import_module("tensorfile")
    sys.modules["safetensors"] = tensorfile
    if numpy:
        sys.modules["safetensors.numpy"] = importlib.import_module("tensorfile.numpy")
    if torch:
        sys.modules["safetensors.torch"] = importlib.import_module("tensorfile.torch")
