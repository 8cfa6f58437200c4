#!/usr/bin/env python3
"""Differential check of `tensorfile quantize` / `dequantize` against the
installed MLX (`mx.quantize`, `mx.dequantize`), beyond the committed
fixtures. Run by hand in the tools venv (mlx 0.32.4):

    /work/venvs/tools/bin/python scripts/check_mlx_quant.py [path/to/tensorfile]

Quantize, for F32, F16 and BF16 inputs and every mode (affine bits 2-8 with
groups of 32, 64 and 128; mxfp4; mxfp8; nvfp4; nvfp4 with a global scale per
expert of a 3-D stack, as mlx-lm makes it):

- random rows of many distributions and magnitudes (normal, uniform, shifted,
  outliers, constants, zeros, subnormals, values near the dtype's limit);
- for F16 and BF16, every positive finite value of the dtype as a group's
  largest magnitude (the floating-point modes' scales depend only on it).

Every group whose MLX result stands for its weights (its mx.dequantize values
are finite and at most twice the group's largest magnitude) must come out of
`tensorfile quantize` byte for byte; every other group must be refused by it
(run one by one).

Dequantize: random bytes for codes, scales, biases and global scales (NaN,
infinities, E4M3 0x7F, E8M0 0xFF included) in every mode and scales dtype,
read back in the default dtype and as F32, F16 and BF16: every value must have
MLX's bits (with a global scale MLX's CPU backend always returns F32; the
other dtypes are compared with MLX's F32 result rounded by MLX).

Prints one line per case and a summary; exits 1 on any difference.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TF = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "release" / "tensorfile"
DTYPES = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}
LIMIT = {"f32": 3.4e38, "f16": 65504.0, "bf16": 3.38e38}
TINY = {"f32": 1.4e-45, "f16": 6e-8, "bf16": 9.2e-41}
MODES = [("affine", b, g) for b in (2, 3, 4, 5, 6, 8) for g in (32, 64, 128)]
MODES += [("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16)]
failures = []


def as_bytes(a):
    a = mx.contiguous(a)
    if a.dtype == mx.bfloat16:
        return np.array(a.view(mx.uint16)).tobytes()
    return np.array(a).tobytes()


def tf(*args):
    return subprocess.run([str(TF), *map(str, args)], capture_output=True, text=True)


def rows_of(dn, n, cols, rng):
    """n rows of varied distributions, in float64 (cast by MLX)."""
    lim, tiny = LIMIT[dn], TINY[dn]
    out = np.zeros((n, cols))
    for r in range(n):
        kind = r % 10
        mag = 10.0 ** rng.uniform(np.log10(tiny) + 2, np.log10(lim) - 1)
        if kind == 0:
            out[r] = rng.normal(0, 1, cols)
        elif kind == 1:
            out[r] = rng.normal(0, 1, cols) * mag
        elif kind == 2:
            out[r] = rng.uniform(0.5, 1, cols) * mag * rng.choice([-1, 1])
        elif kind == 3:
            out[r] = rng.normal(0, 0.01, cols)
            out[r, rng.integers(0, cols, 4)] = rng.choice([-40.0, 40.0], 4)
        elif kind == 4:
            out[r] = rng.choice([0.0, -0.0, 1.0, -2.5], 1)[0]
        elif kind == 5:
            out[r] = rng.choice([-1, 1], cols) * 10 ** rng.uniform(np.log10(tiny), np.log10(tiny) + 8, cols)
        elif kind == 6:
            out[r] = rng.uniform(-lim, lim, cols) * rng.uniform(0.1, 1)
        elif kind == 7:
            out[r] = 5.0 + rng.normal(0, 1e-3, cols)
        elif kind == 8:
            out[r] = np.round(rng.normal(0, 3, cols) * 2) / 2  # on the E2M1 grid and its midpoints
        else:
            out[r] = rng.normal(0, 1, cols) * 10 ** rng.uniform(-8, 8, cols)
    return out


def every_value_rows(dn, cols):
    """One row per positive finite value v of F16/BF16: [v, -v/3, v/7, ...],
    v the largest magnitude."""
    bits = np.arange(1, 0x7F80 if dn == "bf16" else 0x7C00, dtype=np.uint16)
    bits = bits[: len(bits) // 2 * 2]  # MLX's CPU nvfp4 packs 32 codes at a time
    v = np.array(mx.array(bits).view(DTYPES[dn]).astype(mx.float32)).astype(np.float64)
    pattern = np.array([1.0, -1 / 3, 1 / 7, -0.5, 0.25, 0.75, -0.9, 0.0] * (cols // 8))
    return v[:, None] * pattern[None, :]


def stands(w, deq, gs):
    """Per group: whether MLX's dequantized values stand for the weights."""
    w = w.reshape(-1, gs)
    deq = deq.reshape(-1, gs)
    amax = np.abs(w).max(axis=1)
    ok = np.isfinite(deq).all(axis=1) & (np.abs(deq) <= 2 * amax[:, None]).all(axis=1)
    return ok


