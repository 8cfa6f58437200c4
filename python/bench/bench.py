"""tensorfile's Python package against the reference wheel (safetensors
0.8.0), side by side in one run, warm page cache, medians of several runs
(each pair interleaved), plus peak memory growth measured in fresh child
processes. Prints a markdown table (and JSON with --json).

    python python/bench/bench.py [--dir DIR] [--runs N] [--gib G]

Needs tensorfile and safetensors (and numpy) installed in the interpreter
running it; torch for the torch.load and torch-checkpoint rows. Writes its
inputs and outputs (about 3 GiB at --gib 1) into DIR (default: a temporary directory, removed).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

TENSORS = 200


def median_time(fn, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved(pairs, runs):
    """Medians of several functions, run in turn (a, b, a, b, ...), so that a
    slow moment of a shared machine hits them alike."""
    times = {name: [] for name, _ in pairs}
    for _ in range(runs):
        for name, fn in pairs:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


CHILD = r"""
import json, sys, os
def rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0
lib, what, path = sys.argv[1], sys.argv[2], sys.argv[3]
import numpy as np
if lib == "tensorfile":
    import tensorfile as st
    from tensorfile.numpy import load_file
else:
    import safetensors as st
    from safetensors.numpy import load_file
before = rss("VmRSS:")
# Reset the peak so that VmHWM counts from here (Linux >= 4.0).
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
kept = None
if what == "get_tensor":
    with st.safe_open(path, framework="np") as f:
        kept = [f.get_tensor(k) for k in f.keys()]
elif what == "load_file":
    kept = load_file(path)
elif what == "open":
    f = st.safe_open(path, framework="np")
    kept = f.keys()
