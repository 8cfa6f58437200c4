#!/usr/bin/env python3
"""Generate tests/fixtures/gguf/ with the real GGUF tools (run by hand, not in CI).

Environment: /work/venvs/gguf (see scripts/requirements-gguf.txt and the
"gguf/" section of tests/fixtures/README.md for how to recreate it):
  gguf (PyPI), numpy, ml_dtypes, tokenizers, llama-cpp-python built from its
  sdist (its vendored llama.cpp gives libggml, llama_model_quantize,
  convert_hf_to_gguf.py).
The model step also uses a second venv with torch + transformers
(TOOLS_PY, default /work/venvs/tools/bin/python), run as a subprocess through
scripts/gguf_fixture_hf.py.

Usage:
  python scripts/make_gguf_fixtures.py quants   # 1 + 2: dequant / quant vectors
  python scripts/make_gguf_fixtures.py files    # 3: whole files by GGUFWriter
  python scripts/make_gguf_fixtures.py model    # 4: tiny Llama, converter, logits
  python scripts/make_gguf_fixtures.py model_wide  # 4b: 256-wide Llama, real Q4_K_M
  python scripts/make_gguf_fixtures.py tf5      # 5: transformers 5 llama3/qwen2 dirs, converter digests
  python scripts/make_gguf_fixtures.py raw      # 6: GGUFWriter file of an unmapped architecture
  python scripts/make_gguf_fixtures.py all

Every step is deterministic (fixed seeds); every output is described in
tests/fixtures/gguf/manifest.json (each step rewrites only its own section).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "gguf"
MANIFEST = OUT / "manifest.json"
LLAMA_CPP_SRC = Path(os.environ.get(
    "LLAMA_CPP_SRC", "/work/src/llama_cpp_python-0.3.36/vendor/llama.cpp"))
TOOLS_PY = os.environ.get("TOOLS_PY", "/work/venvs/tools/bin/python")


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def rel(p: Path) -> str:
    return str(p.relative_to(OUT))


def load_manifest() -> dict:
    if MANIFEST.exists():
        return json.loads(MANIFEST.read_text())
    return {}


def save_manifest(section: str, value) -> None:
    m = load_manifest()
    m[section] = value
    m["generator"] = "scripts/make_gguf_fixtures.py"
    m["versions"] = versions()
    MANIFEST.write_text(json.dumps(dict(sorted(m.items())), indent=1) + "\n")


def versions() -> dict:
    from importlib.metadata import version
    v = {"gguf": version("gguf"), "numpy": np.__version__}
    for p in ("llama_cpp_python", "ml_dtypes", "tokenizers"):
        try:
            v[p] = version(p)
        except Exception:
            pass
    try:
        v["llama.cpp_commit"] = subprocess.check_output(
            ["git", "-C", str(LLAMA_CPP_SRC), "rev-parse", "HEAD"], text=True).strip()
    except Exception:
        pass
    return v


def f32_stats(a: np.ndarray) -> dict:
    a = a.astype(np.float32)
    fin = np.isfinite(a)
    return {
        "n": int(a.size),
        "n_nan": int(np.isnan(a).sum()),
        "n_inf": int(np.isinf(a).sum()),
        "min": float(a[fin].min()) if fin.any() else None,
        "max": float(a[fin].max()) if fin.any() else None,
    }


# --------------------------------------------------------------------------
# libggml (from llama-cpp-python) through ctypes: llama.cpp's own C code
# --------------------------------------------------------------------------

class Ggml:
    def __init__(self):
        import llama_cpp
        libdir = Path(llama_cpp.__file__).parent / "lib"
        self.lib = ctypes.CDLL(str(libdir / "libggml-base.so"))

        class Traits(ctypes.Structure):
            _fields_ = [("type_name", ctypes.c_char_p),
                        ("blck_size", ctypes.c_int64),
                        ("blck_size_interleave", ctypes.c_int64),
                        ("type_size", ctypes.c_size_t),
                        ("is_quantized", ctypes.c_bool),
                        ("to_float", ctypes.c_void_p),
                        ("from_float_ref", ctypes.c_void_p)]
        self.Traits = Traits
        self.lib.ggml_get_type_traits.restype = ctypes.POINTER(Traits)
        self.lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
        self.lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        self.lib.ggml_quantize_chunk.argtypes = [
            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
            ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        self.lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
        self.lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
        self.lib.ggml_quantize_init.argtypes = [ctypes.c_int]
        self.ToFloat = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    def traits(self, t: int):
        return self.lib.ggml_get_type_traits(int(t)).contents

    def dequantize(self, t: int, raw: bytes) -> np.ndarray:
        tr = self.traits(t)
        n = len(raw) // tr.type_size * tr.blck_size
        src = np.frombuffer(raw, dtype=np.uint8).copy()
        out = np.empty(n, dtype=np.float32)
        self.ToFloat(tr.to_float)(src.ctypes.data, out.ctypes.data, n)
        return out

    def requires_imatrix(self, t: int) -> bool:
        return bool(self.lib.ggml_quantize_requires_imatrix(int(t)))

    def quantize(self, t: int, rows: np.ndarray, imatrix: np.ndarray | None = None) -> bytes:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        nrows, n_per_row = rows.shape
        bs, ts = GGML_QUANT_SIZES[T(t)]
        dst = np.zeros(nrows * n_per_row // bs * ts, dtype=np.uint8)
        im = None
        if imatrix is not None:
            imatrix = np.ascontiguousarray(imatrix, dtype=np.float32)
            im = imatrix.ctypes.data
        self.lib.ggml_quantize_init(int(t))
        n = self.lib.ggml_quantize_chunk(int(t), rows.ctypes.data, dst.ctypes.data, 0,
                                         nrows, n_per_row, im)
        assert n == dst.size, (T(t).name, n, dst.size)
        return dst.tobytes()


def same_f32(a: np.ndarray, b: np.ndarray) -> dict:
    """Compare two f32 arrays: bit-exact, and ignoring NaN payloads."""
    a = a.astype(np.float32).ravel()
    b = b.astype(np.float32).ravel()
    bits_equal = a.view(np.uint32) == b.view(np.uint32)
    both_nan = np.isnan(a) & np.isnan(b)
    eq = bits_equal | both_nan
    r = {"bit_exact": bool(bits_equal.all()), "equal_nan_as_nan": bool(eq.all()),
         "n_differ": int((~eq).sum())}
    if not eq.all():
        fin = np.isfinite(a) & np.isfinite(b) & ~eq
        r["max_abs_diff_finite"] = float(np.abs(a[fin] - b[fin]).max()) if fin.any() else None
    return r


# --------------------------------------------------------------------------
# 1 + 2: dequantization and quantization vectors
# --------------------------------------------------------------------------

# byte offsets of the f16 scale fields inside one block (ggml-common.h)
F16_SCALE_OFFSETS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0], "IQ3_XXS": [0], "IQ3_S": [0],
    "IQ1_S": [0], "IQ4_NL": [0], "IQ4_XS": [0], "TQ1_0": [52], "TQ2_0": [64],
}


def sane_f16(rng, n) -> np.ndarray:
    """Finite f16 scales of plausible magnitude, random sign: |d| in [2^-12, 2^-4]."""
    mag = 2.0 ** rng.uniform(-12, -4, size=n)
    sign = rng.choice([-1.0, 1.0], size=n)
    return (mag * sign).astype(np.float16)


def sanitize_scales(name: str, blocks: np.ndarray, rng) -> np.ndarray:
    """blocks: (n_blocks, type_size) uint8 random bytes; overwrite scale fields."""
    b = blocks.copy()
    n = b.shape[0]
    if name in F16_SCALE_OFFSETS:
        for off in F16_SCALE_OFFSETS[name]:
            b[:, off:off + 2] = sane_f16(rng, n).view(np.uint8).reshape(n, 2)
    elif name == "IQ1_M":
        # the f16 super-block scale is the top 4 bits of the 4 uint16 in scales[8] (bytes 48..55)
        d = sane_f16(rng, n).view(np.uint16)
        sc = b[:, 48:56].copy().view(np.uint16).reshape(n, 4)
        for j, shift in enumerate((0, 4, 8, 12)):
            sc[:, j] = (sc[:, j] & 0x0FFF) | (((d >> shift) & 0xF) << 12)
        b[:, 48:56] = sc.view(np.uint8).reshape(n, 8)
    elif name == "MXFP4":
        b[:, 0] = rng.integers(112, 128, size=n)   # e8m0 exponent byte: 2^-15..2^0
    elif name == "NVFP4":
        # 4 UE4M3 sub-block scales: exponent field 1..10, any mantissa, top bit 0
        b[:, 0:4] = (rng.integers(1, 11, size=(n, 4)) << 3) | rng.integers(0, 8, size=(n, 4))
    elif name == "BF16":
        # random finite bf16: sign, exponent 100..140, any mantissa
        v = (rng.integers(0, 2, size=b.size // 2) << 15) | (rng.integers(100, 141, size=b.size // 2) << 7) \
            | rng.integers(0, 128, size=b.size // 2)
        b = v.astype("<u2").view(np.uint8).reshape(b.shape)
    else:
        raise KeyError(name)
    return b


def real_weights(rng, n) -> np.ndarray:
    """Weights that look like a trained layer: mostly N(0, 0.02), a few larger."""
    w = rng.normal(0, 0.02, size=n).astype(np.float32)
    idx = rng.choice(n, size=max(1, n // 64), replace=False)
    w[idx] *= rng.uniform(3, 8, size=idx.size).astype(np.float32)
    return w


def quant_input_rows() -> tuple[list[str], np.ndarray]:
    """Rows of 256 f32 (a multiple of every block size) with edge cases."""
    rng = np.random.default_rng(20260201)
    n = 256
    rows = {}
    rows["zeros"] = np.zeros(n)
    rows["constant_pos"] = np.full(n, 0.5)
    rows["constant_neg"] = np.full(n, -0.25)
    r = rng.normal(0, 0.01, n); r[17] = 3.0; rows["one_outlier_pos"] = r
    r = rng.normal(0, 0.1, n); r[200] = -5.0; rows["negative_max"] = r   # |max| is negative
    # ties: per 32-block the first value fixes the scale to exactly 1 (Q8_0: amax 127;
    # Q4_0: max -8), the rest sit exactly halfway between two quantization levels
    t8 = (rng.integers(-126, 126, n) + 0.5); t8[::32] = 127.0; rows["ties_q8_0"] = t8
    t4 = (rng.integers(-8, 7, n) + 0.5); t4[::32] = -8.0; rows["ties_q4_0"] = t4
    rows["ramp"] = np.linspace(-1.0, 1.0, n)
    rows["uniform"] = rng.uniform(-1, 1, n)
    rows["weights_a"] = real_weights(rng, n)
    rows["weights_b"] = real_weights(rng, n)
    rows["tiny"] = rng.normal(0, 1e-6, n)          # f16 scales become subnormal
    rows["large"] = rng.normal(0, 1e4, n)
    r = rng.normal(0, 0.02, n); r[::2] = 0.0; rows["half_zeros"] = r
    names = list(rows)
    return names, np.stack([rows[k] for k in names]).astype(np.float32)


def bf16_special_row() -> np.ndarray:
    bits = [0x7FC00000, 0x7F800001, 0xFFC00001, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
            0x00000001, 0x007FFFFF, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F808001, 0x7F7FFFFF,
            0xFF7FFFFF, 0x3F800000]
    a = np.array(bits * 16, dtype=np.uint32)[:256]
    return a.view(np.float32)


def step_quants(ggml: Ggml) -> None:
    dq_dir = OUT / "dequant"
    q_dir = OUT / "quant"
    dq_dir.mkdir(parents=True, exist_ok=True)
    q_dir.mkdir(parents=True, exist_ok=True)
    traits = gguf.quants._type_traits
    py_quant = []
    for t in traits:
        try:
            gguf.quants.quantize(np.zeros((1, 256), np.float32), t)
            py_quant.append(t)
        except NotImplementedError:
            pass

    # ---- 1: dequantization vectors
    dequant = {}
    for t in traits:
        name = t.name
        bs, ts = GGML_QUANT_SIZES[t]
        rng = np.random.default_rng(1000 + int(t))
        nq, ns, nr = (4, 4, 2) if bs == 256 else (8, 8, 4)
        if name == "BF16":
            nq, ns, nr = 64, 64, 64
        groups = []
        # (a) quantized real-looking weights
        w = real_weights(rng, nq * bs).reshape(1, -1)
        if t in py_quant:
            qb = gguf.quants.quantize(w, t).tobytes()
            how = "gguf.quants.quantize (numpy) of N(0,0.02)-like weights"
        else:
            imat = None
            how = "llama.cpp ggml_quantize_chunk (libggml from llama-cpp-python), no importance matrix"
            if ggml.requires_imatrix(int(t)):
                imat = np.ones(w.shape[1], dtype=np.float32)
                how = "llama.cpp ggml_quantize_chunk with an all-ones importance matrix (this type requires one)"
            qb = ggml.quantize(int(t), w, imat)
        groups.append(("quantized", qb, how))
        # (b) random bytes, scale fields replaced by finite plausible values
        rb = rng.integers(0, 256, size=(ns, ts), dtype=np.uint8) if name != "BF16" else \
            rng.integers(0, 256, size=(ns, 2), dtype=np.uint8)
        groups.append(("random_sane_scales", sanitize_scales(name, rb, rng).tobytes(),
                       "random bytes; scale fields replaced by finite values of plausible magnitude"))
        # (c) fully random bytes (scales too: may decode to inf/NaN)
        rb = rng.integers(0, 256, size=(nr * (ts if name != "BF16" else 2)), dtype=np.uint8)
        groups.append(("random_bytes", rb.tobytes(), "fully random bytes, scale fields included"))

        raw = b"".join(g[1] for g in groups)
        out = gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8), t).astype(np.float32).ravel()
        cdeq = ggml.dequantize(int(t), raw)
        (dq_dir / f"{name}.blocks").write_bytes(raw)
        (dq_dir / f"{name}.f32").write_bytes(out.astype("<f4").tobytes())
        entry = {
            "ggml_type": int(t), "block_size": bs, "type_size": ts,
            "blocks_file": f"dequant/{name}.blocks", "blocks_sha256": sha256(raw),
            "f32_file": f"dequant/{name}.f32", "f32_sha256": sha256(out.astype("<f4").tobytes()),
            "n_blocks": len(raw) // ts,
            "groups": [], "vs_llama_cpp_to_float": same_f32(out, cdeq),
        }
        pos = 0
        for gname, gb, how in groups:
            nb = len(gb) // ts
            nel = nb * bs
            o = out[pos // ts * bs: pos // ts * bs + nel]
            entry["groups"].append({"name": gname, "how": how, "first_block": pos // ts,
                                    "n_blocks": nb, "first_elem": pos // ts * bs,
                                    "stats": f32_stats(o),
                                    "vs_llama_cpp_to_float": same_f32(o, cdeq[pos // ts * bs: pos // ts * bs + nel])})
            pos += len(gb)
        dequant[name] = entry
        print("dequant", name, entry["vs_llama_cpp_to_float"])

    # ---- 2: quantization vectors
    names, rows = quant_input_rows()
    (q_dir / "input.f32").write_bytes(rows.astype("<f4").tobytes())
    brow = np.concatenate([rows, bf16_special_row()[None, :]])
    (q_dir / "input_bf16.f32").write_bytes(brow.astype("<f4").tobytes())
    quant = {
        "input_file": "quant/input.f32", "input_sha256": sha256(rows.astype("<f4").tobytes()),
        "input_rows": names, "row_len": 256,
        "input_bf16_file": "quant/input_bf16.f32",
        "input_bf16_sha256": sha256(brow.astype("<f4").tobytes()),
        "input_bf16_rows": names + ["specials (NaN payloads, inf, -0, subnormals, round-to-even ties)"],
        "gguf_py": {}, "llama_cpp": {},
    }
    for t in py_quant:
        name = t.name
        inp = brow if name == "BF16" else rows
        qb = gguf.quants.quantize(inp, t).tobytes()
        cq = ggml.quantize(int(t), inp)   # BF16: ggml_fp32_to_bf16_row_ref through quantize_chunk
        deq = gguf.quants.dequantize(np.frombuffer(qb, np.uint8), t).astype("<f4").ravel()
        (q_dir / f"{name}.gguf_py.q").write_bytes(qb)
        (q_dir / f"{name}.gguf_py.deq.f32").write_bytes(deq.tobytes())
        e = {"ggml_type": int(t), "input": "input_bf16" if name == "BF16" else "input",
             "file": f"quant/{name}.gguf_py.q", "sha256": sha256(qb),
             "dequantized_file": f"quant/{name}.gguf_py.deq.f32", "dequantized_sha256": sha256(deq.tobytes()),
             "equals_llama_cpp_ggml_quantize_chunk": qb == cq}
        if qb != cq:
            bs, ts = GGML_QUANT_SIZES[t]
            a = np.frombuffer(qb, np.uint8).reshape(-1, ts)
            b = np.frombuffer(cq, np.uint8).reshape(-1, ts)
            diff_blocks = np.nonzero((a != b).any(axis=1))[0]
            per_row = 256 // bs
            e["differing_blocks"] = [int(x) for x in diff_blocks]
            e["differing_rows"] = sorted({(quant["input_bf16_rows"] if name == "BF16" else names)[int(x) // per_row] for x in diff_blocks})
            (q_dir / f"{name}.llama_cpp.q").write_bytes(cq)
            e["llama_cpp_file"] = f"quant/{name}.llama_cpp.q"
            e["llama_cpp_sha256"] = sha256(cq)
        quant["gguf_py"][name] = e
        print("quant py", name, e["equals_llama_cpp_ggml_quantize_chunk"], e.get("differing_rows"))
    # llama.cpp's own quantizer for the types numpy cannot quantize
    for t in traits:
        if t in py_quant:
            continue
        name = t.name
        if ggml.requires_imatrix(int(t)):
            quant["llama_cpp"][name] = {"ggml_type": int(t), "skipped": "ggml_quantize_requires_imatrix: llama.cpp refuses to quantize this type without an importance matrix"}
            continue
        try:
            cq = ggml.quantize(int(t), rows)
        except Exception as ex:  # noqa
            quant["llama_cpp"][name] = {"ggml_type": int(t), "skipped": repr(ex)}
            continue
        deq = gguf.quants.dequantize(np.frombuffer(cq, np.uint8), t).astype("<f4").ravel()
        (q_dir / f"{name}.llama_cpp.q").write_bytes(cq)
        (q_dir / f"{name}.llama_cpp.deq.f32").write_bytes(deq.tobytes())
        quant["llama_cpp"][name] = {
            "ggml_type": int(t), "input": "input", "file": f"quant/{name}.llama_cpp.q", "sha256": sha256(cq),
            "how": "ggml_quantize_chunk(type, rows, imatrix=NULL): the call llama_model_quantize makes per chunk",
            "dequantized_file": f"quant/{name}.llama_cpp.deq.f32", "dequantized_sha256": sha256(deq.tobytes()),
        }
        print("quant c", name)
    save_manifest("dequant", dequant)
    save_manifest("quant", quant)


# --------------------------------------------------------------------------
# 2b: K-quant blocks from llama.cpp's model quantizer (llama_model_quantize)
# --------------------------------------------------------------------------

def write_carrier(path: Path, rows: np.ndarray) -> None:
    """A minimal F32 llama GGUF whose token_embd / output rows are the quant input rows."""
    n_vocab, n_embd = rows.shape
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_embd)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_rope_dimension_count(n_embd // 4)
    w.add_file_type(0)
    w.add_tensor("token_embd.weight", rows)
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", np.ascontiguousarray(rows[::-1]))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def llama_quantize(fin: Path, fout: Path, ftype: int, pure: bool) -> int:
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.pure = pure
    params.nthread = 1
    return llama_cpp.llama_model_quantize(str(fin).encode(), str(fout).encode(), ctypes.byref(params))


def gguf_tensor_bytes(path: Path) -> dict[str, tuple[str, bytes]]:
    r = gguf.GGUFReader(path)
    return {t.name: (t.tensor_type.name, bytes(t.data.tobytes())) for t in r.tensors}


def step_kquant_model(ggml: Ggml) -> None:
    import llama_cpp
    kdir = OUT / "kquant"
    kdir.mkdir(parents=True, exist_ok=True)
    names, rows = quant_input_rows()
    carrier = kdir / "carrier_f32.gguf"
    write_carrier(carrier, rows)
    res = {"carrier_file": rel(carrier), "carrier_sha256": sha256(carrier.read_bytes()),
           "carrier_how": "GGUFWriter, arch llama, n_embd 256; token_embd.weight = the 14 rows of "
                          "quant/input.f32, output.weight = the same rows reversed",
           "input_rows": names, "runs": {}}
    ftypes = {"Q2_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K, "Q3_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q3_K_M,
              "Q4_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, "Q5_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
              "Q6_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K}
    for tname, ft in ftypes.items():
        for pure in (True, False):
            out = kdir / f"carrier_{'pure_' if pure else ''}{tname if pure else ftype_name(ft)}.gguf"
            rc = llama_quantize(carrier, out, ft, pure)
            run = {"ftype": ftype_name(ft), "ftype_id": int(ft), "pure": pure, "rc": rc}
            if rc == 0:
                tb = gguf_tensor_bytes(out)
                run["file"] = rel(out)
                run["sha256"] = sha256(out.read_bytes())
                run["tensor_types"] = {k: v[0] for k, v in tb.items()}
                for tn, src in (("token_embd.weight", rows), ("output.weight", np.ascontiguousarray(rows[::-1]))):
                    ty, data = tb[tn]
                    if ty in ("F32", "F16"):
                        continue
                    chunk = ggml.quantize(int(T[ty]), src)
                    run.setdefault("equals_ggml_quantize_chunk", {})[tn] = data == chunk
                if not pure:
                    out.unlink()   # keep only the pure files (the mixtures are recorded by type)
                    run["file"] = None
            res["runs"][f"{tname}{'_pure' if pure else '_mix'}"] = run
            print(tname, pure, run.get("tensor_types"), run.get("equals_ggml_quantize_chunk"))
    save_manifest("kquant_model", res)


def ftype_name(ft: int) -> str:
    import llama_cpp
    for k in dir(llama_cpp):
        if k.startswith("LLAMA_FTYPE_") and getattr(llama_cpp, k) == ft:
            return k[len("LLAMA_FTYPE_"):]
    return str(ft)


# --------------------------------------------------------------------------
# 3: whole files written by gguf.GGUFWriter
# --------------------------------------------------------------------------

VT = gguf.GGUFValueType


def jval(v):
    """A metadata value (as GGUFReader returns it) as JSON."""
    if isinstance(v, (list, tuple)):
        return [jval(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8")
    if isinstance(v, (np.floating, float)):
        f = float(v)
        if f != f:
            return "nan"
        if f in (float("inf"), float("-inf")):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer, int)):
        return int(v)
    return v


def parse_value(b: bytes, off: int, vtype: int, e: str):
    simple = {VT.UINT8: "B", VT.INT8: "b", VT.UINT16: "H", VT.INT16: "h", VT.UINT32: "I",
              VT.INT32: "i", VT.FLOAT32: "f", VT.BOOL: "?", VT.UINT64: "Q", VT.INT64: "q",
              VT.FLOAT64: "d"}
    if vtype in simple:
        fmt = e + simple[vtype]
        return struct.unpack_from(fmt, b, off)[0], off + struct.calcsize(fmt)
    if vtype == VT.STRING:
        (n,) = struct.unpack_from(e + "Q", b, off)
        return b[off + 8:off + 8 + n].decode("utf-8"), off + 8 + n
    if vtype == VT.ARRAY:
        (t,) = struct.unpack_from(e + "I", b, off)
        (n,) = struct.unpack_from(e + "Q", b, off + 4)
        off += 12
        out = []
        for _ in range(n):
            v, off = parse_value(b, off, t, e)
            out.append(v)
        return {"elem_type": VT(t).name, "values": out}, off
    raise ValueError(vtype)


def parse_gguf(path: Path) -> dict:
    """An independent walk of a GGUF file (little- or big-endian), for the manifest."""
    b = path.read_bytes()
    assert b[:4] == b"GGUF"
    (ver_le,) = struct.unpack_from("<I", b, 4)
    e = "<" if ver_le & 0xFFFF else ">"
    (version,) = struct.unpack_from(e + "I", b, 4)
    n_tensors, n_kv = struct.unpack_from(e + "QQ", b, 8)
    off = 24
    kvs = []
    alignment = 32
    for _ in range(n_kv):
        key, off = parse_value(b, off, VT.STRING, e)
        (t,) = struct.unpack_from(e + "I", b, off)
        off += 4
        kv_off = off
        val, off = parse_value(b, off, t, e)
        kv = {"key": key, "type": VT(t).name}
        if t == VT.ARRAY:
            kv["elem_type"] = val["elem_type"]
            kv["value"] = jval_arr(val)
        else:
            kv["value"] = jval(val)
        kvs.append(kv)
        if key == "general.alignment":
            alignment = val
    tensors = []
    for _ in range(n_tensors):
        name, off = parse_value(b, off, VT.STRING, e)
        (nd,) = struct.unpack_from(e + "I", b, off)
        dims = list(struct.unpack_from(e + "Q" * nd, b, off + 4))
        off += 4 + 8 * nd
        gt, toff = struct.unpack_from(e + "IQ", b, off)
        off += 12
        tensors.append({"name": name, "ggml_type": T(gt).name, "ggml_type_id": gt, "dims": dims,
                        "numpy_shape": dims[::-1], "offset": toff})
    data_start = (off + alignment - 1) // alignment * alignment if n_tensors else off
    for ti in tensors:
        bs, ts = GGML_QUANT_SIZES[T(ti["ggml_type_id"])]
        n = int(np.prod(ti["dims"], dtype=np.int64))
        nbytes = n // bs * ts
        raw = b[data_start + ti["offset"]: data_start + ti["offset"] + nbytes]
        ti["nbytes"] = nbytes
        ti["absolute_offset"] = data_start + ti["offset"]
        ti["sha256"] = sha256(raw)
        tt = T(ti["ggml_type_id"])
        if tt in (T.I8, T.I16, T.I32, T.I64):
            ti["dequantized_f32_sha256"] = None
        else:
            if e == ">":
                if tt in (T.F32, T.F16, T.F64):
                    a = np.frombuffer(raw, dtype={T.F32: ">f4", T.F16: ">f2", T.F64: ">f8"}[tt]).astype("<f4")
                else:
                    a = None   # quantized blocks in a big-endian file: see the manifest note
            elif tt == T.F64:
                a = np.frombuffer(raw, "<f8").astype("<f4")
            else:
                a = gguf.quants.dequantize(np.frombuffer(raw, np.uint8), tt).astype("<f4").ravel()
            ti["dequantized_f32_sha256"] = sha256(a.tobytes()) if a is not None else None
    return {"version": version, "endianness": "little" if e == "<" else "big",
            "n_tensors": n_tensors, "n_kv": n_kv, "alignment": alignment,
            "tensor_info_end": off, "data_offset": data_start, "size": len(b),
            "sha256": sha256(b), "kv": kvs, "tensors": tensors}


def jval_arr(v):
    if isinstance(v, dict):
        return [jval_arr(x) for x in v["values"]]
    return jval(v)


def kv_types_of(v):
    if isinstance(v, dict):
        inner = [kv_types_of(x) for x in v["values"]]
        return {"array_of": v["elem_type"], "inner": inner if inner and isinstance(inner[0], dict) else None}
    return None


def ggml_gguf_init(path: Path) -> dict:
    """llama.cpp's own reader (ggml/src/gguf.cpp gguf_init_from_file) on the file."""
    try:
        g = Ggml()
    except Exception as ex:  # noqa
        return {"skipped": repr(ex)}
    lib = g.lib

    class Params(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, Params]
    ctx = lib.gguf_init_from_file(str(path).encode(), Params(True, None))
    if not ctx:
        return {"ok": False, "note": "gguf_init_from_file returned NULL (its error goes to stderr)"}
    lib.gguf_get_version.restype = ctypes.c_uint32
    lib.gguf_get_version.argtypes = [ctypes.c_void_p]
    lib.gguf_get_n_kv.restype = ctypes.c_int64
    lib.gguf_get_n_kv.argtypes = [ctypes.c_void_p]
    lib.gguf_get_n_tensors.restype = ctypes.c_int64
    lib.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
    lib.gguf_get_data_offset.restype = ctypes.c_size_t
    lib.gguf_get_data_offset.argtypes = [ctypes.c_void_p]
    lib.gguf_get_alignment.restype = ctypes.c_size_t
    lib.gguf_get_alignment.argtypes = [ctypes.c_void_p]
    r = {"ok": True, "version": lib.gguf_get_version(ctx), "n_kv": lib.gguf_get_n_kv(ctx),
         "n_tensors": lib.gguf_get_n_tensors(ctx), "data_offset": lib.gguf_get_data_offset(ctx),
         "alignment": lib.gguf_get_alignment(ctx)}
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    lib.gguf_free(ctx)
    return r


