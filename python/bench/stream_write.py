"""Streaming writes and in-place metadata edits (issue 32 items 3 and 4).

    python python/bench/stream_write.py memory [--dir DIR] [--gib 2] [--tensors 100]
    python python/bench/stream_write.py edit [--dir DIR] [--gib 4] [--runs 7] [--cli PATH]

``memory``: peak RSS growth of writing ``--gib`` GiB as ``--tensors`` F32
tensors, each made, written and dropped in turn: through
``tensorfile.Writer`` (declared first, one file) and through
``tensorfile.save_stream`` (a generator, spooled). Each runs in a process
of its own, which reports its VmHWM (peak RSS, /proc/self/status) just
before the first tensor and after the save: the growth is the difference.
The bound is the largest tensor plus 64 MiB.

``edit``: a ``--gib`` GiB file (one U8 tensor, written sparse, then put in
place by ``tensorfile rewrite --align 4096``, which writes every byte),
whose metadata is edited in place ``--runs`` times: timed around
``tensorfile.edit_metadata`` in this process, and around the whole
``tensorfile edit`` process (``--cli``), interleaved; medians. Each edit
syncs (fdatasync). Not a test: no timings in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, numpy as np, tensorfile
mode, out, total, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
n = total // count // 4

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

def tensor(i):
    a = np.empty(n, np.float32)
    a.fill(i)
    return a

names = [f"layer.{i:03d}.weight" for i in range(count)]
before = hwm()
if mode == "writer":
    with tensorfile.Writer(out, {k: ("float32", (n,)) for k in names}) as w:
        for i, k in enumerate(names):
            w.write(k, tensor(i))
else:
    tensorfile.save_stream(out, ((k, tensor(i)) for i, k in enumerate(names)))
after = hwm()
print(json.dumps({"before": before, "after": after, "tensor": n * 4, "bytes": n * 4 * count}))
"""


def memory(args: argparse.Namespace) -> None:
    total = args.gib << 30
    rows = []
    for mode in ("writer", "spool"):
        out = os.path.join(args.dir, "stream.safetensors")
        start = time.perf_counter()
        text = subprocess.run(
            [sys.executable, "-c", CHILD, mode, out, str(total), str(args.tensors)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        seconds = time.perf_counter() - start
        r = json.loads(text)
        size = os.path.getsize(out)
        os.remove(out)
        growth = r["after"] - r["before"]
        bound = r["tensor"] + (64 << 20)
        rows.append((mode, r, growth, bound, size, seconds))
    print("| save | file | tensors | largest tensor | peak RSS growth | bound | met | wall |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for mode, r, growth, bound, size, seconds in rows:
        print(
            f"| {mode} | {size / 2**30:.2f} GiB | {args.tensors} | {r['tensor'] / 2**20:.1f} MiB "
            f"| {growth / 2**20:.1f} MiB | {bound / 2**20:.1f} MiB | {'yes' if growth <= bound else 'NO'} "
            f"| {seconds:.1f} s |"
        )


def edit(args: argparse.Namespace) -> None:
    import tensorfile

    raw = os.path.join(args.dir, "raw.safetensors")
    path = os.path.join(args.dir, "big.safetensors")
    size = args.gib << 30
    header = json.dumps(
        {"__metadata__": {"k": "v0"}, "w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}},
        separators=(",", ":"),
    ).encode()
    header += b" " * (-len(header) % 8)
    with open(raw, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + size)
    start = time.perf_counter()
    subprocess.run([args.cli, "rewrite", "--align", "4096", raw, path], check=True, capture_output=True)
    print(f"rewrite --align 4096 of {args.gib} GiB: {time.perf_counter() - start:.1f} s")
    os.remove(raw)
    py, cli = [], []
    for i in range(args.runs):
        start = time.perf_counter()
        report = tensorfile.edit_metadata(path, set={"k": f"py{i}"})
        py.append(time.perf_counter() - start)
        assert report["in_place"], report
        start = time.perf_counter()
        out = subprocess.run(
            [args.cli, "edit", "--json", "--set", f"k=cli{i}", path], check=True, capture_output=True
        ).stdout
        cli.append(time.perf_counter() - start)
        assert json.loads(out)["in_place"], out
    os.remove(path)
    print("| edit of a 4096-aligned file | median of 7 | min | max |")
    print("| --- | ---: | ---: | ---: |")
    for name, xs in (("tensorfile.edit_metadata (in process)", py), ("tensorfile edit (whole process)", cli)):
        print(
            f"| {name} | {statistics.median(xs) * 1e3:.2f} ms | {min(xs) * 1e3:.2f} ms | {max(xs) * 1e3:.2f} ms |"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["memory", "edit"])
    p.add_argument("--dir", default=None)
    p.add_argument("--gib", type=int, default=None)
    p.add_argument("--tensors", type=int, default=100)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--cli", default="tensorfile")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        args.dir = d
        if args.what == "memory":
            args.gib = args.gib or 2
            memory(args)
        else:
            args.gib = args.gib or 4
            edit(args)


if __name__ == "__main__":
    main()
