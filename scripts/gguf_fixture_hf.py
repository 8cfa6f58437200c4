#!/usr/bin/env python3
"""The torch/transformers half of `make_gguf_fixtures.py model` (run by it, not by hand).

Runs under a venv with torch + transformers (TOOLS_PY, default
/work/venvs/tools/bin/python); prints one JSON object on its last stdout line.

  make-model DIR [wide]          random tiny Llama (seeded) saved by save_pretrained
  make-model DIR tf5-llama3|tf5-qwen2
                                 transformers 5 (TOOLS_PY=/work/venvs/tf5/bin/python):
                                 a 32-wide Llama with rope_parameters of type llama3
                                 (theta 5e5), or a 32-wide Qwen2 (theta 1e6, tied; its
                                 tokenizer has <|endoftext|>)
  convert DIR OUTFILE OUTTYPE    llama.cpp's convert_hf_to_gguf.py (see below)
  logits DIR IDS_JSON            transformers' logits for the token ids
  gguf-logits GGUF IDS_JSON      transformers' logits from from_pretrained(gguf_file=GGUF)
  load-gguf DIR GGUF             transformers' from_pretrained(DIR, gguf_file=GGUF)
  tokenize DIR TEXT              the HF tokenizer's ids for TEXT

convert: the converter refuses a BPE tokenizer whose pre-tokenizer it does not
know (it hashes the ids of a fixed text: conversion/base.py
TextModel.get_vocab_base_pre). Our tokenizer is trained locally, so no hash can
match; we run the converter's own main() with get_vocab_base_pre returning
"gpt-2" when the original raises (our pre-tokenizer is ByteLevel, GPT-2's
regex). Nothing else is changed; the converter code is not copied here.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

LLAMA_CPP_SRC = Path(os.environ.get(
    "LLAMA_CPP_SRC", "/work/src/llama_cpp_python-0.3.36/vendor/llama.cpp"))

CONFIG = dict(
    vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
    bos_token_id=0, eos_token_id=1, hidden_act="silu",
)


# rows of 256: the K-quants apply (the tiny model's rows of 64 make llama.cpp fall back)
CONFIG_WIDE = dict(CONFIG, hidden_size=256, intermediate_size=256, num_hidden_layers=1)


# transformers 5: rope_parameters, no top-level rope_theta; rows of 32 (one Q8_0 block)
CONFIG_TF5 = dict(
    vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1, hidden_act="silu",
)
TF5_VARIANTS = {
    # head_dim 8 at theta 5e5: wavelengths 6.3, 167, 4443, 118k against 2048/8192,
    # so the llama3 factors take all three branches (1, smoothed, factor)
    "tf5-llama3": ("LlamaConfig", "LlamaForCausalLM", dict(
        CONFIG_TF5, tie_word_embeddings=False, max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192})),
    "tf5-qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        CONFIG_TF5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def make_model(d: Path, variant: str = ""):
    import torch
    import transformers
    torch.manual_seed(20260301)
    if variant in TF5_VARIANTS:
        cfg_name, model_name, kw = TF5_VARIANTS[variant]
        cfg = getattr(transformers, cfg_name)(**kw, dtype="float32")
        m = getattr(transformers, model_name)(cfg).eval()
    else:
        cfg = transformers.LlamaConfig(**(CONFIG_WIDE if variant == "wide" else CONFIG),
                                       torch_dtype="float32")
        m = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                # norms away from 1 so a missing or misplaced norm shows in the logits
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    m.save_pretrained(d, safe_serialization=True)
    return {"params": {n: list(p.shape) for n, p in m.state_dict().items()}}


def convert(d: Path, outfile: Path, outtype: str):
    sys.path.insert(0, str(LLAMA_CPP_SRC))
    import convert_hf_to_gguf as conv  # noqa: E402  (llama.cpp's converter, run as is)
    from conversion import base
    orig = base.TextModel.get_vocab_base_pre
    seen = {}

    def get_vocab_base_pre(self, tokenizer):
        try:
            return orig(self, tokenizer)
        except NotImplementedError:
            from hashlib import sha256
            import inspect
            src = inspect.getsource(orig)
            chktxt = src.split("chktxt = ", 1)[1].split("\n", 1)[0]
            seen["chkhsh"] = sha256(str(tokenizer.encode(eval(chktxt))).encode()).hexdigest()
            seen["substituted_pre"] = "gpt-2"
            return "gpt-2"
    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    sys.argv = ["convert_hf_to_gguf.py", str(d), "--outfile", str(outfile), "--outtype", outtype]
    conv.main()
    import gguf as vendored_gguf
    return {"pre_tokenizer": seen, "gguf_py_used": str(Path(vendored_gguf.__file__).parent)}


def logits(d: Path, ids):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = m(torch.tensor([ids])).logits[0]
    return {"logits": out.numpy().astype("<f4").tobytes().hex(), "shape": list(out.shape)}


def gguf_logits(g: Path, ids):
    """transformers on a GGUF (it dequantizes with gguf-py and undoes the q/k permutation)."""
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(g.parent, gguf_file=g.name, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = m(torch.tensor([ids])).logits[0]
    return {"logits": out.numpy().astype("<f4").tobytes().hex(), "shape": list(out.shape)}


def load_gguf(d: Path, g: Path):
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(g.parent, gguf_file=g.name, torch_dtype=torch.float32)
    except Exception as e:  # noqa
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    orig = load_file(str(d / "model.safetensors"))
    sd = m.state_dict()
    res = {"ok": True, "config": {k: v for k, v in m.config.to_dict().items()
                                  if isinstance(v, (int, float, str, bool)) or v is None},
           "tensors": {}}
    for n, t in sd.items():
        e = {"shape": list(t.shape)}
        if n in orig:
            o = orig[n]
            a = t.detach().numpy()
            e["in_original"] = True
            e["equal"] = bool(o.shape == a.shape and (o == a).all())
            if not e["equal"] and o.shape == a.shape:
                e["max_abs_diff"] = float(abs(o - a).max())
        else:
            e["in_original"] = False
        res["tensors"][n] = e
    res["missing_from_gguf_load"] = sorted(set(orig) - set(sd))
    return res


def tokenize(d: Path, text: str):
    from transformers import AutoTokenizer
    t = AutoTokenizer.from_pretrained(d)
    return {"ids": t.encode(text, add_special_tokens=False), "ids_with_special": t.encode(text)}


def main():
    cmd, *a = sys.argv[1:]
    if cmd == "make-model":
        r = make_model(Path(a[0]), a[1] if len(a) > 1 else "")
    elif cmd == "convert":
        r = convert(Path(a[0]), Path(a[1]), a[2])
    elif cmd == "logits":
        r = logits(Path(a[0]), json.loads(a[1]))
    elif cmd == "gguf-logits":
        r = gguf_logits(Path(a[0]), json.loads(a[1]))
    elif cmd == "load-gguf":
        r = load_gguf(Path(a[0]), Path(a[1]))
    elif cmd == "tokenize":
        r = tokenize(Path(a[0]), a[1])
    else:
        raise SystemExit(cmd)
    import transformers, torch
    r["versions"] = {"transformers": transformers.__version__, "torch": torch.__version__}
    print("\n" + json.dumps(r))


if __name__ == "__main__":
    main()