def stderr_of_gguf_init(path: Path) -> str:
    """Run gguf_init_from_file in a child to capture llama.cpp's error text."""
    code = ("import sys; sys.path.insert(0, %r); import make_gguf_fixtures as m; "
            "print(m.ggml_gguf_init(m.Path(%r)))") % (str(Path(__file__).parent), str(path))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return "\n".join(l for l in p.stderr.splitlines() if "gguf" in l.lower())


def example_tensors(rng) -> list[tuple[str, np.ndarray, T | None, str]]:
    """(name, array to hand to add_tensor, raw_dtype, description)."""
    out = []
    w2 = rng.normal(0, 0.5, (3, 64)).astype(np.float32)
    out.append(("f32_2d", w2, None, "F32 numpy (3, 64) -> GGUF dims [64, 3]"))
    out.append(("f16_3d", rng.normal(0, 1, (2, 3, 8)).astype(np.float16), None, "F16 3-D numpy (2, 3, 8)"))
    out.append(("f64_1d", np.array([1.0, -2.5, 1e300, np.pi], np.float64), None, "F64"))
    out.append(("i8_1d", np.array([-128, -1, 0, 127, 5], np.int8), None, "I8, 5 bytes: next tensor shows the padding"))
    out.append(("i16_2d", np.arange(-6, 6, dtype=np.int16).reshape(3, 4), None, "I16"))
    out.append(("i32_1d", np.array([-2**31, 0, 2**31 - 1], np.int32), None, "I32"))
    out.append(("i64_1d", np.array([-2**63, 7, 2**63 - 1], np.int64), None, "I64"))
    bf = gguf.quants.quantize(rng.normal(0, 1, (4, 16)).astype(np.float32), T.BF16)
    out.append(("bf16_2d", bf, T.BF16, "BF16 via gguf.quants.quantize (uint8 view (4, 32) -> dims [16, 4])"))
    q8 = gguf.quants.quantize(rng.normal(0, 0.1, (2, 3, 64)).astype(np.float32), T.Q8_0)
    out.append(("q8_0_3d", q8, T.Q8_0, "Q8_0 3-D: numpy (2, 3, 64) f32 -> bytes (2, 3, 68); GGUF dims [64, 3, 2]"))
    q4 = gguf.quants.quantize(rng.normal(0, 0.1, (4, 64)).astype(np.float32), T.Q4_0)
    out.append(("q4_0_2d", q4, T.Q4_0, "Q4_0 2-D"))
    # Q4_K / Q6_K blocks from llama.cpp's quantizer (gguf-py cannot quantize K types)
    try:
        g = Ggml()
        k = np.frombuffer(g.quantize(int(T.Q4_K), rng.normal(0, 0.1, (2, 256)).astype(np.float32)), np.uint8)
        out.append(("q4_k_2d", k.reshape(2, 144), T.Q4_K, "Q4_K 2-D (2, 256), blocks by llama.cpp ggml_quantize_chunk"))
        k6 = np.frombuffer(g.quantize(int(T.Q6_K), rng.normal(0, 0.1, (2, 256)).astype(np.float32)), np.uint8)
        out.append(("q6_k_3d", k6.reshape(1, 2, 210), T.Q6_K, "Q6_K 3-D (1, 2, 256)"))
    except Exception as ex:  # noqa
        print("no llama.cpp for K blocks:", ex)
    out.append(("f32_scalar_like", np.array([42.0], np.float32), None, "1-element F32 1-D"))
    return out


