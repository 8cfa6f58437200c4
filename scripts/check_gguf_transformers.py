#!/usr/bin/env python3
"""Compares `tensorfile convert FILE.gguf DIR --dtype f32` with transformers'
own GGUF loader: every tensor of `from_pretrained(dir_of_gguf,
gguf_file=...)` against the same tensor of `from_pretrained(DIR)`.

    PYTHONPATH=/work/src/gguf-shim /work/venvs/tools/bin/python \
        scripts/check_gguf_transformers.py FILE.gguf DIR

Prints one line per tensor that differs and a summary; exit 1 if any does.
"""

import pathlib
import sys

import torch
from transformers import AutoModelForCausalLM

gguf_path = pathlib.Path(sys.argv[1]).resolve()
ours_dir = pathlib.Path(sys.argv[2]).resolve()

theirs = AutoModelForCausalLM.from_pretrained(
    gguf_path.parent, gguf_file=gguf_path.name, torch_dtype=torch.float32
).state_dict()
ours = AutoModelForCausalLM.from_pretrained(ours_dir, torch_dtype=torch.float32).state_dict()

bad = 0
for name in sorted(set(theirs) | set(ours)):
    a, b = theirs.get(name), ours.get(name)
    if a is None or b is None:
        print(f"{name}: only in {'ours' if a is None else 'transformers'}")
        bad += 1
        continue
    if a.shape != b.shape:
        print(f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
        bad += 1
        continue
    same = torch.equal(a.view(torch.int32), b.view(torch.int32))
    if not same:
        diff = (a - b).abs().max().item()
        print(f"{name}: differs, max abs {diff:g}")
        bad += 1
print(f"{gguf_path.name}: {len(theirs)} tensors from transformers, {len(ours)} from tensorfile, {bad} differ (bitwise)")
sys.exit(1 if bad else 0)
