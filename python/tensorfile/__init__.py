"""tensorfile: safetensors files, strict and fast.

A drop-in for the ``safetensors`` Python package (switching is one import
line: ``import tensorfile as safetensors``, ``from tensorfile.torch import
load_file``) built on the tensorfile Rust library, and what the reference
cannot do: strict validation naming the rule and the place, sharded sets and
model directories opened as one file, the tensors of PyTorch checkpoints
without running pickle, casts on load, conversion, quantization.
"""

from ._native import SafetensorError, TensorSpec, __version__, deserialize, serialize, serialize_file
from ._open import _safe_open_handle, safe_open
from ._prefetch import PrefetchPlan
from ._writer import Writer, save_stream
from ._extras import consolidate_dcp, convert, dequantize, edit_metadata, inspect, load_pytorch, quantize, validate
from ._sets import abort_set, commit_set, plan_set, write_set_parts
from ._alias import patch_safetensors
from ._ranks import CooperativePlan, Share, cooperative_plan, rank_plan, read_cooperative_share

__all__ = [
    "SafetensorError",
    "TensorSpec",
    "__version__",
    "deserialize",
    "serialize",
    "serialize_file",
    "safe_open",
    "PrefetchPlan",
    "validate",
    "load_pytorch",
    "convert",
    "quantize",
    "dequantize",
    "edit_metadata",
    "consolidate_dcp",
    "Writer",
    "save_stream",
    "inspect",
    "plan_set",
    "write_set_parts",
    "commit_set",
    "abort_set",
    "patch_safetensors",
    "rank_plan",
    "Share",
    "cooperative_plan",
    "CooperativePlan",
    "read_cooperative_share",
]

