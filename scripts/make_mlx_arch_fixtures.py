#!/usr/bin/env python3
"""Make tests/fixtures/real/mlx_lm_arch/: mlx-lm's own 4-bit conversion of
each tiny Hugging Face directory of tests/fixtures/real/hf/ that mlx-lm
converts, so that `tensorfile check` is tested on the names and shapes
mlx-lm really writes for every architecture it knows (experts stacked
under switch_mlp, GPT-2 under "model." with [out, in] weights, fused
Phi-3 projections, quantized routers), with a manifest.json.

Not run by CI. Run by hand, from the repository root, with the `tools` venv
(mlx-lm 0.29, transformers 4.57; see scripts/make_real_fixtures.py):

    /work/venvs/tools/bin/python scripts/make_mlx_arch_fixtures.py

Sources are the committed tests/fixtures/real/hf/<arch>/ directories plus a
tokenizer trained locally (mlx_lm.convert needs one). GPT-2 needs two
changes mlx-lm 0.29 requires and the Hugging Face Hub's GPT-2 checkpoints
have: "n_ctx" in config.json and tensor names without "transformer." (its
sanitize does not strip the prefix transformers 4.57 writes); that source
is kept as gpt2_unprefixed/. Only config.json and the weights (with
mlx-lm's index) are kept. The folder is deleted and rewritten whole.
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_real_fixtures import (OUT, capture, describe_dir, mx_hex, train_tokenizer,  # noqa: E402
                                versions, write_json)

ARCHS = ["mistral", "qwen2", "qwen3", "gemma", "phi3", "qwen2_moe", "qwen3_moe", "gpt2"]
KEEP = ["config.json", "model.safetensors", "model.safetensors.index.json"]
QUANT = {"quantize": True, "q_group_size": 32, "q_bits": 4}


def gpt2_source(src, dst):
    """The Hub's GPT-2 layout: n_ctx in the config, names without "transformer."."""
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["n_ctx"] = cfg["n_positions"]
    (dst / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    sd = load_file(str(dst / "model.safetensors"))
    save_file({k.removeprefix("transformer."): v for k, v in sd.items()}, str(dst / "model.safetensors"),
              metadata={"format": "pt"})


def main():
    import mlx.core as mx
    import mlx_lm
    from mlx_lm import convert
    out = OUT / "mlx_lm_arch"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tmp = Path(tempfile.mkdtemp())
    tok = train_tokenizer()
    dirs = {}
    for arch in ARCHS:
        src = tmp / arch
        if arch == "gpt2":
            gpt2_source(OUT / "hf" / arch, src)
            kept = out / "gpt2_unprefixed"
            kept.mkdir()
            for name in ["config.json", "model.safetensors"]:
                shutil.copy(src / name, kept / name)
            dirs["gpt2_unprefixed"] = dict(describe_dir(kept), source="hf/gpt2", change=(
                "config.json gains n_ctx = n_positions; tensors renamed without the \"transformer.\" prefix "
                "(safetensors.torch.save_file, metadata format=pt), as the Hub's GPT-2 checkpoints are"))
        else:
            shutil.copytree(OUT / "hf" / arch, src)
        tok.save_pretrained(str(src))
        conv = tmp / f"{arch}_q4"
        with capture() as r:
            convert(str(src), str(conv), **QUANT)
        d = out / f"{arch}_q4"
        d.mkdir()
        for name in KEEP:
            shutil.copy(conv / name, d / name)
        rec = describe_dir(d)
        rec["config_quantization"] = json.loads((d / "config.json").read_text()).get("quantization")
        model, _ = mlx_lm.load(str(conv))
        logits = model(mx.array([[1, 2, 3, 4, 5]]))
        mx.eval(logits)
        rec.update(source=f"hf/{arch}" + (" as gpt2_unprefixed" if arch == "gpt2" else ""),
                   mlx_lm_call=f"mlx_lm.convert(hf_path, mlx_path, **{QUANT})",
                   convert_stdout=r["stdout"], mlx_lm_load="ok",
                   logits={k: v for k, v in mx_hex(logits).items() if k != "f32_hex"})
        dirs[f"{arch}_q4"] = rec
    shutil.rmtree(tmp)
    write_json(out / "manifest.json", {
        "about": "mlx-lm 4-bit (affine, groups of 32) conversions of the tiny BF16 directories of ../hf/, "
                 "as mlx_lm.convert writes them (config.json and the weights with mlx-lm's index kept; "
                 "tokenizer files dropped). Per directory: the files as a reader sees them, the config's "
                 "quantization block, and mlx_lm.load's logits on token ids [1,2,3,4,5] (loading "
                 "succeeded for each). gpt2_unprefixed is the GPT-2 source mlx-lm 0.29 can convert.",
        "versions": versions(),
        "made_by": "scripts/make_mlx_arch_fixtures.py",
        "dirs": dirs})


if __name__ == "__main__":
    main()
