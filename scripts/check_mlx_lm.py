#!/usr/bin/env python3
"""mlx-lm loads model directories quantized by `tensorfile quantize`, and
their logits equal those of the same float model quantized by mlx-lm.

Run by hand, in the tools venv (mlx 0.32.4, mlx-lm 0.29.1) and in the tf5
venv (mlx-lm 0.32.2, which adds nvfp4 global scales for expert stacks):

    /work/venvs/tools/bin/python scripts/check_mlx_lm.py [path/to/tensorfile]
    /work/venvs/tf5/bin/python scripts/check_mlx_lm.py [path/to/tensorfile]

For each float model of tests/fixtures/real/mlx_lm (llama_bf16, and
mixtral_bf16 with its 3-D expert stacks) and each scheme:

1. mlx-lm quantizes it: `load`, `quantize_model(model, config, group_size,
   bits, mode)` (with `global_scale=True` where mlx-lm has it), `save`;
2. `tensorfile quantize model.safetensors` with the matching scheme (and
   `--include model.embed_tokens.weight`, which mlx-lm quantizes and the
   default here leaves); its directory gets the float model's config.json
   and tokenizer, with `quantization` (and `quantization_config`, as mlx-lm
   writes) set to the JSON of the file's own `quantization` metadata;
3. both directories are loaded with `mlx_lm.load` and run on token ids
   [1, 2, 3, 4, 5]; the tensors must be byte-identical and the logits
   bit-identical. Where MLX's CPU backend cannot run the model (nvfp4
   global scales: gather_qmm is GPU-only in mlx 0.32), the error is printed
   and only the bytes are compared.

Exits 1 on any difference.
"""

import inspect
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx_lm.utils import load, quantize_model, save

ROOT = Path(__file__).resolve().parent.parent
TF = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "release" / "tensorfile"
MODELS = ROOT / "tests" / "fixtures" / "real" / "mlx_lm"
IDS = [[1, 2, 3, 4, 5]]
GLOBAL = "global_scale" in inspect.signature(quantize_model).parameters
SCHEMES = [("affine", 4, 64), ("affine", 2, 32), ("affine", 3, 64), ("affine", 5, 32),
           ("affine", 6, 64), ("affine", 8, 64), ("mxfp4", 4, 32), ("mxfp8", 8, 32),
           ("nvfp4", 4, 16)]
# Groups of 128 divide only the Llama's down_proj inputs (128); the Mixtral
# has no weight they divide.
EXTRA = {"llama_bf16": [("affine", 8, 128)], "mixtral_bf16": []}
# The recorded logits of mlx-lm's own quantized fixtures (manifest.json).
RECORDED = {("llama_bf16", "affine", 4, 64, False): "llama_q4",
            ("mixtral_bf16", "affine", 4, 64, False): "mixtral_q4",
            ("mixtral_bf16", "nvfp4", 4, 16, False): "mixtral_nvfp4"}
failures = []


def bits_of(a):
    a = np.array(a.astype(mx.float32))
    return a.view(np.uint32)


def logits(d):
    model, _ = load(str(d))
    try:
        out = model(mx.array(IDS))
        mx.eval(out)
        return out, None
    except Exception as e:  # MLX's CPU backend lacks some kernels
        return None, f"{type(e).__name__}: {e}"


def by_mlx_lm(src, dst, mode, bits, gs, global_scale):
    model, tok, config = load(str(src), return_config=True, lazy=True)
    kw = {"global_scale": True} if global_scale else {}
    model, config = quantize_model(model, config, gs, bits, mode=mode, **kw)
    save(str(dst), str(src), model, tok, config)


def by_tensorfile(src, dst, mode, bits, gs, global_scale):
    dst.mkdir()
    flags = ["--scheme", f"mlx-{mode}"]
    if mode == "affine":
        flags += ["--bits", str(bits), "--group-size", str(gs)]
    if global_scale:
        flags.append("--global-scale")
    if 64 % gs == 0:  # mlx-lm quantizes the embedding when its group fits
        flags += ["--include", "model.embed_tokens.weight"]
    r = subprocess.run([str(TF), "quantize", str(src / "model.safetensors"),
                        str(dst / "model.safetensors"), *flags, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    report = json.loads(r.stdout)
    config = json.loads((src / "config.json").read_text())
    quantization = json.loads(report["metadata"]["quantization"])
    config["quantization"] = quantization
    config["quantization_config"] = quantization
    (dst / "config.json").write_text(json.dumps(config, indent=4))
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, dst)
    return report


def check(name, mode, bits, gs, global_scale, tmp):
    src = MODELS / name
    label = f"{name} {mode} {bits}-bit g{gs}{' global scale' if global_scale else ''}"
    a, b = tmp / "mlx_lm", tmp / "tensorfile"
    for d in (a, b):
        shutil.rmtree(d, ignore_errors=True)
    by_mlx_lm(src, a, mode, bits, gs, global_scale)
    try:
        report = by_tensorfile(src, b, mode, bits, gs, global_scale)
    except RuntimeError as e:
        failures.append(f"{label}: tensorfile quantize failed: {e}")
        return
    ta, tb = mx.load(str(a / "model.safetensors")), mx.load(str(b / "model.safetensors"))
    same = sorted(ta) == sorted(tb) and all(
        ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape
        and np.array_equal(np.array(ta[k].view(mx.uint8) if ta[k].dtype != mx.bfloat16 else ta[k].view(mx.uint16)),
                           np.array(tb[k].view(mx.uint8) if tb[k].dtype != mx.bfloat16 else tb[k].view(mx.uint16)))
        for k in ta)
    qa = json.loads((a / "config.json").read_text())["quantization"]
    qb = json.loads((b / "config.json").read_text())["quantization"]
    la, ea = logits(a)
    lb, eb = logits(b)
    if la is not None and lb is not None:
        equal = np.array_equal(bits_of(la), bits_of(lb))
        what = f"logits {'bit-identical' if equal else 'DIFFER'} (shape {list(la.shape)}, first {float(la[0, 0, 0]):.6f})"
        fixture = RECORDED.get((name, mode, bits, gs, global_scale))
        if fixture:
            manifest = json.loads((MODELS / "manifest.json").read_text())
            want = [int(h, 16) for h in manifest["dirs"][fixture]["logits"]["f32_hex"]]
            recorded = list(bits_of(lb).flatten()) == want
            equal &= recorded
            what += f", {'equal to' if recorded else 'NOT'} the logits recorded for {fixture}"
    else:
        equal = ea == eb
        what = f"forward not run on this backend: mlx-lm's dir: {ea}; tensorfile's dir: {eb}"
    print(f"{label}: {len(report['quantized'])} weights quantized; {len(ta)} tensors "
          f"{'byte-identical' if same else 'DIFFER'}; config quantization {'equal' if qa == qb else 'DIFFERS'}; {what}")
    if not (same and equal and qa == qb):
        failures.append(label)


def main():
    if not TF.exists():
        sys.exit(f"{TF} not found (cargo build --release -p tensorfile-cli)")
    print(f"mlx {mx.__version__}, mlx-lm {mlx_lm.__version__}, device {mx.default_device()}")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for name in ["llama_bf16", "mixtral_bf16"]:
            for mode, bits, gs in SCHEMES + EXTRA[name]:
                check(name, mode, bits, gs, False, tmp)
        if GLOBAL:
            check("mixtral_bf16", "nvfp4", 4, 16, True, tmp)
        else:
            print(f"mlx-lm {mlx_lm.__version__} has no global_scale in quantize_model: not checked here")
    print(f"{len(failures)} failures")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
