#!/usr/bin/env python3
"""Checks `tensorfile diff` and `tensorfile stats` against numpy, and the
quantization error `diff` reports for an MLX model against `mx.dequantize`.

Run by hand in the tools venv (numpy, torch, safetensors, mlx), after
`cargo build --release -p tensorfile-cli`:

    /work/venvs/tools/bin/python scripts/check_diff_stats.py [target/release/tensorfile]

It writes random tensors (F32, F16, BF16, with zeros, subnormals, NaN and
infinities) with torch and safetensors, a perturbed and a cast copy, runs
the two commands with --json, and computes every figure again in float64
with numpy: diff's largest absolute and relative differences and their
indices, mean absolute difference, RMS, cosine, the count numpy's
isclose(b, a, rtol, atol, equal_nan=True) puts beyond the tolerance the
JSON reports, NaN differences; stats' min, max, mean, std (ddof=0), absmax,
zeros, NaN, inf and subnormal counts (below torch.finfo(dtype).tiny).
Prints one line per check and exits 1 on any mismatch. Nothing is committed.
"""

import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
TF = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/release/tensorfile")
FAILED = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail else ""))
    if not ok:
        FAILED.append(what)


def close(x, y, rel=1e-9):
    if x is None or y is None:
        return x is None and y is None
    return abs(x - y) <= rel * max(abs(x), abs(y), 1e-300)