def check_quantize(dn, mode, bits, gs, x, tmp, label, global_scale=False):
    """x: float64 [rows, cols] (or [E, out, cols] with a global scale)."""
    dt = DTYPES[dn]
    w = mx.array(x.astype(np.float32)).astype(dt)
    name = "x.switch_mlp.w" if global_scale else "x"
    if global_scale:
        gsc = mx.max(mx.abs(w), axis=(-2, -1)).astype(mx.float32)
        qs = [mx.quantize(w[e], gs, bits, mode=mode, global_scale=gsc[e]) for e in range(w.shape[0])]
        wq, sc, bi = mx.stack([q[0] for q in qs]), mx.stack([q[1] for q in qs]), None
        deq = mx.stack([mx.dequantize(wq[e], sc[e], None, gs, bits, mode=mode, global_scale=gsc[e])
                        for e in range(w.shape[0])])
    else:
        q = mx.quantize(w, gs, bits, mode=mode)
        wq, sc = q[0], q[1]
        bi = q[2] if len(q) > 2 else None
        deq = mx.dequantize(wq, sc, bi, gs, bits, mode=mode)
    mx.eval(wq, sc, deq)
    wf = np.array(w.astype(mx.float32)).astype(np.float64)
    n = w.shape[0]  # rows, or experts
    finite = np.isfinite(wf).reshape(n, -1).all(axis=1)
    good_group = stands(wf, np.array(deq.astype(mx.float32)), gs)
    groups_per_row = good_group.size // n
    good_row = good_group.reshape(n, -1).all(axis=1)
    # tensorfile refuses weights that are not finite, and the groups whose
    # MLX result does not stand (nvfp4 has none: its scales saturate).
    keep = finite & (good_row | (mode == "nvfp4"))
    scheme = ["--scheme", f"mlx-{mode}"] + (["--bits", bits, "--group-size", gs] if mode == "affine" else [])
    if global_scale:
        scheme.append("--global-scale")
    src, dst = tmp / "in.safetensors", tmp / "out.safetensors"
    idx = np.nonzero(keep)[0]
    compared = 0
    if len(idx):
        sel = mx.array(idx.astype(np.int32))
        mx.save_safetensors(str(src), {f"{name}.weight": w[sel]})
        r = tf("quantize", src, dst, *scheme, "--include", f"{name}.weight", "--no-sync")
        if r.returncode != 0:
            failures.append(f"{label}: quantize failed: {r.stderr.strip()}")
            return
        ours = mx.load(str(dst))
        theirs = {"weight": wq[sel], "scales": sc[sel]}
        if bi is not None:
            theirs["biases"] = bi[sel]
        if global_scale:
            theirs["global_scale"] = gsc[sel]
        for part, ref in theirs.items():
            got = ours.get(f"{name}.{part}")
            if got is None or as_bytes(got) != as_bytes(ref):
                failures.append(f"{label}: {part} differs")
        compared = len(idx) * groups_per_row
    # Rows with a group MLX gets wrong (or a weight that is not finite): refused.
    refused = 0
    for r_ in np.nonzero(~keep)[0][:64]:
        mx.save_safetensors(str(src), {f"{name}.weight": w[int(r_):int(r_) + 1]})
        r = tf("quantize", src, dst, *scheme, "--include", f"{name}.weight", "--no-sync")
        if r.returncode != 1 or ("group" not in r.stderr and "element [" not in r.stderr):
            failures.append(f"{label}: row {r_} should be refused: {r.returncode} {r.stderr.strip()}")
        refused += 1
    print(f"{label}: {compared} groups identical, {refused} rows refused ({int((~finite).sum())} not finite)"
          f"{' (of ' + str(int((~keep).sum())) + ')' if (~keep).sum() > 64 else ''}")


