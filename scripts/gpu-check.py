#!/usr/bin/env python3
"""Loads to a CUDA device, measured and checked, on a machine that has one.

    python scripts/gpu-check.py [--gib 2] [--runs 3] [--device cuda:0] [--dir DIR] [--json]

Generates a file of ``--gib`` GiB (1 to 4; F32, BF16 and F16 tensors of
8 MiB to 64 MiB and a few small ones), reads it once (warm page cache),
then, ``--runs`` times interleaved, loads it to the device with
``tensorfile.torch.load_file(path, device=...)``, with
``safe_open(path, "pt", device=...).prefetch()`` and ``get_tensor`` of every
tensor, and with the reference wheel's ``safetensors.torch.load_file`` when
it is installed; each timing ends with ``torch.cuda.synchronize()``. Prints
the median GB/s of each (over the data bytes), then checks every tensor of
each load, and the half rows of every tensor prefetched with a plan,
against a load on the CPU, byte for byte.

Exit status: 0 when every tensor is equal, 1 when one is not, 2 when there
is no CUDA device (the one line "no CUDA device", on standard error: a
machine without one cannot run this check).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import NoReturn


def fail_usage(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def make_file(torch, directory: str, gib: float) -> tuple:
    from tensorfile.torch import save_file

    generator = torch.Generator().manual_seed(0)
    target = int(gib * (1 << 30))
    tensors = {"norm.weight": torch.ones(4096), "step": torch.tensor(7, dtype=torch.int64)}
    sizes = [8 << 20, 24 << 20, 64 << 20]
    dtypes = [torch.float32, torch.bfloat16, torch.float16]
    total = 0
    i = 0
    while total < target:
        nbytes = min(sizes[i % len(sizes)], target - total)
        dtype = dtypes[i % len(dtypes)]
        itemsize = torch.empty((), dtype=dtype).element_size()
        rows = max(nbytes // itemsize // 1024, 1)
        tensors[f"layer.{i:04d}.weight"] = torch.randn(rows, 1024, generator=generator).to(dtype)
        total += rows * 1024 * itemsize
        i += 1
    path = os.path.join(directory, "gpu-check.safetensors")
    save_file(tensors, path)
    data = sum(t.numel() * t.element_size() for t in tensors.values())
    return path, data


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--dir")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.gib <= 4:
        fail_usage(f"gpu-check: --gib {args.gib}: give 1 to 4")
    try:
        import torch
    except ImportError:
        fail_usage("no CUDA device (torch is not installed)")
    if not torch.cuda.is_available():
        fail_usage("no CUDA device")

    import tensorfile
    from tensorfile.torch import load_file

    try:
        from safetensors.torch import load_file as reference_load_file
    except ImportError:
        reference_load_file = None

    device = args.device
    own_dir = args.dir is None
    directory = args.dir or tempfile.mkdtemp(prefix="tensorfile-gpu-")
    os.makedirs(directory, exist_ok=True)
    try:
        path, data = make_file(torch, directory, args.gib)
        warm(path)

        def timed(load):
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            out = load()
            torch.cuda.synchronize(device)
            return time.perf_counter() - start, out

        def prefetched():
            with tensorfile.safe_open(path, "pt", device=device) as f:
                f.prefetch()
                return {n: f.get_tensor(n) for n in f.keys()}

        cases = {
            "tensorfile load_file": lambda: load_file(path, device=device),
            "tensorfile prefetch + get_tensor": prefetched,
        }
        if reference_load_file is not None:
            cases["reference load_file"] = lambda: reference_load_file(path, device=device)
        seconds = {name: [] for name in cases}
        results = {}
        for _ in range(args.runs):
            for name, load in cases.items():
                s, out = timed(load)
                seconds[name].append(s)
                results[name] = out
                del out
        cpu = load_file(path)
        mismatches = []
        for name, out in results.items():
            if sorted(out) != sorted(cpu):
                mismatches.append(f"{name}: names differ")
                continue
            for key, tensor in cpu.items():
                got = out[key]
                if str(got.device) != str(torch.device(device)) or not torch.equal(got.cpu(), tensor):
                    mismatches.append(f"{name}: {key}")
        results.clear()
        # A plan of half of every tensor's rows, to the device.
        with tensorfile.safe_open(path, "pt", device=device) as f:
            plan = tensorfile.PrefetchPlan()
            for key, tensor in cpu.items():
                if tensor.dim():
                    plan.add(key, slice(0, (tensor.shape[0] + 1) // 2))
            f.prefetch(plan)
            for key, index in plan:
                if not torch.equal(f.get_slice(key)[index].cpu(), cpu[key][index]):
                    mismatches.append(f"plan of half rows: {key}")
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)

    medians = {name: statistics.median(s) for name, s in seconds.items()}
    report = {
        "device": torch.cuda.get_device_name(torch.device(device)),
        "data_bytes": data,
        "runs": args.runs,
        "median_seconds": medians,
        "gb_per_s": {name: data / s / 1e9 for name, s in medians.items()},
        "mismatches": mismatches,
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{report['device']}: {data / 1e9:.2f} GB of data, medians of {args.runs}")
        for name, s in medians.items():
            print(f"  {name:34} {s * 1000:9.1f} ms  {data / s / 1e9:6.2f} GB/s")
        if reference_load_file is None:
            print("  (the reference wheel is not installed: pip install safetensors)")
        print("every tensor equal to a CPU load" if not mismatches else f"{len(mismatches)} mismatches:")
        for m in mismatches[:20]:
            print(f"  {m}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