def tf(*args):
    out = subprocess.run([TF, *map(str, args)], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise SystemExit(f"{args}: exit {out.returncode}: {out.stderr}")
    return json.loads(out.stdout)


def tensors(seed):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        w = torch.randn(300, 257, generator=g) * 0.05
        w[0, :5] = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf")])
        w[1, :3] = torch.finfo(dtype).tiny / 4  # subnormal in this dtype
        w[2, 7] = 3.0  # an outlier
        out[f"w.{str(dtype).split('.')[-1]}"] = w.to(dtype)
    return out


def as_f64(t):
    return t.to(torch.float64).numpy().reshape(-1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        a = tensors(1)
        b = {}
        g = torch.Generator().manual_seed(2)
        for name, t in a.items():
            noise = torch.randn(t.shape, generator=g) * 1e-3
            pert = (t.to(torch.float32) + noise * (torch.rand(t.shape, generator=g) < 0.1)).to(t.dtype)
            pert[3, 3] = float("nan")
            b[name] = pert
        b["w.float32_as_bf16"] = a["w.float32"].to(torch.bfloat16)
        a["w.float32_as_bf16"] = a["w.float32"].clone()
        save_file(a, tmp / "a.safetensors")
        save_file(b, tmp / "b.safetensors")

        d = tf("diff", "--json", tmp / "a.safetensors", tmp / "b.safetensors")
        for t in d["tensors"]:
            x, y = as_f64(a[t["name"]]), as_f64(b[t["name"]])
            both = np.isfinite(x) & np.isfinite(y)
            diff = np.abs(x - y)
            fd = np.where(both, diff, 0.0)
            i = int(np.argmax(fd))
            rel = np.where(both & (x != 0), fd / np.where(x != 0, np.abs(x), 1.0), 0.0)
            j = int(np.argmax(rel))
            close_ = np.isclose(y, x, rtol=t["rtol"], atol=t["atol"], equal_nan=True)
            dot = float(np.sum(x[both] * y[both]))
            cos = dot / (np.sqrt(np.sum(x[both] ** 2)) * np.sqrt(np.sum(y[both] ** 2)))
            n = t["name"]
            check(f"diff {n} max_abs_diff", close(t["max_abs_diff"], float(fd[i])), f"{t['max_abs_diff']} vs {fd[i]}")
            check(f"diff {n} max_abs_index", t["max_abs_index"] == i, f"{t['max_abs_index']} vs {i}")
            check(f"diff {n} max_rel_diff", close(t["max_rel_diff"], float(rel[j])), f"{t['max_rel_diff']} vs {rel[j]}")
            check(f"diff {n} mean_abs_diff", close(t["mean_abs_diff"], float(np.mean(diff[both]))))
            check(f"diff {n} rms", close(t["rms"], float(np.sqrt(np.mean(diff[both] ** 2)))))
            check(f"diff {n} cosine", close(t["cosine"], cos, 1e-12), f"{t['cosine']} vs {cos}")
            beyond = int(np.sum(~close_))
            check(f"diff {n} beyond (numpy isclose)", t["beyond"] == beyond, f"{t['beyond']} vs {beyond}")
            check(
                f"diff {n} NaN only in A / B",
                (t["nan_only_a"], t["nan_only_b"]) == (int(np.sum(np.isnan(x) & ~np.isnan(y))), int(np.sum(np.isnan(y) & ~np.isnan(x)))),
            )
        cast = next(t for t in d["tensors"] if t["name"] == "w.float32_as_bf16")
        check("diff F32 vs its BF16 cast is within the default tolerance", cast["within"], f"beyond {cast['beyond']}")

        s = tf("stats", "--json", tmp / "a.safetensors")
        for t in s["tensors"]:
            src = a[t["name"]]
            x = as_f64(src)
            f = x[np.isfinite(x)]
            tiny = torch.finfo(src.dtype).tiny
            n = t["name"]
            for key, want in [
                ("min", f.min()), ("max", f.max()), ("mean", f.mean()),
                ("std", f.std()), ("absmax", np.abs(f).max()),
            ]:
                check(f"stats {n} {key}", close(t[key], float(want), 1e-12), f"{t[key]} vs {want}")
            for key, want in [
                ("zeros", int(np.sum(x == 0))), ("nan", int(np.sum(np.isnan(x)))),
                ("inf", int(np.sum(np.isinf(x)))),
                ("subnormal", int(np.sum((np.abs(f) < tiny) & (f != 0)))),
                ("finite", int(f.size)),
            ]:
                check(f"stats {n} {key}", t[key] == want, f"{t[key]} vs {want}")
            counts = sum(t["histogram"]["counts"])
            lo, hi = t["histogram"]["lo"], t["histogram"]["hi"]
            check(f"stats {n} histogram holds every finite value", counts == f.size and lo <= f.min() and hi > f.max())
            check(f"stats {n} outlier called out", t["outlier"] and t["largest"][0]["at"] == [2, 7])

    # MLX: mlx-lm's 4-bit llama against its BF16 source, dequantized by MLX.
    try:
        import mlx.core as mx
    except ImportError:
        print("skip MLX: mlx is not installed")
    else:
        src = ROOT / "tests/fixtures/real/mlx_lm/llama_bf16"
        q = ROOT / "tests/fixtures/real/mlx_lm/llama_q4"
        cfg = json.loads((q / "config.json").read_text())["quantization"]
        d = tf("diff", "--json", src, q)
        w_src = mx.load(str(src / "model.safetensors"))
        w_q = mx.load(str(q / "model.safetensors"))
        for t in d["tensors"]:
            if not t["b"].startswith("mlx"):
                continue
            m = t["name"][: -len(".weight")]
            deq = mx.dequantize(
                w_q[m + ".weight"], w_q[m + ".scales"], w_q[m + ".biases"],
                group_size=cfg["group_size"], bits=cfg["bits"],
            )
            x = np.array(w_src[t["name"]].astype(mx.float32), dtype=np.float64).reshape(-1)
            y = np.array(deq.astype(mx.float32), dtype=np.float64).reshape(-1)
            diff = np.abs(x - y)
            check(
                f"diff MLX {t['name']} max_abs_diff vs mx.dequantize",
                close(t["max_abs_diff"], float(diff.max())) and t["max_abs_index"] == int(np.argmax(diff)),
                f"{t['max_abs_diff']} vs {diff.max()}",
            )
            check(f"diff MLX {t['name']} rms vs mx.dequantize", close(t["rms"], float(np.sqrt(np.mean(diff ** 2)))))

    print(f"{len(FAILED)} failed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
