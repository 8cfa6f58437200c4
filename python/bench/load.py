"""Whole loads, side by side in one run: tensorfile's ``load_file`` (numpy
and torch) against the reference wheel's (safetensors 0.8.0) and a C
baseline of ``pread`` into fresh memory, ``read_into`` into arrays the
caller already touched against the baseline into touched memory, and a
prefetch of half of every tensor's rows against a prefetch of everything.
The reference's torch ``load_file`` maps the file and reads nothing until
a value is used, so the torch loads are also timed with a sum of every
tensor after them (``+read``).

    python python/bench/load.py [--dir DIR] [--runs 7] [--gib 1]
        [--c-baseline PATH] [--json]

A generated file of 200 F32 tensors (``--gib`` GiB, 1 by default) is read
once first (warm page cache). Every sample runs in a process of its own,
timed inside it around the call alone (imports and setup outside): a
load's cost is mostly page faults on fresh memory, and a process that
freed the last load's memory would get some of it back already faulted in.
The contenders run interleaved (A, B, C, A, B, C, ...) ``--runs`` times
and the tables give medians, GB/s over the data bytes, and ratios.

``--c-baseline PATH`` names the C baseline binary, run as ``PATH FILE
--threads 2 --memory fresh|touched --pages 4k|huge --rounds 1`` once per
sample (it prints one JSON line a round, ``{"seconds": s, "bytes": n}``);
without it those columns are left out. The reference's and torch's rows
are left out where they are not installed. Not a test: no timings in CI.
"""

from __future__ import annotations

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

# What a child process measures: its argv is [--child, WHAT, PATH].
CHILD_CASES = (
    "tensorfile-np",
    "tensorfile-pt",
    "reference-np",
    "reference-pt",
    "tensorfile-pt+read",
    "reference-pt+read",
    "read_into-touched",
    "prefetch-all",
    "prefetch-half",
)


