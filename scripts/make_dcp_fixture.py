#!/usr/bin/env python3
"""Generate tests/fixtures/dcp/ with torch.distributed.checkpoint itself
(run by hand, not in CI: CI checks tensorfile against what it wrote).

Environment: a venv with torch 2.15.0 and safetensors 0.8.0 (on the
project's machine: /work/venvs/torch). Usage:

    /work/venvs/torch/bin/python scripts/make_dcp_fixture.py

Two processes (torch.multiprocessing, the gloo backend on 127.0.0.1, CPU
only) save a state dict of DTensors and plain tensors with DCP's Hugging
Face storage writer (`HuggingFaceStorageWriter(save_distributed=True)`,
with an `fqn_to_index_mapping` of two output files), so that the pieces
are row slices (Shard(0)), column slices (Shard(1): not contiguous in the
full tensor), middle-dimension slices of a 3-d tensor, uneven and empty
slices, and whole tensors (Replicate, plain), in F32, BF16, F16 and I64,
with a 0-d and an empty tensor. It writes:

- `two_ranks/`: the per-rank files DCP wrote
  (`shard-0000R-model-0000K-of-00002.safetensors`);
- `torch_consolidated/`: torch's own consolidation of them
  (`torch.distributed.checkpoint._consolidate_hf_safetensors.
  consolidate_safetensors_files`, what `enable_consolidation=True` runs),
  for the tensors it can consolidate: it sizes elements with `torch.finfo`,
  which raises TypeError on integer dtypes, so the I64 tensors are left out
  of its mapping (recorded in the manifest);
- `manifest.json`: versions, the mapping, every tensor's dtype, full shape
  and the sha256 of its C-order little-endian bytes as (a) saved, (b) read
  back by `dcp.load` with `HuggingFaceStorageReader`, (c) in torch's
  consolidated files (where it consolidated; `equals_saved` is false for the
  0-d tensor, which torch 2.15 writes as zeros), and the sha256 of every
  file.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "dcp"
WORLD = 2
PORT = "29517"

# name -> (dtype, shape, placement ("row", "col", "mid", "rep", or None for
# a plain tensor), output file index)
SPEC = {
    "model.embed_tokens.weight": (torch.float32, (10, 6), "row", 1),
    "model.layers.0.self_attn.q_proj.weight": (torch.bfloat16, (6, 8), "col", 1),
    "model.layers.0.mlp.experts": (torch.float16, (5, 3, 4), "mid", 1),
    "model.layers.0.input_layernorm.weight": (torch.float32, (7,), "rep", 1),
    "model.layers.0.counts": (torch.int64, (4, 3), "row", 2),
    "model.layers.0.ids": (torch.int64, (3, 5), "col", 2),
    "model.layers.0.odd_rows": (torch.float32, (3, 5), "row", 2),
    "model.layers.0.one_row": (torch.bfloat16, (1, 3), "row", 2),
    "model.norm.scale": (torch.float32, (), None, 2),
    "model.empty": (torch.float32, (0, 4), None, 2),
    "lm_head.bias": (torch.float16, (5,), None, 1),
}
MAPPING = {name: spec[3] for name, spec in SPEC.items()}


def full_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(32)
    out = {}
    for name, (dtype, shape, _, _) in SPEC.items():
        if dtype.is_floating_point:
            out[name] = torch.randn(shape, generator=g).to(dtype)
        else:
            out[name] = torch.randint(-(2**40), 2**40, shape, generator=g, dtype=dtype)
    return out


def le_bytes(t: torch.Tensor) -> bytes:
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def save_rank(rank: int, out: str) -> None:
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = PORT
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    mesh = init_device_mesh("cpu", (WORLD,))
    placements = {"row": [Shard(0)], "col": [Shard(1)], "mid": [Shard(1)], "rep": [Replicate()]}
    state = {}
    for name, t in full_tensors().items():
        kind = SPEC[name][2]
        state[name] = t if kind is None else distribute_tensor(t, mesh, placements[kind])
    writer = HuggingFaceStorageWriter(
        out, save_distributed=True, fqn_to_index_mapping=MAPPING
    )
    dcp.save(state, storage_writer=writer)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    from safetensors import safe_open
    import safetensors
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint._consolidate_hf_safetensors import (
        consolidate_safetensors_files,
    )

    shutil.rmtree(OUT, ignore_errors=True)
    sharded = OUT / "two_ranks"
    consolidated = OUT / "torch_consolidated"
    sharded.mkdir(parents=True)
    consolidated.mkdir()
    mp.spawn(save_rank, args=(str(sharded),), nprocs=WORLD)

    # torch's consolidation, of what it can consolidate.
    float_mapping = {n: k for n, k in MAPPING.items() if SPEC[n][0].is_floating_point}
    left_out = sorted(set(MAPPING) - set(float_mapping))
    try:
        consolidate_safetensors_files(str(sharded), str(OUT / "scratch"), dict(MAPPING))
        int_error = None
    except TypeError as e:  # torch.finfo of an integer dtype
        int_error = f"{type(e).__name__}: {e}"
    shutil.rmtree(OUT / "scratch", ignore_errors=True)
    consolidate_safetensors_files(str(sharded), str(consolidated), float_mapping)

    # torch's reader: dcp.load into full-size plain tensors.
    originals = full_tensors()
    loaded = {n: torch.empty_like(t) for n, t in originals.items()}
    dcp.load(loaded, storage_reader=HuggingFaceStorageReader(str(sharded)))

    from_torch = {}
    for f in sorted(consolidated.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for n in st.keys():
                from_torch[n] = (f.name, st.get_tensor(n))

    dtype_names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64"}
    tensors = {}
    for n, t in originals.items():
        entry = {
            "dtype": dtype_names[t.dtype],
            "shape": list(t.shape),
            "placement": SPEC[n][2] or "plain",
            "output_index": MAPPING[n],
            "sha256": sha256(le_bytes(t)),
            "dcp_load_sha256": sha256(le_bytes(loaded[n])),
        }
        if n in from_torch:
            file, c = from_torch[n]
            entry["torch_consolidated"] = {
                "file": file,
                "dtype": dtype_names[c.dtype],
                "shape": list(c.shape),
                "sha256": sha256(le_bytes(c)),
            }
            # torch 2.15 writes a 0-d tensor as zeros: its piece copy
            # returns early on an empty shape.
            entry["torch_consolidated"]["equals_saved"] = (
                entry["torch_consolidated"]["sha256"] == entry["sha256"]
            )
        tensors[n] = entry

    manifest = {
        "generator": "scripts/make_dcp_fixture.py",
        "versions": {"torch": torch.__version__, "safetensors": safetensors.__version__},
        "world_size": WORLD,
        "backend": "gloo",
        "writer": "HuggingFaceStorageWriter(save_distributed=True, fqn_to_index_mapping=MAPPING)",
        "fqn_to_index_mapping": MAPPING,
        "torch_consolidation": {
            "function": "torch.distributed.checkpoint._consolidate_hf_safetensors.consolidate_safetensors_files",
            "mapping": float_mapping,
            "left_out": left_out,
            "error_with_all_tensors": int_error,
        },
        "files": {
            str(p.relative_to(OUT)): sha256(p.read_bytes())
            for p in sorted(OUT.rglob("*"))
            if p.is_file()
        },
        "tensors": tensors,
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps({n: (e["sha256"] == e["dcp_load_sha256"], e.get("torch_consolidated", {}).get("sha256") == e["sha256"]) for n, e in tensors.items()}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(__doc__)
    main()