def write_gguf(path: Path, arch: str, kvs, tensors, alignment=None, endianess=gguf.GGUFEndian.LITTLE):
    w = gguf.GGUFWriter(path, arch, endianess=endianess)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for fn in kvs:
        fn(w)
    for name, arr, raw, _ in tensors:
        w.add_tensor(name, arr, raw_dtype=raw)  # a BIG writer byteswaps (a no-op for uint8 blocks)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def all_kv(nested: bool):
    def f(w: gguf.GGUFWriter):
        w.add_uint8("test.u8", 255)
        w.add_int8("test.i8", -128)
        w.add_uint16("test.u16", 65535)
        w.add_int16("test.i16", -32768)
        w.add_uint32("test.u32", 4294967295)
        w.add_int32("test.i32", -2147483648)
        w.add_uint64("test.u64", 18446744073709551615)
        w.add_int64("test.i64", -9223372036854775808)
        w.add_float32("test.f32", 3.1415927)
        w.add_float32("test.f32_neg_zero", -0.0)
        w.add_float32("test.f32_inf", float("inf"))
        w.add_float64("test.f64", 1e300)
        w.add_float64("test.f64_third", 1.0 / 3.0)
        w.add_bool("test.bool_true", True)
        w.add_bool("test.bool_false", False)
        w.add_string("test.string", "hello GGUF")
        w.add_string("test.string_utf8", "naïve 日本語 🦙")
        # add_string("") silently writes nothing; add_key_value writes an empty string
        w.add_key_value("test.string_empty", "", VT.STRING)
        w.add_array("test.arr_i32_default", [1, -2, 3])          # ints default to INT32
        w.add_array("test.arr_f32_default", [0.5, -1.25])         # floats default to FLOAT32
        w.add_array("test.arr_bool", [True, False, True])
        w.add_array("test.arr_str", ["a", "", "ünï", "with space"])
        for vt, vals in [(VT.UINT8, [0, 255]), (VT.INT8, [-128, 127]), (VT.UINT16, [0, 65535]),
                         (VT.INT16, [-32768, 32767]), (VT.UINT32, [0, 4294967295]),
                         (VT.UINT64, [0, 18446744073709551615]), (VT.INT64, [-9223372036854775808, 1]),
                         (VT.FLOAT64, [1.5, -1e-300])]:
            w.add_key_value(f"test.arr_{vt.name.lower()}", vals, VT.ARRAY, sub_type=vt)
        if nested:
            w.add_array("test.arr_of_arr_i32", [[1, 2], [3], [4, 5, 6]])
            w.add_array("test.arr_of_arr_str", [["x", "y"], ["z"]])
            w.add_array("test.arr_of_arr_of_arr", [[[1], [2, 3]], [[4]]])
        w.add_name("gguf fixture")
        w.add_file_type(0)
    return f