def check_dequantize(mode, bits, gs, sdt, tmp, rng, global_scale=False):
    rows, cols = 64, 256
    words = rng.integers(0, 2 ** 32, (rows, cols * bits // 32), dtype=np.uint64).astype(np.uint32)
    arrays = {"x.weight": mx.array(words)}
    if mode == "affine":
        raw = rng.integers(0, 2 ** 16, (2, rows, cols // gs), dtype=np.uint32)
        if sdt == "f32":
            s = rng.normal(0, 1, (2, rows, cols // gs)).astype(np.float32)
            s[:, 0, 0], s[:, 1, 0] = np.inf, np.nan
            sc, bi = mx.array(s[0]), mx.array(s[1])
        else:
            sc = mx.array(raw[0].astype(np.uint16)).view(DTYPES[sdt])
            bi = mx.array(raw[1].astype(np.uint16)).view(DTYPES[sdt])
        arrays["x.scales"], arrays["x.biases"] = sc, bi
    else:
        sc = mx.array(rng.integers(0, 256, (rows, cols // gs), dtype=np.uint32).astype(np.uint8))
        arrays["x.scales"], bi = sc, None
    g = None
    if global_scale:
        g = mx.array(np.float32(rng.uniform(0.01, 100)))
        arrays["x.global_scale"] = g
    src, dst = tmp / "q.safetensors", tmp / "d.safetensors"
    mx.save_safetensors(str(src), arrays)
    kw = {"global_scale": g} if g is not None else {}
    for dtype in [None, "f32", "f16", "bf16"]:
        mdt = {None: None, "f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}[dtype]
        ref = mx.dequantize(arrays["x.weight"], sc, bi, gs, bits, mode=mode, dtype=mdt, **kw)
        if g is not None and mdt is not None:
            ref = ref.astype(mdt)  # MLX's CPU backend returns F32 with a global scale
        extra = ["--dtype", dtype] if dtype else []
        r = tf("dequantize", src, dst, "--bits", bits, "--group-size", gs, "--mode", mode, *extra, "--no-sync")
        label = f"dequantize {mode} b{bits} g{gs} scales {sdt}{' global' if g is not None else ''} -> {dtype or 'default'}"
        if r.returncode != 0:
            failures.append(f"{label}: {r.stderr.strip()}")
            continue
        got = mx.load(str(dst))["x.weight"]
        if got.dtype != ref.dtype or as_bytes(got) != as_bytes(ref):
            a = np.frombuffer(as_bytes(got), np.uint8)
            b = np.frombuffer(as_bytes(ref), np.uint8)
            n = int((a != b).sum()) if a.shape == b.shape else -1
            failures.append(f"{label}: {got.dtype} vs {ref.dtype}, {n} bytes differ")
        else:
            print(f"{label}: identical")


def main():
    if not TF.exists():
        sys.exit(f"{TF} not found (cargo build --release -p tensorfile-cli)")
    rng = np.random.default_rng(1616)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for dn in DTYPES:
            for mode, bits, gs in MODES:
                check_quantize(dn, mode, bits, gs, rows_of(dn, 200, 256, rng), tmp, f"quantize {dn} {mode} b{bits} g{gs}")
                if mode != "affine" and dn != "f32":
                    check_quantize(dn, mode, bits, gs, every_value_rows(dn, 32 if mode != "nvfp4" else 16),
                                   tmp, f"quantize {dn} {mode} every {dn} value as absmax")
            x = rows_of(dn, 8 * 64, 256, rng).reshape(8, 64, 256)
            check_quantize(dn, "nvfp4", 4, 16, x, tmp, f"quantize {dn} nvfp4 global scale per expert", True)
        for mode, bits, gs in MODES:
            for sdt in (["f32", "f16", "bf16"] if mode == "affine" else ["u8"]):
                check_dequantize(mode, bits, gs, sdt, tmp, rng)
        check_dequantize("nvfp4", 4, 16, "u8", tmp, rng, global_scale=True)
    print(f"{len(failures)} failures")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