print(json.dumps({"growth": rss("VmHWM:") - before}))
"""


def peak_growth(lib, what, path):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, lib, what, path], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)["growth"]


def make_inputs(directory, gib):
    """A gib-GiB file of 200 F32 tensors, a 100k-tensor file, and the arrays."""
    import tensorfile.numpy as tn

    per = int(gib * (1 << 30)) // TENSORS // 4
    rng = np.random.default_rng(0)
    block = rng.standard_normal(per, dtype=np.float32)
    arrays = {f"layer.{i:03d}.weight": np.roll(block, i) for i in range(TENSORS)}
    big = os.path.join(directory, "big.safetensors")
    tn.save_file(arrays, big)
    many = os.path.join(directory, "many.safetensors")
    tn.save_file({f"t{i}": np.zeros(2, np.float16) for i in range(100_000)}, many)
    return big, many, arrays


def warm(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def fsync_write(arrays, path):
    """The baseline of a synced save: write the same bytes, then fsync."""
    with open(path, "wb") as f:
        for a in arrays.values():
            f.write(memoryview(a).cast("B"))
        f.flush()
        os.fsync(f.fileno())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import safetensors
    import safetensors.numpy as sn

    import tensorfile
    import tensorfile.numpy as tn

    own_dir = args.dir is None
    directory = args.dir or tempfile.mkdtemp(prefix="tensorfile-bench-")
    os.makedirs(directory, exist_ok=True)
    rows = []

    def row(what, ours, theirs, target, note=""):
        rows.append(
            {"what": what, "tensorfile": ours, "reference": theirs, "ratio": theirs / ours if ours else None, "target": target, "note": note}
        )

    try:
        big, many, arrays = make_inputs(directory, args.gib)
        size = os.path.getsize(big)
        for path in (big, many):
            warm(path)

        def every_tensor(lib):
            def go():
                with lib.safe_open(big, framework="np") as f:
                    for k in f.keys():
                        f.get_tensor(k)

            return go

        def every_tensor_touched(lib):
            def go():
                with lib.safe_open(big, framework="np") as f:
                    for k in f.keys():
                        float(f.get_tensor(k).sum(dtype=np.float64))

            return go

        t = interleaved([("ours", every_tensor(tensorfile)), ("ref", every_tensor(safetensors))], args.runs)
        row("safe_open + get_tensor of every tensor (numpy)", t["ours"], t["ref"], ">= 10x")
        t = interleaved(
            [("ours", every_tensor_touched(tensorfile)), ("ref", every_tensor_touched(safetensors))], args.runs
        )
        row("... and reading every value (.sum())", t["ours"], t["ref"], "(none)", "the map's page faults are then paid")
        t = interleaved([("ours", lambda: tn.load_file(big)), ("ref", lambda: sn.load_file(big))], args.runs)
        row("load_file (numpy)", t["ours"], t["ref"], ">= 2x")

        # One output path for every save (each replaces the last): the
        # inputs and one output stay on disk, not four.
        out = ref_out = base_out = os.path.join(directory, "out.safetensors")
        t = interleaved(
            [("ours", lambda: tn.save_file(arrays, out)), ("ref", lambda: sn.save_file(arrays, ref_out))], args.runs
        )
        row("save_file, no sync (reference never syncs)", t["ours"], t["ref"], "<= 1x the reference's time")
        t = interleaved(
            [("ours", lambda: tn.save_file(arrays, out, sync=True)), ("base", lambda: fsync_write(arrays, base_out))],
            args.runs,
        )
        row("save_file(sync=True) vs write + fsync", t["ours"], t["base"], "<= 1.1x write + fsync", "baseline: plain write of the data, then fsync")

        os.remove(out)
        t = interleaved(
            [
                ("ours", lambda: tensorfile.safe_open(many, framework="np").keys()),
                ("ref", lambda: safetensors.safe_open(many, framework="np").keys()),
            ],
            args.runs,
        )
        row("open a 100k-tensor header (+ keys())", t["ours"], t["ref"], ">= 5x")

        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            ckpt = os.path.join(directory, "big.pt")
            torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, ckpt)
            warm(ckpt)
            ckpt_size = os.path.getsize(ckpt)

            def read_once():
                # Into fresh memory each time, as a loader's copy is.
                buf = np.empty(ckpt_size, np.uint8)
                with open(ckpt, "rb", buffering=0) as f:
                    f.readinto(buf)

            t = interleaved(
                [
                    ("ours", lambda: tensorfile.load_pytorch(ckpt)),
                    ("read", read_once),
                    ("torch", lambda: torch.load(ckpt, weights_only=True, mmap=False)),
                ],
                args.runs,
            )
            row("load_pytorch of a zip checkpoint vs reading the file once", t["ours"], t["read"], "<= 1.5x the read")
            row("load_pytorch vs torch.load(weights_only=True, mmap=False)", t["ours"], t["torch"], "(compared)")

        growth = {
            (lib, what): peak_growth(lib, what, big)
            for lib in ("tensorfile", "safetensors")
            for what in ("get_tensor", "load_file")
        }
        header = 8 + int.from_bytes(open(big, "rb").read(8), "little")
        memory = {
            "header_bytes": header,
            "file_bytes": size,
            "peak_growth": {f"{lib} {what}": g for (lib, what), g in growth.items()},
        }
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)

    if args.json:
        print(json.dumps({"rows": rows, "memory": memory}, indent=1))
        return
    print(f"file: {size} bytes, {TENSORS} F32 tensors; runs: {args.runs}; tensorfile {tensorfile.__version__}, safetensors {safetensors.__version__}")
    print()
    print("| operation | tensorfile | reference / baseline | ratio | target |")
    print("| --- | ---: | ---: | ---: | --- |")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        print(f"| {r['what']} | {r['tensorfile'] * 1000:.1f} ms | {r['reference'] * 1000:.1f} ms | {ratio} | {r['target']} |")
    print()
    print(f"peak RSS growth (fresh process; the header is {memory['header_bytes']} bytes):")
    for name, g in memory["peak_growth"].items():
        print(f"- {name}: {g / (1 << 20):.1f} MiB")


if __name__ == "__main__":
    main()