def step_files() -> None:
    fdir = OUT / "files"
    fdir.mkdir(parents=True, exist_ok=True)
    files = {}

    def record(name, path, how, notes=None):
        d = parse_gguf(path)
        d.update({"file": rel(path), "how": how})
        # cross-check with gguf-py's own reader
        try:
            r = gguf.GGUFReader(path)
            d["gguf_py_reader"] = {"ok": True, "n_tensors": len(r.tensors), "n_kv": len(r.fields),
                                   "tensors_match": [
                                       (t.name, [int(x) for x in t.shape], t.tensor_type.name, int(t.data_offset))
                                       == (ti["name"], ti["dims"], ti["ggml_type"], ti["absolute_offset"])
                                       for t, ti in zip(r.tensors, d["tensors"])]}
        except Exception as ex:  # noqa
            d["gguf_py_reader"] = {"ok": False, "error": f"{type(ex).__name__}: {ex}"}
        d["llama_cpp_gguf_init_from_file"] = ggml_gguf_init(path)
        if not d["llama_cpp_gguf_init_from_file"].get("ok", True):
            d["llama_cpp_gguf_init_from_file"]["stderr"] = stderr_of_gguf_init(path)
        if notes:
            d["notes"] = notes
        files[name] = d
        print(name, d["size"], d["llama_cpp_gguf_init_from_file"])

    rng = np.random.default_rng(3)
    tensors = example_tensors(rng)
    descr = {n: dsc for n, _, _, dsc in tensors}

    p = fdir / "all_kv_types_align64_v3.gguf"
    write_gguf(p, "tensorfile_test", [all_kv(nested=True)], tensors, alignment=64)
    record("all_kv_types_align64_v3", p, "GGUFWriter: every value type incl. arrays of arrays, "
           "add_custom_alignment(64), tensors of several ggml types (2-D, 3-D)",
           ["arrays of arrays are valid GGUF per the spec and gguf-py reads them, but llama.cpp's "
            "gguf_init_from_file refuses any array whose element type is ARRAY"])
    p = fdir / "tensors_v3.gguf"
    write_gguf(p, "tensorfile_test", [all_kv(nested=False)], tensors)
    record("tensors_v3", p, "GGUFWriter: the same without nested arrays, default alignment (32)")
    # v2: identical little-endian layout; only the version field differs
    b = bytearray(p.read_bytes())
    assert struct.unpack_from("<I", b, 4)[0] == 3
    struct.pack_into("<I", b, 4, 2)
    p2 = fdir / "tensors_v2.gguf"
    p2.write_bytes(bytes(b))
    record("tensors_v2", p2, "tensors_v3.gguf with the version field (bytes 4..8) set to 2 by hand",
           ["GGUF v2 -> v3 only added big-endian files (ggml docs/gguf.md 'Version History'); a "
            "little-endian v2 file has the v3 layout byte for byte (v1 had uint32 counts/lengths)"])
    pb = fdir / "big_endian_v3.gguf"
    be_tensors = [t for t in tensors if t[0] in ("f32_2d", "f16_3d", "i32_1d", "q8_0_3d")]
    write_gguf(pb, "tensorfile_test", [all_kv(nested=False)], be_tensors, endianess=gguf.GGUFEndian.BIG)
    record("big_endian_v3", pb, "GGUFWriter(endianess=GGUFEndian.BIG)",
           ["magic stays the bytes 'GGUF'; version, counts, lengths, KV values, dims, types, offsets and "
            "F32/F16/I32 tensor data are big-endian; the Q8_0 blocks are written as given (uint8: "
            "numpy byteswap is a no-op), so their f16 scales stay little-endian"])
    pn = fdir / "no_tensors_v3.gguf"
    write_gguf(pn, "tensorfile_test", [lambda w: w.add_uint32("test.only", 1)], [])
    record("no_tensors_v3", pn, "GGUFWriter with KVs and no tensors")
    for name in files:
        for ti in files[name]["tensors"]:
            ti["description"] = descr.get(ti["name"])
    save_manifest("files", files)


