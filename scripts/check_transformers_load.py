#!/usr/bin/env python3
"""transformers' `from_pretrained` of a sharded checkpoint with tensorfile as
its safetensors module (`tensorfile.patch_safetensors()`), against the
reference safetensors: every parameter and the logits must be bit-identical.
Then, with 2 processes (torch.multiprocessing, no collective needed), each
loads its tensor-parallel share with the "llama" rank rules, and the shares
put together must equal the model's full parameters.

A tiny Llama made locally (no Hub access): hidden 64, 2 layers, saved
sharded with save_pretrained(max_shard_size=...). Run by hand in a venv with
torch, transformers, the reference safetensors and tensorfile installed:

    /work/venvs/torch/bin/python scripts/check_transformers_load.py

Exit 0 when everything matches, 1 otherwise."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import sys, torch
mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "tensorfile":
    import tensorfile
    tensorfile.patch_safetensors()
import safetensors, safetensors.torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
model.eval()
ids = torch.arange(0, 24).reshape(2, 12) % model.config.vocab_size
with torch.no_grad():
    logits = model(ids).logits
state = {k: v.detach().clone() for k, v in model.state_dict().items()}
torch.save({"state": state, "logits": logits, "module": safetensors.torch.load_file.__module__}, out)
"""


def bits_equal(a, b) -> bool:
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def share_child(path: str, world: int, rank: int, out: str) -> None:
    import torch
    from tensorfile.torch import load_rank_share

    torch.save(load_rank_share(path, "llama", world, rank), out)


def main() -> int:
    import torch
    import torch.multiprocessing as mp
    from transformers import LlamaConfig, LlamaForCausalLM

    import tensorfile

    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        torch.manual_seed(0)
        config = LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=64, tie_word_embeddings=False,
        )
        model = LlamaForCausalLM(config).to(torch.bfloat16)
        model.save_pretrained(tmp / "model", max_shard_size="100KB")
        shards = sorted(p.name for p in (tmp / "model").glob("*.safetensors"))
        print(f"model: {sum(p.numel() for p in model.parameters())} parameters, {len(shards)} shards")
        results = {}
        for mode in ("reference", "tensorfile"):
            out = tmp / f"{mode}.pt"
            subprocess.run([sys.executable, "-c", CHILD, mode, str(tmp / "model"), str(out)], check=True)
            results[mode] = torch.load(out)
            print(f"{mode}: loaded through {results[mode]['module']}")
        ref, ours = results["reference"], results["tensorfile"]
        if not ours["module"].startswith("tensorfile"):
            print("FAIL: transformers did not load through tensorfile")
            bad += 1
        if ref["state"].keys() != ours["state"].keys():
            print("FAIL: parameter names differ")
            bad += 1
        differ = [k for k in ref["state"] if k in ours["state"] and not bits_equal(ref["state"][k], ours["state"][k])]
        print(f"parameters: {len(ref['state'])}, bit-identical: {len(ref['state']) - len(differ)}")
        bad += len(differ)
        same_logits = bits_equal(ref["logits"], ours["logits"])
        print(f"logits {tuple(ref['logits'].shape)}: bit-identical: {same_logits}")
        bad += not same_logits

        # Tensor-parallel shares, one process per rank.
        world = 2
        path = str(tmp / "model")
        procs = []
        ctx = mp.get_context("spawn")
        for rank in range(world):
            p = ctx.Process(target=share_child, args=(path, world, rank, str(tmp / f"share{rank}.pt")))
            p.start()
            procs.append(p)
        for p in procs:
            p.join()
            bad += p.exitcode != 0
        shares = [torch.load(tmp / f"share{r}.pt") for r in range(world)]
        from safetensors.torch import load_file  # the reference, for the full tensors

        full = {}
        for s in shards:
            full.update(load_file(str(tmp / "model" / s)))
        joined_ok = 0
        for name, tensor in full.items():
            plan = next(s for s in tensorfile.rank_plan(path, "llama", world, 0) if s.name == name)
            parts = [shares[r][name] for r in range(world)]
            if plan.dim is None:
                ok = all(bits_equal(p, tensor) for p in parts)
            else:
                joined = torch.cat(parts, dim=plan.dim)
                ok = bits_equal(joined, tensor)
            joined_ok += ok
            if not ok:
                print(f"FAIL: {name}: shares put together differ")
                bad += 1
        share_bytes = [sum(t.numel() * t.element_size() for t in s.values()) for s in shares]
        total = sum(t.numel() * t.element_size() for t in full.values())
        print(
            f"rank shares (llama rules, {world} ranks): {joined_ok}/{len(full)} tensors put together equal; "
            f"each rank holds {', '.join(f'{b / total:.1%}' for b in share_bytes)} of {total} bytes"
        )
    print("OK" if bad == 0 else f"FAILED: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
