#!/usr/bin/env python3
"""Generate tests/fixtures/npz/convert/ (run by hand, not in CI): the same
arrays as numpy and safetensors write them, for `tensorfile convert`
between the two.

Environment: /work/venvs/gguf (numpy, ml_dtypes, safetensors; pinned in
scripts/requirements-gguf.txt). Usage: python scripts/make_npz_convert_fixtures.py

- model.safetensors: `safetensors.numpy.save_file` of ARRAYS (no metadata).
- model.npz: `np.savez(path, **arrays)` with the arrays in the order of
  their data in model.safetensors (the order tensorfile writes members).
- model_compressed.npz: `np.savez_compressed` of the same.
- deflate.safetensors / deflate.npz: DEFLATE's arrays (random floats past
  one deflate block, zeros, a ramp, small and empty ones) by save_file and
  `np.savez_compressed` in data order: `convert --compress` of the first
  must be the second byte for byte (zlib's deflate, level 6, raw window
  15, as Python's zipfile calls it).
- weight.safetensors / weight.npy: one array, by save_file and np.save.
- manifest.json: the arrays (dtype, shape, sha256 of their bytes), the
  member order, the files' sha256, the versions.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import safetensors
from safetensors.numpy import save_file

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "npz" / "convert"

rng = np.random.default_rng(21)
ARRAYS = {
    "model.embed_tokens.weight": rng.standard_normal((8, 4)).astype(np.float32),
    "model.norm.weight": rng.standard_normal(4).astype(np.float16),
    "lm_head.weight": rng.standard_normal((8, 4)).astype(np.float32).astype(ml_dtypes.bfloat16),
    "position_ids": np.arange(6, dtype=np.int64),
    "mask": np.array([[True, False], [False, True]]),
    "bytes": np.arange(7, dtype=np.uint8),
    "scale": np.array(0.5, dtype=np.float64),
    "phase": (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64),
    "a/b": np.arange(4, dtype=np.int16).reshape(2, 2),
    "empty": np.zeros((0, 3), dtype=np.float32),
}

# Deflated by `convert --compress`: each deflated member must be zlib's
# bytes. The random floats are more than one block of zlib's symbol
# buffer (16384 at memLevel 8), the zeros and the ramp long matches.
DEFLATE = {
    "random": rng.standard_normal((40, 160)).astype(np.float32),
    "zeros": np.zeros((64, 64), dtype=np.float32),
    "ramp": np.arange(2048, dtype=np.int32),
    "half": rng.standard_normal(1000).astype(np.float16),
    "bf16": rng.standard_normal(300).astype(np.float32).astype(ml_dtypes.bfloat16),
    "mask": rng.standard_normal(100) > 0,
    "one": np.array([7], dtype=np.uint8),
    "empty": np.zeros((0, 5), dtype=np.float64),
}


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def data_order(path: Path) -> list[str]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: (header[k]["data_offsets"][0], k))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    st = OUT / "model.safetensors"
    save_file(ARRAYS, str(st))
    order = data_order(st)
    ordered = {k: ARRAYS[k] for k in order}
    np.savez(OUT / "model.npz", **ordered)
    np.savez_compressed(OUT / "model_compressed.npz", **ordered)
    dst = OUT / "deflate.safetensors"
    save_file(DEFLATE, str(dst))
    np.savez_compressed(OUT / "deflate.npz", **{k: DEFLATE[k] for k in data_order(dst)})
    save_file({"weight": ARRAYS["model.embed_tokens.weight"]}, str(OUT / "weight.safetensors"))
    np.save(OUT / "weight.npy", ARRAYS["model.embed_tokens.weight"])
    manifest = {
        "generator": "scripts/make_npz_convert_fixtures.py",
        "versions": {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
                     "safetensors": safetensors.__version__},
        "member_order": order,
        "deflate_member_order": data_order(dst),
        "arrays": {k: {"dtype": str(v.dtype), "shape": list(v.shape),
                       "sha256": sha(np.ascontiguousarray(v).tobytes())}
                   for k, v in ARRAYS.items()},
        "deflate_arrays": {k: {"dtype": str(v.dtype), "shape": list(v.shape),
                               "sha256": sha(np.ascontiguousarray(v).tobytes())}
                           for k, v in DEFLATE.items()},
        "files": {p.name: sha(p.read_bytes()) for p in sorted(OUT.iterdir())
                  if p.name != "manifest.json"},
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