# --------------------------------------------------------------------------
# 4: a tiny random Llama, llama.cpp's converter, logits
# --------------------------------------------------------------------------

PROMPT_IDS = [0, 17, 42, 99, 150, 7, 280, 33, 64, 5, 199, 260, 1, 123, 298, 2]
SAMPLE_TEXT = "the quick llama reads 42 tensors, then the small model writes them."


def tokenizer_corpus() -> list[str]:
    rng = np.random.default_rng(11)
    words = ("the a small quick brown llama model reads writes tensor tensors file files byte bytes "
             "weight weights layer layers head heads token tokens then and of to in is was safe "
             "numpy gguf quant block scale zero one two three 42 7 2026").split()
    lines = []
    for _ in range(2000):
        n = int(rng.integers(4, 12))
        w = [words[int(i)] for i in rng.integers(0, len(words), n)]
        lines.append(" ".join(w) + rng.choice([".", ",", "!", "?", ""]))
    return lines


def train_tokenizer(d: Path, extra_special: tuple[str, ...] = ()) -> dict:
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, processors
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>", *extra_special],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "pad_token": "<pad>", "model_max_length": 128, "clean_up_tokenization_spaces": False,
    }, indent=1) + "\n")
    j = json.loads((d / "tokenizer.json").read_text())
    return {"vocab_size": tok.get_vocab_size(), "n_merges": len(j["model"]["merges"]),
            "special_tokens": {"<s>": tok.token_to_id("<s>"), "</s>": tok.token_to_id("</s>"),
                               "<pad>": tok.token_to_id("<pad>")},
            "how": "tokenizers BpeTrainer(vocab_size=300), ByteLevel pre-tokenizer (GPT-2 regex), "
                   "trained on 2000 generated lines (seed 11)"}