def child(what: str, path: str) -> None:
    """Runs one sample of ``what`` on ``path`` and prints its seconds. A
    case ending in ``+read`` then reads every value (a sum of each tensor):
    the reference's torch ``load_file`` maps the file and copies nothing
    until a value is read, so only that compares with loads that read."""
    touch = what.endswith("+read")
    what = what.removesuffix("+read")
    if what == "tensorfile-np":
        from tensorfile.numpy import load_file

        def run():
            return load_file(path)
    elif what == "tensorfile-pt":
        from tensorfile.torch import load_file

        def run():
            return load_file(path)
    elif what == "reference-np":
        from safetensors.numpy import load_file

        def run():
            return load_file(path)
    elif what == "reference-pt":
        from safetensors.torch import load_file

        def run():
            return load_file(path)
    elif what == "read_into-touched":
        import tensorfile

        with tensorfile.safe_open(path, "np") as f:
            shapes = {n: f.get_slice(n).get_shape() for n in f.keys()}
        # The caller's arrays, written once before (a loader reusing them).
        arrays = {n: np.ones(s, dtype=np.float32) for n, s in shapes.items()}

        def run():
            with tensorfile.safe_open(path, "np") as f:
                for n, out in arrays.items():
                    f.read_into(n, out)
            return arrays
    elif what in ("prefetch-all", "prefetch-half"):
        import tensorfile

        plan = None
        if what == "prefetch-half":
            with tensorfile.safe_open(path, "np") as f:
                plan = tensorfile.PrefetchPlan()
                for n in f.keys():
                    plan.add(n, slice(0, f.get_slice(n).get_shape()[0] // 2))

        def run():
            with tensorfile.safe_open(path, "np") as f:
                f.prefetch(plan)
                return f._held
    else:
        raise SystemExit(f"load.py: unknown case {what!r}")
    def read_all(tensors):
        import torch

        for t in tensors.values():
            float(t.sum(dtype=torch.float64))

    start = time.perf_counter()
    kept = run()
    if touch:
        read_all(kept)
    seconds = time.perf_counter() - start
    del kept
    print(json.dumps({"seconds": seconds}))


def sample(what: str, path: str) -> float:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", what, path],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def baseline(binary: str, path: str, memory: str, pages: str) -> float:
    out = subprocess.run(
        [binary, path, "--threads", "2", "--memory", memory, "--pages", pages, "--rounds", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    rounds = [json.loads(line) for line in out.stdout.splitlines() if line.strip().startswith("{")]
    return rounds[-1]["seconds"]


def make_file(directory: str, gib: float) -> tuple:
    """A ``gib``-GiB file of 200 F32 tensors (rows of 1024 values)."""
    import tensorfile.numpy as tn

    rows = max(int(gib * (1 << 30)) // TENSORS // 4 // 1024, 2)
    rng = np.random.default_rng(0)
    block = rng.standard_normal((rows, 1024), dtype=np.float32)
    arrays = {f"layer.{i:03d}.weight": np.roll(block, i) for i in range(TENSORS)}
    path = os.path.join(directory, "load.safetensors")
    tn.save_file(arrays, path)
    return path, sum(a.nbytes for a in arrays.values())


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def installed(module: str) -> bool:
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    return probe.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--c-baseline", dest="c_baseline")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    have_torch = installed("torch")
    have_reference = installed("safetensors.numpy")
    cases = ["tensorfile-np", "read_into-touched", "prefetch-all", "prefetch-half"]
    if have_torch:
        cases += ["tensorfile-pt", "tensorfile-pt+read"]
    if have_reference:
        cases.append("reference-np")
        if have_torch:
            cases += ["reference-pt", "reference-pt+read"]
    c_cases = []
    if args.c_baseline:
        c_cases = [("fresh", "4k"), ("fresh", "huge"), ("touched", "4k")]

    own_dir = args.dir is None
    directory = args.dir or tempfile.mkdtemp(prefix="tensorfile-load-")
    os.makedirs(directory, exist_ok=True)
    times = {c: [] for c in cases}
    times.update({f"c {m} {p}": [] for m, p in c_cases})
    try:
        path, data_bytes = make_file(directory, args.gib)
        warm(path)
        for _ in range(args.runs):
            for case in cases:
                times[case].append(sample(case, path))
            for memory, pages in c_cases:
                times[f"c {memory} {pages}"].append(baseline(args.c_baseline, path, memory, pages))
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)

    medians = {case: statistics.median(t) for case, t in times.items() if t}
    spread = {case: (min(t), max(t)) for case, t in times.items() if t}
    fresh_c = [medians[k] for k in ("c fresh 4k", "c fresh huge") if k in medians]
    best_fresh = min(fresh_c) if fresh_c else None

    ratios = []

    def ratio(what: str, ours: str, other, target: str) -> None:
        other_s = medians.get(other) if isinstance(other, str) else other
        if ours in medians and other_s:
            ratios.append({"what": what, "ratio": other_s / medians[ours], "target": target})

    ratio("load_file numpy / reference", "tensorfile-np", "reference-np", ">= 1.5x")
    ratio("load_file torch / reference (its tensors map the file)", "tensorfile-pt", "reference-pt", ">= 1.5x")
    ratio("load_file torch + reading every value / reference", "tensorfile-pt+read", "reference-pt+read", ">= 1.5x")
    ratio("load_file numpy / C pread, fresh (better pages)", "tensorfile-np", best_fresh, ">= 0.8x")
    ratio("load_file torch / C pread, fresh (better pages)", "tensorfile-pt", best_fresh, ">= 0.8x")
    ratio("read_into touched / C pread, touched", "read_into-touched", "c touched 4k", ">= 0.8x")
    ratio("prefetch half the rows / every tensor", "prefetch-half", "prefetch-all", ">= 1.7x")

    thp = "unknown"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        pass
    report = {
        "data_bytes": data_bytes,
        "runs": args.runs,
        "transparent_hugepage": thp,
        "median_seconds": medians,
        "min_max_seconds": spread,
        "ratios": ratios,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    import tensorfile

    versions = f"tensorfile {tensorfile.__version__}"
    if have_reference:
        import safetensors

        versions += f", safetensors {safetensors.__version__}"
    print(
        f"{data_bytes / 1e9:.2f} GB of data, {TENSORS} F32 tensors, warm page cache; medians of "
        f"{args.runs}, interleaved, one process a sample; {versions}; THP: {thp}"
    )
    print()
    print("| case | median | GB/s | min - max |")
    print("| --- | ---: | ---: | --- |")
    for case, s in medians.items():
        lo, hi = spread[case]
        print(f"| {case} | {s * 1000:.1f} ms | {data_bytes / s / 1e9:.2f} | {lo * 1000:.1f} - {hi * 1000:.1f} ms |")
    print()
    print("| ratio (the other's time / ours) | value | target |")
    print("| --- | ---: | --- |")
    for r in ratios:
        print(f"| {r['what']} | {r['ratio']:.2f}x | {r['target']} |")
    if not args.c_baseline:
        print()
        print("(no --c-baseline: the C pread columns are left out)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