def tools(*args, py: str | None = None) -> dict:
    env = dict(os.environ)
    shim = Path("/work/src/gguf-shim")
    if args[0] in ("load-gguf", "gguf-logits"):
        env["PYTHONPATH"] = str(shim)   # gguf (PyPI) for transformers, without touching the tools venv
    p = subprocess.run([py or TOOLS_PY, str(Path(__file__).parent / "gguf_fixture_hf.py"), *map(str, args)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{p.stderr[-4000:]}")
    return {"result": json.loads(p.stdout.strip().splitlines()[-1]), "stderr": p.stderr}


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """The converter's LlamaModel.permute (conversion/llama.py), restated."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_arrays(path: Path) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        raw = np.asarray(t.data)
        dims = [int(x) for x in t.shape]
        if t.tensor_type == T.F32:
            a = raw.astype(np.float32).reshape(dims[::-1])
        else:
            a = gguf.quants.dequantize(raw.view(np.uint8).reshape(-1), t.tensor_type).reshape(dims[::-1])
        out[t.name] = (t.tensor_type.name, a, dims)
    return out


def llama_cpp_logits(path: Path, ids, kv_f32: bool = False) -> np.ndarray:
    import llama_cpp
    kw = {"type_k": int(T.F32), "type_v": int(T.F32)} if kv_f32 else {}
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, logits_all=True,
                          n_threads=2, verbose=False, seed=0, **kw)
    llm.eval(ids)
    sc = np.array(llm.scores[:len(ids)], dtype=np.float32)
    toks = llm.tokenize(SAMPLE_TEXT.encode(), add_bos=False, special=False)
    llm.close()
    return sc, toks


def step_model() -> None:
    mdir = OUT / "model"
    hf = mdir / "hf_llama_tiny"
    hf.mkdir(parents=True, exist_ok=True)
    res = {"prompt_ids": PROMPT_IDS}
    res["tokenizer"] = train_tokenizer(hf)
    r = tools("make-model", hf)
    res["hf"] = {"dir": rel(hf), "config": json.loads((hf / "config.json").read_text()),
                 "written_by": f"transformers {r['result']['versions']['transformers']} save_pretrained "
                               f"(torch {r['result']['versions']['torch']}), seed 20260301, all weights "
                               "N(0, 0.08), norms 1 + N(0, 0.1)",
                 "files": {f.name: {"size": f.stat().st_size, "sha256": sha256(f.read_bytes())}
                           for f in sorted(hf.iterdir())}}
    from safetensors.numpy import load_file
    orig = load_file(str(hf / "model.safetensors"))
    cfg = res["hf"]["config"]

    ggufs = {}
    for outtype in ("f32", "f16", "q8_0"):
        out = mdir / f"llama_tiny-{outtype.upper()}.gguf"
        r = tools("convert", hf, out, outtype)
        ggufs[outtype.upper()] = out
        res.setdefault("convert", {})[outtype] = {
            "file": rel(out), "size": out.stat().st_size, "sha256": sha256(out.read_bytes()),
            "command": f"convert_hf_to_gguf.py {rel(hf)} --outfile {out.name} --outtype {outtype}",
            "pre_tokenizer": r["result"]["pre_tokenizer"], "gguf_py_used": r["result"]["gguf_py_used"],
            "converter_log": [l for l in r["stderr"].splitlines() if "-->" in l or "WARNING" in l.upper()][:80],
        }
    # Q4_K_M with llama.cpp's quantizer (no importance matrix) from the F32 file
    import llama_cpp
    for label, ft, pure in (("Q4_K_M", llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, False),
                            ("Q4_K_M_pure", llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, True)):
        out = mdir / f"llama_tiny-{label}.gguf"
        rc = llama_quantize(ggufs["F32"], out, ft, pure)
        assert rc == 0, rc
        ggufs[label] = out
        res.setdefault("quantize", {})[label] = {
            "file": rel(out), "size": out.stat().st_size, "sha256": sha256(out.read_bytes()),
            "how": f"llama_model_quantize(F32 gguf, ftype={ftype_name(ft)}, pure={pure}, no imatrix)",
            "tensor_types": {t.name: t.tensor_type.name for t in gguf.GGUFReader(out).tensors}}

    # every GGUF: header, KVs (tokens/merges in full for F32 only), tensors
    for label, path in ggufs.items():
        d = parse_gguf(path)
        if label != "F32":
            f32kv = {kv["key"]: kv for kv in res["gguf"]["F32"]["kv"]}
            d["kv_differing_from_F32"] = [kv for kv in d["kv"] if f32kv.get(kv["key"]) != kv]
            d["kv_keys"] = [kv["key"] for kv in d["kv"]]
            del d["kv"]
        res.setdefault("gguf", {})[label] = d

    # name mapping and permutation, found from the data
    g32 = gguf_arrays(ggufs["F32"])
    mapping = {}
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    for hn, ha in orig.items():
        found = None
        for gn, (gt, ga, dims) in g32.items():
            if ga.shape != ha.shape:
                continue
            if np.array_equal(ga, ha):
                found = {"gguf": gn, "transform": "none", "dims": dims}
            elif hn.endswith("q_proj.weight") and np.array_equal(ga, permute_qk(ha, n_head)):
                found = {"gguf": gn, "transform": f"permute(n_head={n_head})", "dims": dims}
            elif hn.endswith("k_proj.weight") and np.array_equal(ga, permute_qk(ha, n_kv)):
                found = {"gguf": gn, "transform": f"permute(n_head={n_kv}) (k uses n_head_kv)", "dims": dims}
            if found:
                break
        mapping[hn] = found
    res["name_mapping"] = mapping
    res["unmapped_gguf_tensors"] = sorted(set(g32) - {m["gguf"] for m in mapping.values() if m})

    # logits
    ldir = mdir / "logits"
    ldir.mkdir(exist_ok=True)
    res["logits"] = {"prompt_ids": PROMPT_IDS, "shape": [len(PROMPT_IDS), cfg["vocab_size"]],
                     "format": "raw little-endian f32, row-major [n_tokens, vocab]"}
    runs = [("F32", "F32", False), ("F32_kv_f32", "F32", True), ("F16", "F16", False),
            ("Q8_0", "Q8_0", False), ("Q4_K_M", "Q4_K_M", False)]
    for label, g, kv_f32 in runs:
        sc, toks = llama_cpp_logits(ggufs[g], PROMPT_IDS, kv_f32)
        f = ldir / f"llama_cpp-{label}.f32"
        f.write_bytes(sc.astype("<f4").tobytes())
        res["logits"][f"llama_cpp_{label}"] = {
            "file": rel(f), "sha256": sha256(f.read_bytes()), "gguf": rel(ggufs[g]),
            "how": "llama_cpp.Llama(model_path, n_ctx=64, logits_all=True, n_threads=2"
                   + (", type_k=F32, type_v=F32" if kv_f32 else "; default F16 KV cache") + ").eval(ids); .scores"}
        res.setdefault("llama_cpp_tokenize", {})[label] = toks
    r = tools("logits", hf, json.dumps(PROMPT_IDS))
    hl = np.frombuffer(bytes.fromhex(r["result"]["logits"]), "<f4").reshape(len(PROMPT_IDS), -1)
    f = ldir / "transformers.f32"
    f.write_bytes(hl.astype("<f4").tobytes())
    res["logits"]["transformers"] = {"file": rel(f), "sha256": sha256(f.read_bytes()),
                                     "how": "LlamaForCausalLM.from_pretrained(hf dir, float32)(ids).logits"}
    cmp = {}
    for label, _, _ in runs:
        a = np.frombuffer((OUT / res["logits"][f"llama_cpp_{label}"]["file"]).read_bytes(), "<f4").reshape(hl.shape)
        cmp[label] = {"max_abs_diff_vs_transformers": float(np.abs(a - hl).max()),
                      "argmax_equal_all_positions": bool((a.argmax(1) == hl.argmax(1)).all())}
    res["logits"]["comparison"] = cmp
    res["logits"]["logit_range_transformers"] = [float(hl.min()), float(hl.max())]
    res["hf_tokenize"] = tools("tokenize", hf, SAMPLE_TEXT)["result"]
    res["sample_text"] = SAMPLE_TEXT
    # transformers reading the F32 GGUF
    try:
        res["transformers_gguf_file"] = tools("load-gguf", hf, ggufs["F32"])["result"]
    except Exception as ex:  # noqa
        res["transformers_gguf_file"] = {"ok": False, "error": str(ex)[-2000:]}
    save_manifest("model", res)
    print(json.dumps({k: res[k] for k in ("name_mapping", "unmapped_gguf_tensors")}, indent=1))
    print(json.dumps(res["logits"]["comparison"], indent=1))


def step_model_wide() -> None:
    """A 256-wide one-layer variant whose Q4_K_M file really holds K blocks.
    Only the Q4_K_M GGUF and the logits are kept (the HF and F32 files are
    regenerated in a temporary folder: about 2 MB)."""
    import tempfile
    import llama_cpp
    mdir = OUT / "model"
    ldir = mdir / "logits"
    ldir.mkdir(parents=True, exist_ok=True)
    res = {"prompt_ids": PROMPT_IDS}
    with tempfile.TemporaryDirectory() as td:
        hf = Path(td) / "hf_llama_wide256"
        hf.mkdir()
        train_tokenizer(hf)
        tools("make-model", hf, "wide")
        res["hf_config"] = json.loads((hf / "config.json").read_text())
        res["hf_files_sha256"] = {f.name: sha256(f.read_bytes()) for f in sorted(hf.iterdir())}
        f32 = Path(td) / "llama_wide256-F32.gguf"
        tools("convert", hf, f32, "f32")
        res["f32_gguf_sha256_not_kept"] = sha256(f32.read_bytes())
        out = mdir / "llama_wide256-Q4_K_M.gguf"
        assert llama_quantize(f32, out, llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, False) == 0
        res["file"] = rel(out)
        res["size"] = out.stat().st_size
        res["sha256"] = sha256(out.read_bytes())
        res["how"] = ("tokenizer as model/hf_llama_tiny, transformers LlamaForCausalLM (hidden 256, ffn 256, 1 layer, "
                      "4 heads, 2 KV heads, vocab 300, same seed and init), convert_hf_to_gguf --outtype f32, "
                      "llama_model_quantize MOSTLY_Q4_K_M without imatrix")
        d = parse_gguf(out)
        d["kv"] = [kv for kv in d["kv"] if not kv["key"].startswith("tokenizer.ggml.")] + \
            [{"key": kv["key"], "type": kv["type"], "note": "as in model/llama_tiny-F32.gguf"}
             for kv in d["kv"] if kv["key"].startswith("tokenizer.ggml.")]
        res["gguf"] = d
        runs = [("wide256-F32_kv_f32", f32, True), ("wide256-Q4_K_M", out, False),
                ("wide256-Q4_K_M_kv_f32", out, True)]
        hl = np.frombuffer(bytes.fromhex(tools("logits", hf, json.dumps(PROMPT_IDS))["result"]["logits"]), "<f4")
        hl = hl.reshape(len(PROMPT_IDS), -1)
        f = ldir / "transformers-wide256.f32"
        f.write_bytes(hl.tobytes())
        res["logits"] = {"transformers": {"file": rel(f), "sha256": sha256(f.read_bytes())}}
        for label, path, kv in runs:
            sc, _ = llama_cpp_logits(path, PROMPT_IDS, kv)
            e = {"max_abs_diff_vs_transformers": float(np.abs(sc - hl).max()),
                 "argmax_equal_positions": int((sc.argmax(1) == hl.argmax(1)).sum())}
            if path == out:
                f = ldir / f"llama_cpp-{label}.f32"
                f.write_bytes(sc.astype("<f4").tobytes())
                e.update({"file": rel(f), "sha256": sha256(f.read_bytes())})
            res["logits"][f"llama_cpp_{label}"] = e
    # transformers on the Q4_K_M file itself: the same (dequantized) weights as llama.cpp
    r = tools("gguf-logits", out, json.dumps(PROMPT_IDS))
    gl = np.frombuffer(bytes.fromhex(r["result"]["logits"]), "<f4").reshape(len(PROMPT_IDS), -1)
    f = ldir / "transformers_from_gguf-wide256-Q4_K_M.f32"
    f.write_bytes(gl.tobytes())
    lq = np.frombuffer((OUT / res["logits"]["llama_cpp_wide256-Q4_K_M_kv_f32"]["file"]).read_bytes(), "<f4").reshape(gl.shape)
    res["logits"]["transformers_from_gguf_Q4_K_M"] = {
        "file": rel(f), "sha256": sha256(f.read_bytes()),
        "how": "AutoModelForCausalLM.from_pretrained(model/, gguf_file=llama_wide256-Q4_K_M.gguf) (gguf-py dequantizes)",
        "max_abs_diff_vs_llama_cpp_Q4_K_M_kv_f32": float(np.abs(gl - lq).max()),
        "argmax_equal_positions_vs_llama_cpp": int((gl.argmax(1) == lq.argmax(1)).sum())}
    res["logits"]["logit_range_transformers"] = [float(hl.min()), float(hl.max())]
    save_manifest("model_wide", res)
    print(json.dumps(res["logits"], indent=1))
    print({t["name"]: t["ggml_type"] for t in res["gguf"]["tensors"]})


TF5_PY = os.environ.get("TF5_PY", "/work/venvs/tf5/bin/python")
TF5_OUTTYPES = ("f32", "f16", "bf16", "q8_0")


def step_tf5() -> None:
    """transformers 5 directories (rope_parameters, no top-level rope_theta) and
    the sha256 of what convert_hf_to_gguf.py makes of them. The GGUF files are
    not kept (the tests compare our bytes with these digests); set
    TF5_KEEP=DIR to keep them there for a look."""
    import shutil
    import tempfile
    keep = os.environ.get("TF5_KEEP")
    res = {}
    for variant in ("tf5-llama3", "tf5-qwen2"):
        hf = OUT / "tf5" / f"hf_{variant.removeprefix('tf5-')}_tf5"
        if hf.exists():
            shutil.rmtree(hf)
        hf.mkdir(parents=True)
        # transformers 5's Qwen2Tokenizer adds <|endoftext|> when the vocabulary lacks it
        train_tokenizer(hf, ("<|endoftext|>",) if variant == "tf5-qwen2" else ())
        r = tools("make-model", hf, variant, py=TF5_PY)
        e = {"dir": rel(hf), "config": json.loads((hf / "config.json").read_text()),
             "written_by": f"transformers {r['result']['versions']['transformers']} save_pretrained "
                           f"(torch {r['result']['versions']['torch']}), variant {variant} of "
                           "scripts/gguf_fixture_hf.py, seed 20260301; tokenizer as model/hf_llama_tiny",
             "files": {f.name: {"size": f.stat().st_size, "sha256": sha256(f.read_bytes())}
                       for f in sorted(hf.iterdir())},
             "convert": {}}
        with tempfile.TemporaryDirectory() as td:
            for outtype in TF5_OUTTYPES:
                out = Path(td) / f"{hf.name}-{outtype.upper()}.gguf"
                r = tools("convert", hf, out, outtype, py=TF5_PY)
                d = parse_gguf(out)
                e["convert"][outtype] = {
                    "size": out.stat().st_size, "sha256": sha256(out.read_bytes()),
                    "command": f"convert_hf_to_gguf.py {rel(hf)} --outtype {outtype} (under {TF5_PY})",
                    "pre_tokenizer": r["result"]["pre_tokenizer"],
                    "kv_keys": [kv["key"] for kv in d["kv"]],
                    "tensors": {t["name"]: t["ggml_type"] for t in d["tensors"]},
                }
                if keep:
                    Path(keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(out, Path(keep) / out.name)
        res[variant] = e
    save_manifest("tf5", res)
    print(json.dumps({v: {t: c["sha256"] for t, c in e["convert"].items()} for v, e in res.items()}, indent=1))


def step_raw() -> None:
    """A GGUFWriter file of an architecture this library does not map, with
    F32, F16, Q8_0 and Q4_K tensors and a few metadata kinds; gguf-py's
    dequantized values recorded as sha256 of their little-endian f32 bytes."""
    rng = np.random.default_rng(36)
    path = OUT / "files" / "unmapped_arch_v3.gguf"
    w = gguf.GGUFWriter(str(path), "mamba9")
    w.add_name("unmapped tensors")
    w.add_uint32("mamba9.block_count", 2)
    w.add_float32("mamba9.rope.freq_base", 12345.5)
    w.add_bool("mamba9.use_thing", True)
    w.add_int64("mamba9.big", -(1 << 40))
    w.add_array("mamba9.small_list", [1, 2, 3])
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(2000)])  # longer than MAX_ARRAY
    tensors = {}
    for name, shape, t in (("blk.0.mix.weight", (4, 64), T.F32), ("blk.0.conv.bias", (64,), T.F32),
                           ("blk.0.in.weight", (3, 64), T.F16), ("blk.0.out.weight", (4, 64), T.Q8_0),
                           ("blk.1.out.weight", (2, 256), T.Q4_K), ("empty.weight", (0, 32), T.F32),
                           ("scalar_ish", (1,), T.F32)):
        x = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        if t == T.F32:
            raw = x
        elif t == T.F16:
            raw = x.astype(np.float16)
        elif t == T.Q8_0:
            raw = gguf.quants.quantize(x, t)
        else:
            # random Q4_K blocks with sane f16 scales (as the dequant vectors)
            bs, ts = GGML_QUANT_SIZES[t]
            blocks = rng.integers(0, 256, size=(x.size // bs, ts), dtype=np.uint8)
            raw = sanitize_scales(t.name, blocks, rng).reshape(shape[0], -1)
        w.add_tensor(name, raw, raw_dtype=t)
        tensors[name] = t
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = gguf.GGUFReader(path)
    dec = {}
    for t in r.tensors:
        raw = np.asarray(t.data)
        shape = [int(x) for x in t.shape][::-1]
        if t.tensor_type in (T.F32, T.F16):
            a = raw.astype(np.float32).reshape(shape)
        else:
            a = gguf.quants.dequantize(raw.view(np.uint8).reshape(-1), t.tensor_type).reshape(shape)
        dec[t.name] = {"ggml_type": t.tensor_type.name, "shape": shape,
                       "f32_sha256": sha256(np.ascontiguousarray(a, "<f4").tobytes()),
                       "first": [float(v) for v in a.reshape(-1)[:4]]}
    save_manifest("raw", {"file": rel(path), "size": path.stat().st_size,
                          "sha256": sha256(path.read_bytes()),
                          "how": "gguf.GGUFWriter, architecture mamba9 (not mapped here); values seeded 36; "
                                 "Q8_0 by gguf-py, Q4_K random blocks with sane scales",
                          "decoded_by_gguf_py": dec})
    print(json.dumps(dec, indent=1))


def main():
    steps = sys.argv[1:] or ["all"]
    if "all" in steps:
        steps = ["quants", "kquant_model", "files", "model", "model_wide", "tf5", "raw"]
    for s in steps:
        if s == "quants":
            step_quants(Ggml())
        elif s == "kquant_model":
            step_kquant_model(Ggml())
        elif s == "files":
            step_files()
        elif s == "model":
            step_model()
        elif s == "model_wide":
            step_model_wide()
        elif s == "tf5":
            step_tf5()
        elif s == "raw":
            step_raw()
        else:
            raise SystemExit(f"unknown step {s}")


if __name__ == "__main__":
    main()
