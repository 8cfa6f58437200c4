#!/usr/bin/env python3
"""Make tests/fixtures/real/: files written by the real tools (transformers,
torch, mlx, mlx-lm, diffusers), with a manifest.json per group.

Not run by CI. Run by hand, from the repository root, with the `tools` venv:

    python3 -m venv /work/venvs/tools
    /work/venvs/tools/bin/pip install -r scripts/requirements-tools.txt
    python3 -m venv /work/venvs/tf5
    /work/venvs/tf5/bin/pip install -r scripts/requirements-tf5.txt
    /work/venvs/tools/bin/python scripts/make_real_fixtures.py all      # or one group

Groups: mlx_quant, checkpoint, tied_bin, sharded, hf, mlx_lm.
The transformers-5 (and mlx-lm 0.32) parts run in a subprocess with the tf5 venv
(TF5_PYTHON, default /work/venvs/tf5/bin/python): this same file, `_tf5 JOB.json`.

Everything is random-initialized from configs made here (seeded), tokenizers are
trained here with `tokenizers`; nothing is downloaded. A group's folder is
deleted and rewritten whole.
"""
import collections
import contextlib
import hashlib
import io
import json
import logging
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "real"
TF5_PY = os.environ.get("TF5_PYTHON", "/work/venvs/tf5/bin/python")
INPUT_IDS = [1, 2, 3, 4, 5]


# ---------------------------------------------------------------- helpers

def sha256(b):
    return hashlib.sha256(b).hexdigest()


def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=1, sort_keys=False, allow_nan=True) + "\n")


def versions():
    out = {"python": sys.version.split()[0]}
    for mod in ["torch", "transformers", "safetensors", "numpy", "mlx", "mlx_lm",
                "diffusers", "tokenizers", "accelerate", "huggingface_hub"]:
        try:
            m = __import__(mod)
            v = getattr(m, "__version__", None)
            if v is None and mod == "mlx":
                import mlx.core as mx
                v = mx.__version__
            out[mod] = v
        except Exception:
            pass
    return out


def rel(p):
    return str(Path(p).resolve().relative_to(OUT.resolve()))


def describe_safetensors(path):
    """What a safetensors reader sees: header order, dtypes, shapes, sha256 of bytes."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    base = 8 + n
    tensors = []
    for name, info in header.items():
        a, b = info["data_offsets"]
        tensors.append({"name": name, "dtype": info["dtype"], "shape": info["shape"],
                        "data_offsets": [a, b], "sha256": sha256(data[base + a:base + b])})
    return {"file": Path(path).name, "size": len(data), "sha256": sha256(data),
            "header_len": n, "metadata": meta, "tensors": tensors}


TORCH_ST = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
            "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
            "bool": "BOOL", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


def torch_bytes(t):
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def st_dtype(t):
    return TORCH_ST[str(t.dtype).replace("torch.", "")]


def f32_hex(values):
    return ["%08x" % struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


def logits_record(t):
    """t: a float tensor (torch); recorded as float32 bits (big-endian hex per value)."""
    import torch
    f = t.detach().float().cpu().contiguous()
    b = f.numpy().astype("<f4").tobytes()
    return {"input_ids": INPUT_IDS, "shape": list(f.shape), "source_dtype": str(t.dtype).replace("torch.", ""),
            "sha256_f32": sha256(b), "f32_hex": f32_hex(f.flatten().tolist())}


class _Ref:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Recorder(pickle.Unpickler):
    """Unpickles a torch checkpoint pickle without torch, recording each tensor's
    storage key, dtype, offset, shape and stride (what a Rust loader sees)."""

    def __init__(self, f):
        super().__init__(f)
        self.storage_order = []

    def find_class(self, module, name):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return lambda storage, offset, size, stride, *a: _Ref(kind="tensor", storage=storage, offset=offset,
                                                                   shape=list(size), stride=list(stride))
        if module == "torch._utils" and name == "_rebuild_parameter":
            return lambda data, *a: data
        if module == "torch" and name.endswith("Storage"):
            return name
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch" and name in ("float32", "float16", "bfloat16", "int64"):
            return name
        return lambda *a, **k: _Ref(kind="object", cls=f"{module}.{name}")

    def persistent_load(self, pid):
        # zip: ('storage', StorageType, key, location, numel)
        # legacy: ('storage', StorageType, root_key, location, numel, view_metadata)
        key = pid[2]
        if key not in [s["key"] for s in self.storage_order]:
            self.storage_order.append({"key": key, "storage_type": pid[1], "numel": pid[4]})
        return _Ref(kind="storage", key=key, storage_type=pid[1], numel=pid[4])


def _flatten(obj, prefix, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    else:
        out.append((prefix, obj))


def pickle_view(path):
    """Tensor records of a torch checkpoint in pickle order, and its storages in first-use order."""
    path = Path(path)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
            rec = _Recorder(io.BytesIO(z.read(pkl[0])))
            obj = rec.load()
            fmt = {"format": "zip", "records": z.namelist()}
    else:
        with open(path, "rb") as f:
            for _ in range(3):  # magic, protocol, sys_info
                pickle.load(f)
            rec = _Recorder(f)
            obj = rec.load()
            keys = pickle.load(f)
        fmt = {"format": "legacy", "storage_keys_in_file_order": keys}
    items = []
    _flatten(obj, "", items)
    tensors = []
    for name, v in items:
        if isinstance(v, _Ref) and v.kind == "tensor":
            tensors.append({"name": name, "storage_key": v.storage.key, "storage_type": v.storage.storage_type,
                            "storage_offset": v.offset, "shape": v.shape, "stride": v.stride})
    return fmt, tensors, rec.storage_order, obj


def describe_bin(path, obj=None):
    """A torch checkpoint: file facts, each tensor (pickle order) with its storage, tied groups."""
    import torch
    path = Path(path)
    data = path.read_bytes()
    fmt, recs, storages, _ = pickle_view(path)
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    flat = []
    _flatten(loaded, "", flat)
    flat = {k: v for k, v in flat if isinstance(v, torch.Tensor)}
    by_storage = collections.OrderedDict()
    for r in recs:
        t = flat[r["name"]]
        r["dtype"] = st_dtype(t)
        r["sha256"] = sha256(torch_bytes(t))
        by_storage.setdefault(r["storage_key"], []).append(r["name"])
    return {"file": path.name, "size": len(data), "sha256": sha256(data), **fmt,
            "storages_in_pickle_order": storages,
            "tensors": recs,
            "tied_groups": [names for names in by_storage.values() if len(names) > 1]}


def describe_dir(d):
    d = Path(d)
    out = {"dir": rel(d), "files": sorted(p.name for p in d.iterdir())}
    for p in sorted(d.iterdir()):
        if p.suffix == ".safetensors":
            out.setdefault("safetensors", []).append(describe_safetensors(p))
        elif p.suffix == ".bin":
            out.setdefault("bin", []).append(describe_bin(p))
        elif p.name.endswith(".index.json"):
            out.setdefault("index", {})[p.name] = json.loads(p.read_text())
    return out


def state_dict_record(model):
    """Names, dtypes, shapes of model.state_dict() and which names share storage."""
    sd = model.state_dict()
    groups = collections.OrderedDict()
    rows = []
    for k, t in sd.items():
        rows.append({"name": k, "dtype": st_dtype(t), "shape": list(t.shape)})
        if t.device.type != "meta":
            groups.setdefault((t.untyped_storage().data_ptr(), t.storage_offset()), []).append(k)
    return rows, [g for g in groups.values() if len(g) > 1]


@contextlib.contextmanager
def capture():
    """Collects transformers' log records, Python warnings, stdout and stderr."""
    rec = {"logs": [], "warnings": [], "stdout": "", "stderr": ""}

    class H(logging.Handler):
        def emit(self, r):
            rec["logs"].append({"level": r.levelname, "logger": r.name, "message": r.getMessage()})

    h = H()
    loggers = [logging.getLogger(n) for n in ("transformers", "diffusers", "accelerate", "huggingface_hub")]
    old = [(lg, lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(h)
        lg.setLevel(logging.INFO)
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                yield rec
            finally:
                rec["warnings"] = [f"{x.category.__name__}: {x.message}" for x in w]
                rec["stdout"], rec["stderr"] = out.getvalue(), err.getvalue()
                for lg, lvl, prop in old:
                    lg.removeHandler(h)
                    lg.setLevel(lvl)


def scrub(obj, d):
    """Replaces a temporary directory path in messages by <dir>."""
    s = json.dumps(obj)
    for p in {str(d), str(Path(d).resolve())}:
        s = s.replace(json.dumps(p)[1:-1], "<dir>")
    return json.loads(s)


def forward_logits(model):
    import torch
    ids = torch.tensor([INPUT_IDS])
    with torch.no_grad():
        if getattr(model.config, "is_encoder_decoder", False):
            out = model(input_ids=ids, decoder_input_ids=ids)
        else:
            out = model(input_ids=ids)
    return out.logits


def probe(d, cls_name, save_to=None, safe=True):
    """Loads directory d with transformers' from_pretrained (class cls_name) and
    reports what happened; optionally saves it again (save_pretrained) to save_to."""
    import torch
    import transformers
    transformers.logging.set_verbosity_info()
    cls = getattr(transformers, cls_name)
    res = {"transformers": transformers.__version__, "class": cls_name, "loaded": False}
    torch.manual_seed(0)  # newly initialized (missing) weights are then the same on every run
    with capture() as rec:
        try:
            model = cls.from_pretrained(str(d))
            res["loaded"] = True
        except Exception as e:
            res["error"] = {"type": type(e).__name__, "message": str(e)}
            model = None
    res["load_output"] = {k: v for k, v in rec.items()
                          if k != "logs" or True}
    # keep log messages only at warning level and above, plus the 'newly initialized' info lines
    res["load_output"]["logs"] = [r for r in rec["logs"] if r["level"] in ("WARNING", "ERROR", "CRITICAL")
                                  or "initialized" in r["message"] or "MISSING" in r["message"]
                                  or "missing" in r["message"].lower()]
    if model is not None:
        model.eval()
        sd_rows, sd_tied = state_dict_record(model)
        res["state_dict"] = sd_rows
        res["state_dict_tied"] = sd_tied
        res["meta_tensors"] = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
                               if t.device.type == "meta"]
        try:
            emb = model.get_input_embeddings().weight
            out = model.get_output_embeddings()
            res["input_embedding_device"] = emb.device.type
            if out is not None:
                res["output_embedding_is_input_embedding"] = out.weight is emb
                res["output_embedding_shares_storage"] = (
                    out.weight.device.type != "meta" and emb.device.type != "meta"
                    and out.weight.untyped_storage().data_ptr() == emb.untyped_storage().data_ptr())
        except Exception as e:
            res["embedding_check_error"] = f"{type(e).__name__}: {e}"
        try:
            res["logits"] = logits_record(forward_logits(model))
        except Exception as e:
            res["forward_error"] = {"type": type(e).__name__, "message": str(e)}
        if save_to is not None:
            with capture() as rec2:
                try:
                    model.save_pretrained(str(save_to), safe_serialization=safe)
                except TypeError as e:
                    res["save_note"] = f"save_pretrained(safe_serialization=...) refused ({e}); saved with defaults"
                    model.save_pretrained(str(save_to))
            res["save_output"] = {"logs": [r for r in rec2["logs"] if r["level"] != "INFO"],
                                  "warnings": rec2["warnings"]}
            res["saved_files"] = sorted(p.name for p in Path(save_to).iterdir())
            res["saved_tensors"] = []
            for p in sorted(Path(save_to).glob("*.safetensors")):
                res["saved_tensors"] += [t["name"] for t in describe_safetensors(p)["tensors"]]
    return scrub(res, d)


def run_tf5(jobs):
    """Runs probe() jobs in the tf5 venv. jobs: list of dicts (probe kwargs)."""
    with tempfile.TemporaryDirectory() as t:
        jf = Path(t) / "job.json"
        of = Path(t) / "out.json"
        jf.write_text(json.dumps(jobs))
        # a fixed hash seed: transformers 5's load report lists keys in set order
        subprocess.run([TF5_PY, __file__, "_tf5", str(jf), str(of)], check=True,
                       env=dict(os.environ, PYTHONHASHSEED="0"))
        return json.loads(of.read_text())


def tf5_main(jf, of):
    jobs = json.loads(Path(jf).read_text())
    results = []
    for j in jobs:
        kind = j.pop("kind", "probe")
        if kind == "probe":
            results.append(probe(**j))
        elif kind == "versions":
            results.append(versions())
        elif kind == "mlx_moe_global_scale":
            j.pop("kind", None)
            results.append(mlx_moe_global_scale(**j))
    Path(of).write_text(json.dumps(results))


# ---------------------------------------------------------------- tiny models

def train_tokenizer(vocab_size=256):
    """A tiny BPE tokenizer trained locally, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    from transformers import PreTrainedTokenizerFast
    corpus = [
        "the quick brown fox jumps over the lazy dog",
        "tensorfile reads and writes safetensors files for models",
        "a tiny random llama model has two layers and a small vocabulary",
        "mixture of experts models route each token to two of four experts",
        "quantized weights are packed into unsigned thirty two bit integers",
        "hello world, this is a test of the tokenizer training code.",
    ] * 20
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.BPEDecoder()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(corpus, tr)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def cfg_common(vocab=256, hidden=64, layers=2, heads=4, kv=2, inter=128):
    return dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, intermediate_size=inter, max_position_embeddings=128,
                bos_token_id=1, eos_token_id=2)


def make_config(arch, small=False, **over):
    """small=True: hidden 32 (the tied_bin group, which keeps four copies of each model)."""
    import transformers as T
    H = 32 if small else 64
    c = cfg_common(hidden=H, inter=2 * H)
    hd = H // 4
    if arch == "llama":
        cfg = T.LlamaConfig(**c, tie_word_embeddings=False)
        cls = "LlamaForCausalLM"
    elif arch == "llama_tied":
        cfg = T.LlamaConfig(**c, tie_word_embeddings=True)
        cls = "LlamaForCausalLM"
    elif arch == "mistral":
        cfg = T.MistralConfig(**c, head_dim=hd, sliding_window=None, tie_word_embeddings=False)
        cls = "MistralForCausalLM"
    elif arch == "qwen2":
        cfg = T.Qwen2Config(**c, tie_word_embeddings=False)
        cls = "Qwen2ForCausalLM"
    elif arch == "qwen2_tied":
        cfg = T.Qwen2Config(**c, tie_word_embeddings=True)
        cls = "Qwen2ForCausalLM"
    elif arch == "qwen3":
        cfg = T.Qwen3Config(**c, head_dim=hd, tie_word_embeddings=True)
        cls = "Qwen3ForCausalLM"
    elif arch == "gemma":
        cfg = T.GemmaConfig(**c, head_dim=hd, pad_token_id=0)
        cls = "GemmaForCausalLM"
    elif arch == "phi3":
        cfg = T.Phi3Config(**c, pad_token_id=0, tie_word_embeddings=False)
        cls = "Phi3ForCausalLM"
    elif arch == "mixtral":
        c["intermediate_size"] = H
        cfg = T.MixtralConfig(**c, num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False)
        cls = "MixtralForCausalLM"
    elif arch == "qwen2_moe":
        c["intermediate_size"] = H
        cfg = T.Qwen2MoeConfig(**c, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=H,
                               shared_expert_intermediate_size=H, decoder_sparse_step=1, tie_word_embeddings=False)
        cls = "Qwen2MoeForCausalLM"
    elif arch == "qwen3_moe":
        c["intermediate_size"] = H
        cfg = T.Qwen3MoeConfig(**c, head_dim=hd, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=H,
                               decoder_sparse_step=1, tie_word_embeddings=False)
        cls = "Qwen3MoeForCausalLM"
    elif arch == "gpt2":
        cfg = T.GPT2Config(vocab_size=256, n_positions=64, n_embd=H, n_layer=2, n_head=4,
                           bos_token_id=1, eos_token_id=2)
        cls = "GPT2LMHeadModel"
    elif arch == "bert_mlm":
        cfg = T.BertConfig(vocab_size=256, hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=2 * H, max_position_embeddings=64, type_vocab_size=2, pad_token_id=0)
        cls = "BertForMaskedLM"
    elif arch == "bert":
        cfg = T.BertConfig(vocab_size=256, hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=2 * H, max_position_embeddings=64, type_vocab_size=2, pad_token_id=0)
        cls = "BertModel"
    elif arch == "t5":
        cfg = T.T5Config(vocab_size=256, d_model=H, d_kv=hd, d_ff=2 * H, num_layers=2, num_decoder_layers=2,
                         num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
                         decoder_start_token_id=0, pad_token_id=0, eos_token_id=2)
        cls = "T5ForConditionalGeneration"
    else:
        raise ValueError(arch)
    for k, v in over.items():
        setattr(cfg, k, v)
    return cfg, cls


def make_model(arch, seed, dtype="float32", small=False, **over):
    import torch
    import transformers
    cfg, cls = make_config(arch, small=small, **over)
    torch.manual_seed(seed)
    model = getattr(transformers, cls)(cfg)
    if dtype != "float32":
        model = model.to(getattr(torch, dtype))
    model.eval()
    return model, cls


# ---------------------------------------------------------------- group: mlx_quant (issue 16)

EDGE_ROWS = [
    "0: normal(0, 1)",
    "1: cols 0-127 all 0 (constant zero groups), cols 128-255 all 0.75 (constant non-zero groups)",
    "2: normal(0, 0.01) with one outlier of +-40 at col 7 of every 32-col block (sign alternates by block)",
    "3: near the dtype's float limit L (65504 for F16, 3e38 for F32/BF16): cols 0-63 uniform(-L, L) with "
    "col0 = L, col1 = -L; cols 64-127 uniform(L/2, L); cols 128-191 uniform(-L, -L/2); "
    "cols 192-255 normal(0,1) with col 200 = L",
    "4: tiny values: cols 0-127 random sign x 10^uniform(log10(min subnormal), log10(min normal)) "
    "(subnormals of the dtype); cols 128-255 cycle of [0, -0, +min_subnormal, -min_subnormal, "
    "+min_normal, -min_normal, 1e-3, -1e-3]",
    "5: mixed signs: (-1)^col x uniform(0.1, 1), with -0.0 at cols 16, 48, 80",
    "6: cols 0-127 all -2.5 (constant negative), cols 128-255 5.0 + normal(0, 1e-3) (narrow range, offset)",
    "7: normal(0, 0.1) with a single outlier per 128-col group: col 5 = 25.0, col 133 = -25.0",
]

LIMITS = {"float32": (3e38, 1.401298464324817e-45, 1.1754943508222875e-38),
          "float16": (65504.0, 5.960464477539063e-08, 6.103515625e-05),
          "bfloat16": (3e38, 9.183549615799121e-41, 1.1754943508222875e-38)}


def edge_matrix(dtype, seed=16):
    import numpy as np
    rng = np.random.default_rng(seed)
    L, sub, nor = LIMITS[dtype]
    m = np.zeros((8, 256), dtype=np.float64)
    m[0] = rng.normal(0, 1, 256)
    m[1, :128] = 0.0
    m[1, 128:] = 0.75
    m[2] = rng.normal(0, 0.01, 256)
    for b in range(8):
        m[2, b * 32 + 7] = 40.0 if b % 2 == 0 else -40.0
    m[3, :64] = rng.uniform(-L, L, 64)
    m[3, 0], m[3, 1] = L, -L
    m[3, 64:128] = rng.uniform(L / 2, L, 64)
    m[3, 128:192] = rng.uniform(-L, -L / 2, 64)
    m[3, 192:] = rng.normal(0, 1, 64)
    m[3, 200] = L
    m[4, :128] = rng.choice([-1.0, 1.0], 128) * 10 ** rng.uniform(np.log10(sub), np.log10(nor), 128)
    cyc = [0.0, -0.0, sub, -sub, nor, -nor, 1e-3, -1e-3]
    m[4, 128:] = [cyc[i % 8] for i in range(128)]
    m[5] = np.array([(-1) ** i for i in range(256)]) * rng.uniform(0.1, 1.0, 256)
    m[5, [16, 48, 80]] = -0.0
    m[6, :128] = -2.5
    m[6, 128:] = 5.0 + rng.normal(0, 1e-3, 128)
    m[7] = rng.normal(0, 0.1, 256)
    m[7, 5], m[7, 133] = 25.0, -25.0
    return m


def mx_bytes(a):
    import mlx.core as mx
    import numpy as np
    if a.dtype == mx.bfloat16:
        return np.array(a.view(mx.uint16)).tobytes()
    return np.array(a).tobytes()


def mx_desc(name, a):
    return {"name": name, "dtype": str(a.dtype).replace("mlx.core.", ""), "shape": list(a.shape),
            "sha256": sha256(mx_bytes(a))}


def group_mlx_quant():
    import mlx.core as mx
    import numpy as np
    d = OUT / "mlx_quant"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    combos = [("affine", b, g) for b in (2, 3, 4, 5, 6, 8) for g in (32, 64, 128)]
    combos += [("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16)]
    dtypes = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
    files = []
    for mode, bits, gs in combos:
        for gscale in ([False, True] if mode == "nvfp4" else [False]):
            fname = f"{mode}_b{bits}_g{gs}{'_global_scale' if gscale else ''}.safetensors"
            arrays, entries = {}, []
            for dn, dt in dtypes.items():
                w = mx.array(edge_matrix(dn).astype(np.float32)).astype(dt)
                p = short[dn]
                kw = {}
                if gscale:
                    # as mlx-lm 0.32 does for experts (switch_layers._quantize_experts): max |w| as float32
                    kw["global_scale"] = mx.max(mx.abs(w)).astype(mx.float32)
                q = mx.quantize(w, group_size=gs, bits=bits, mode=mode, **kw)
                wq, scales = q[0], q[1]
                biases = q[2] if len(q) > 2 else None
                deq = mx.dequantize(wq, scales, biases, group_size=gs, bits=bits, mode=mode, **kw)
                deq32 = mx.dequantize(wq, scales, biases, group_size=gs, bits=bits, mode=mode,
                                      dtype=mx.float32, **kw)
                out = {f"{p}.original": w, f"{p}.weight": wq, f"{p}.scales": scales}
                if biases is not None:
                    out[f"{p}.biases"] = biases
                if gscale:
                    out[f"{p}.global_scale"] = kw["global_scale"]
                out[f"{p}.dequantized"] = deq
                out[f"{p}.dequantized_f32"] = deq32
                mx.eval(out)
                arrays.update(out)
                entries.append({
                    "input_dtype": dn, "mode": mode, "bits": bits, "group_size": gs,
                    "global_scale": gscale,
                    "tensors": {k.split(".", 1)[1]: mx_desc(k, v) for k, v in out.items()},
                    "dequantize_default_dtype": str(deq.dtype).replace("mlx.core.", ""),
                    "nan_in_dequantized": bool(mx.any(mx.isnan(deq32)).item()),
                    "inf_in_dequantized": bool(mx.any(mx.isinf(deq32)).item()),
                })
            mx.save_safetensors(str(d / fname), arrays)
            files.append({"file": fname, "entries": entries, "layout": describe_safetensors(d / fname)})
    write_json(d / "manifest.json", {
        "about": "mx.quantize outputs for every mode/bits/group size and input dtype (F32, F16, BF16), "
                 "saved with mx.save_safetensors (no metadata). Each file holds, per input dtype prefix "
                 "(f32., f16., bf16.): original (the input, in that dtype), weight (U32 packed), scales, "
                 "biases (affine only), global_scale (the nvfp4 *_global_scale files only: max |w| as F32 "
                 "scalar, passed to both quantize and dequantize), dequantized (mx.dequantize with dtype "
                 "left to MLX: the scales' dtype for affine, bfloat16 for mx/nv modes) and dequantized_f32 "
                 "(mx.dequantize(..., dtype=float32)). Matrix 8 x 256, rows as in 'rows'.",
        "versions": versions(),
        "rows": EDGE_ROWS,
        "made_by": "scripts/make_real_fixtures.py mlx_quant",
        "files": files})


# ---------------------------------------------------------------- group: checkpoint (issue 15, item 4)

def group_checkpoint():
    import torch
    from torch import nn
    d = OUT / "checkpoint"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(6, 4), torch.randn(6, 3)
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    model.eval()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "lr": 1e-3}
    path = d / "legacy_train_checkpoint.pt"
    torch.save(ckpt, path, _use_new_zipfile_serialization=False)
    desc = describe_bin(path)
    model_rows = [dict(t, name=t["name"][len("model."):]) for t in desc["tensors"] if t["name"].startswith("model.")]
    used = {t["storage_key"] for t in model_rows}
    write_json(d / "manifest.json", {
        "about": "A training checkpoint in torch's legacy (non-zip) format: torch.save({'model': state_dict, "
                 "'optimizer': Adam state after one step, 'epoch': 3, 'lr': 1e-3}, _use_new_zipfile_serialization="
                 "False). The model subtree uses only some of the file's storages (the optimizer's exp_avg, "
                 "exp_avg_sq and step tensors are storages of their own). Legacy storage keys are the storages' "
                 "memory addresses (str of an int), and the raw storages follow in the order of "
                 "storage_keys_in_file_order (torch sorts the key strings), not pickle order; so re-running the "
                 "generator gives other keys and another file sha256.",
        "versions": versions(),
        "made_by": "scripts/make_real_fixtures.py checkpoint: nn.Sequential(Linear(4,8), BatchNorm1d(8), ReLU(), "
                   "Linear(8,3)), seed 4, one Adam step (lr 1e-3) on a random batch of 6, then eval()",
        "files": {
            path.name: {
                "file": desc,
                "non_tensor_values": {"epoch": 3, "lr": 1e-3,
                                      "optimizer.param_groups": json.loads(json.dumps(
                                          opt.state_dict()["param_groups"], default=str))},
                "expected_key_model": {
                    "about": "what `--key model` must give: the model subtree's tensors, names relative to it",
                    "tensors": model_rows,
                    "storage_keys_used": sorted(used, key=int),
                    "storage_keys_unused": [s["key"] for s in desc["storages_in_pickle_order"]
                                            if s["key"] not in used],
                },
            }
        }})


# ---------------------------------------------------------------- group: tied_bin (issue 15, item 2)

def strip_progress(text):
    """Drops tqdm progress bars ('\\r...it/s]'), whose timings change from run to run."""
    import re
    text = re.sub(r"[^\r\n]*\d+it/s\]", "", text)
    text = re.sub(r"[^\r\n]*\?it/s\]", "", text)
    return text.replace("\r", "").strip()


def summarize(res, ref_logits=None):
    """The parts of a probe() result a manifest keeps."""
    out = {k: res[k] for k in ("transformers", "class", "loaded", "error", "meta_tensors", "input_embedding_device",
                               "output_embedding_is_input_embedding", "output_embedding_shares_storage",
                               "forward_error", "saved_files", "saved_tensors", "save_note", "state_dict_tied")
           if k in res}
    lo = res.get("load_output", {})
    out["load_messages"] = [f"{r['level']} {r['logger']}: {r['message']}" for r in lo.get("logs", [])]
    out["load_warnings"] = lo.get("warnings", [])
    err = strip_progress(lo.get("stderr", ""))
    if err:
        out["load_stderr"] = err
    if lo.get("stdout"):
        out["load_stdout"] = lo["stdout"]
    if "save_output" in res:
        out["save_messages"] = [f"{r['level']} {r['logger']}: {r['message']}" for r in res["save_output"]["logs"]]
        out["save_warnings"] = res["save_output"]["warnings"]
    if "logits" in res:
        out["logits_sha256_f32"] = res["logits"]["sha256_f32"]
        if ref_logits is not None:
            out["logits_equal_original"] = res["logits"]["sha256_f32"] == ref_logits["sha256_f32"]
            a = [struct.unpack(">f", bytes.fromhex(h))[0] for h in res["logits"]["f32_hex"]]
            b = [struct.unpack(">f", bytes.fromhex(h))[0] for h in ref_logits["f32_hex"]]
            out["logits_max_abs_diff"] = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else None
    return out


TIED_MODELS = [("llama", "llama_tied", 21), ("qwen2", "qwen2_tied", 22), ("gpt2", "gpt2", 23),
               ("t5", "t5", 24), ("bert_mlm", "bert_mlm", 25)]


def rewrite_st(src, dst, rename=None, drop=()):
    """Rewrites a safetensors file with safetensors.torch.save_file, renaming or dropping tensors."""
    from safetensors.torch import load_file, save_file
    sd = load_file(str(src))
    out = {}
    for k, v in sd.items():
        if k in drop:
            continue
        out[(rename or {}).get(k, k)] = v
    save_file(out, str(dst), metadata={"format": "pt"})


def group_tied_bin():
    import transformers
    d = OUT / "tied_bin"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    models, jobs, local = {}, [], {}
    for name, arch, seed in TIED_MODELS:
        model, cls = make_model(arch, seed, small=True)
        sd_rows, sd_tied = state_dict_record(model)
        logits = logits_record(forward_logits(model))
        md = d / name
        with capture() as r1:
            model.save_pretrained(str(md / "bin"), safe_serialization=False)
        with capture() as r2:
            model.save_pretrained(str(md / "safetensors"), safe_serialization=True)
        entry = {"arch": arch, "class": cls, "seed": seed,
                 "tie_word_embeddings": model.config.tie_word_embeddings,
                 "_tied_weights_keys": getattr(model, "_tied_weights_keys", None),
                 "state_dict": sd_rows, "state_dict_tied_groups": sd_tied,
                 "logits": logits,
                 "save_messages_4.57": [m["message"] for m in r1["logs"] + r2["logs"] if m["level"] != "INFO"]
                 + r1["warnings"] + r2["warnings"]}
        models[name] = entry
        jobs.append({"d": str(md / "bin"), "cls_name": cls, "save_to": str(md / "safetensors_tf5")})
        jobs.append({"d": str(md / "safetensors"), "cls_name": cls})
        local[name] = [probe(md / "bin", cls), probe(md / "safetensors", cls)]
        if name in ("llama", "qwen2"):
            # the tied weight stored under lm_head.weight only / under the embedding only
            lo = md / "lm_head_only"
            lo.mkdir()
            shutil.copy(md / "safetensors" / "config.json", lo / "config.json")
            emb = {"llama": "model.embed_tokens.weight", "qwen2": "model.embed_tokens.weight"}[name]
            rewrite_st(md / "safetensors" / "model.safetensors", lo / "model.safetensors",
                       rename={emb: "lm_head.weight"})
            jobs.append({"d": str(lo), "cls_name": cls})
            local[name].append(probe(lo, cls))
    tf5 = run_tf5(jobs + [{"kind": "versions"}])
    tf5_versions = tf5.pop()
    it = iter(tf5)
    for name, arch, seed in TIED_MODELS:
        e = models[name]
        md = d / name
        ref = e["logits"]
        bin_desc, st_desc, st5_desc = (describe_dir(md / x) for x in ("bin", "safetensors", "safetensors_tf5"))
        e["dirs"] = {"bin": bin_desc, "safetensors": st_desc, "safetensors_tf5": st5_desc}
        a, b = st_desc["safetensors"][0], st5_desc["safetensors"][0]
        if a["sha256"] == b["sha256"]:
            (md / "safetensors_tf5" / "model.safetensors").unlink()
            e["dirs"]["safetensors_tf5"]["note"] = ("model.safetensors written by transformers 5 had the same bytes "
                                                    "(sha256) as safetensors/model.safetensors, so it is not kept")
        pickle_groups = bin_desc["bin"][0]["tied_groups"]
        e["tied_names_in_pickle_order"] = pickle_groups
        st_names = {t["name"] for f in st_desc["safetensors"] for t in f["tensors"]}
        st5_names = {t["name"] for f in st5_desc.get("safetensors", []) for t in f["tensors"]}
        e["kept_on_safetensors_save"] = {
            "transformers_4.57": [[n for n in g if n in st_names] for g in pickle_groups],
            "transformers_5": [[n for n in g if n in st5_names] for g in pickle_groups]}
        p5_bin, p5_st = next(it), next(it)
        e["reload"] = {
            "transformers_4.57": {"bin": summarize(local[name][0], ref), "safetensors": summarize(local[name][1], ref)},
            "transformers_5": {"bin_then_save_safetensors": summarize(p5_bin, ref),
                               "safetensors": summarize(p5_st, ref)}}
        if name in ("llama", "qwen2"):
            e["dirs"]["lm_head_only"] = describe_dir(md / "lm_head_only")
            e["tied_weight_under_lm_head_only"] = {
                "about": "safetensors/model.safetensors rewritten (safetensors.torch.save_file) with "
                         "model.embed_tokens.weight renamed to lm_head.weight; config.json unchanged (tied)",
                "transformers_4.57": summarize(local[name][2], ref),
                "transformers_5": summarize(next(it), ref)}
            e["tied_weight_under_embedding_only"] = {
                "about": "that is the safetensors/ directory as transformers 4.57 writes it: see reload.*.safetensors"}
    write_json(d / "manifest.json", {
        "about": "Tiny random-init models with tied weights, saved by transformers 4.57 save_pretrained as "
                 "pytorch_model.bin (safe_serialization=False, bin/) and as model.safetensors (safetensors/); "
                 "safetensors_tf5/ is the bin/ directory loaded and saved again by transformers 5 "
                 "(save_pretrained). Per model: the state_dict names, every name under which a tied storage "
                 "appears in the pickle in pickle order (tied_names_in_pickle_order), the name each "
                 "transformers version keeps in safetensors, the logits of the original model on token ids "
                 "[1,2,3,4,5] (T5: the same ids as decoder_input_ids), and what each version does when "
                 "it loads the files again (logits_equal_original compares float32 bits).",
        "versions": {"tools": versions(), "tf5": tf5_versions},
        "made_by": "scripts/make_real_fixtures.py tied_bin",
        "models": models})


# ---------------------------------------------------------------- group: sharded (issue 15, item 3)

def group_sharded():
    import torch
    import diffusers
    d = OUT / "sharded"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    man = {"about": "Sharded and diffusers sets. llama_tied_bin/: a tied Llama (hidden 64, F32) saved by "
                    "transformers 4.57 save_pretrained(safe_serialization=False, max_shard_size='100KB'): "
                    "pytorch_model-0000K-of-0000N.bin + pytorch_model.bin.index.json. unet_*: a tiny "
                    "random-init diffusers UNet2DModel saved as diffusion_pytorch_model.safetensors, as "
                    "diffusion_pytorch_model.bin, and sharded (max_shard_size='50KB').",
           "versions": versions(), "made_by": "scripts/make_real_fixtures.py sharded", "sets": {}}
    # tied llama, sharded .bin
    model, cls = make_model("llama_tied", 31)
    sd_rows, sd_tied = state_dict_record(model)
    ld = d / "llama_tied_bin"
    with capture() as r:
        model.save_pretrained(str(ld), safe_serialization=False, max_shard_size="100KB")
    desc = describe_dir(ld)
    index = desc["index"]["pytorch_model.bin.index.json"]
    where = {}
    for b in desc["bin"]:
        for t in b["tensors"]:
            where.setdefault(t["name"], []).append(b["file"])
    man["sets"]["llama_tied_bin"] = {
        "class": cls, "state_dict": sd_rows, "state_dict_tied_groups": sd_tied,
        "logits": logits_record(forward_logits(model)),
        "dir": desc,
        "tied_weights_placement": {
            "about": "for each tied group of the state_dict: the shard(s) holding each name (from the pickles) "
                     "and what the index's weight_map says",
            "groups": [{n: {"in_shards": where.get(n, []), "index_says": index["weight_map"].get(n)} for n in g}
                       for g in sd_tied]},
        "save_messages": [m["message"] for m in r["logs"] if m["level"] != "INFO"] + r["warnings"],
        "reload_transformers_4.57": summarize(probe(ld, cls), None)}
    # diffusers UNet
    torch.manual_seed(32)
    unet = diffusers.UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                                 block_out_channels=(8, 16), norm_num_groups=4,
                                 down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                 up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    unet.eval()
    sd_rows, sd_tied = state_dict_record(unet)
    torch.manual_seed(0)
    sample = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        out = unet(sample, timestep=10).sample
    outs = {}
    for sub, kw in [("unet_safetensors", {"safe_serialization": True}),
                    ("unet_bin", {"safe_serialization": False}),
                    ("unet_sharded_safetensors", {"safe_serialization": True, "max_shard_size": "50KB"})]:
        with capture() as r:
            try:
                unet.save_pretrained(str(d / sub), **kw)
                err = None
            except Exception as e:
                err = f"{type(e).__name__}: {e}"
        entry = {"save_pretrained_kwargs": kw, "error": err,
                 "save_messages": [m["message"] for m in r["logs"] if m["level"] != "INFO"] + r["warnings"]}
        if err is None:
            entry["dir"] = describe_dir(d / sub)
            with capture() as r2:
                back = diffusers.UNet2DModel.from_pretrained(str(d / sub))
            with torch.no_grad():
                o2 = back.eval()(sample, timestep=10).sample
            sa, sb = unet.state_dict(), back.state_dict()
            entry["reload_state_dict_equal"] = sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
            # the same weights can give outputs that differ in the last bits (CPU kernels, memory alignment)
            entry["reload_output_max_abs_diff"] = float((o2 - out).abs().max())
            entry["reload_messages"] = scrub([m["message"] for m in r2["logs"] if m["level"] != "INFO"]
                                             + r2["warnings"], d / sub)
        outs[sub] = entry
    man["sets"]["unet"] = {
        "class": "diffusers.UNet2DModel",
        "config": json.loads((d / "unet_safetensors" / "config.json").read_text()),
        "state_dict": sd_rows, "state_dict_tied_groups": sd_tied,
        "forward": {"about": "unet(sample, timestep=10).sample, sample = torch.randn(1,3,8,8) after "
                             "torch.manual_seed(0); float32 bits", **logits_record(out), "input_ids": None},
        "saves": outs}
    write_json(d / "manifest.json", man)


# ---------------------------------------------------------------- group: hf (issue 15, item 5)

HF_ARCHS = [("llama", 51), ("mistral", 52), ("qwen2", 53), ("qwen3", 54), ("gemma", 55), ("phi3", 56),
            ("gpt2", 57), ("bert", 58), ("t5", 59), ("mixtral", 60), ("qwen2_moe", 61), ("qwen3_moe", 62)]

SHAPE_KEYS = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "tie_word_embeddings", "attention_bias", "mlp_bias",
              "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
              "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
              "n_embd", "n_layer", "n_head", "n_positions", "n_inner", "max_position_embeddings",
              "type_vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
              "relative_attention_num_buckets", "is_gated_act", "feed_forward_proj"]


def names_shapes(rows):
    return {r["name"]: r["shape"] for r in rows}


def group_hf():
    d = OUT / "hf"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    models, jobs, local = {}, [], {}
    tmp = Path(tempfile.mkdtemp())
    for arch, seed in HF_ARCHS:
        model, cls = make_model(arch, seed, dtype="bfloat16")
        sd_rows, sd_tied = state_dict_record(model)
        md = d / arch
        with capture() as r:
            model.save_pretrained(str(md), safe_serialization=True)
        cfg = json.loads((md / "config.json").read_text())
        desc = describe_dir(md)
        file_names = {t["name"] for f in desc["safetensors"] for t in f["tensors"]}
        models[arch] = {
            "class": cls, "seed": seed,
            "config_keys_for_shapes": {k: cfg[k] for k in SHAPE_KEYS if k in cfg},
            "tied": bool(sd_tied), "tie_word_embeddings": cfg.get("tie_word_embeddings"),
            "state_dict": sd_rows, "state_dict_tied_groups": sd_tied,
            "state_dict_names_not_in_file": [x["name"] for x in sd_rows if x["name"] not in file_names],
            "dir": desc,
            "save_messages": [m["message"] for m in r["logs"] if m["level"] != "INFO"] + r["warnings"],
        }
        local[arch] = probe(md, cls)
        jobs.append({"d": str(md), "cls_name": cls, "save_to": str(tmp / arch)})
    # broken copies
    broken = {}
    bd = OUT / "hf_broken"
    shutil.rmtree(bd, ignore_errors=True)
    bd.mkdir(parents=True)
    for arch in ("llama", "qwen2"):
        cls = models[arch]["class"]
        h = bd / f"{arch}_hidden_mismatch"
        h.mkdir()
        cfg = json.loads((d / arch / "config.json").read_text())
        cfg["hidden_size"] = 48
        (h / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        shutil.copy(d / arch / "model.safetensors", h / "model.safetensors")
        m = bd / f"{arch}_missing_down_proj"
        m.mkdir()
        shutil.copy(d / arch / "config.json", m / "config.json")
        rewrite_st(d / arch / "model.safetensors", m / "model.safetensors",
                   drop={"model.layers.1.mlp.down_proj.weight"})
        broken[h.name] = {"from": f"hf/{arch}", "change": "config.json hidden_size 64 -> 48 (rewritten with "
                          "json.dumps(indent=2, sort_keys=True)); model.safetensors unchanged",
                          "dir": describe_dir(h), "transformers_4.57": summarize(probe(h, cls))}
        broken[m.name] = {"from": f"hf/{arch}", "change": "model.layers.1.mlp.down_proj.weight removed "
                          "(safetensors.torch.save_file, metadata format=pt); config.json unchanged",
                          "dir": describe_dir(m), "transformers_4.57": summarize(probe(m, cls))}
        jobs.append({"d": str(h), "cls_name": cls})
        jobs.append({"d": str(m), "cls_name": cls})
    tf5 = run_tf5(jobs + [{"kind": "versions"}])
    tf5_versions = tf5.pop()
    it = iter(tf5)
    for arch, seed in HF_ARCHS:
        e = models[arch]
        p5 = next(it)
        e["reload"] = {"transformers_4.57": summarize(local[arch], local[arch].get("logits")),
                       "transformers_5": summarize(p5, local[arch].get("logits"))}
        s457 = names_shapes(e["state_dict"])
        s5 = names_shapes(p5.get("state_dict", []))
        file_names = [t["name"] for f in e["dir"]["safetensors"] for t in f["tensors"]]
        e["transformers_5"] = {
            "state_dict_same_names_and_shapes": s457 == s5,
            "saved_tensor_names_same": sorted(p5.get("saved_tensors", [])) == sorted(file_names),
        }
        if s457 != s5:
            e["transformers_5"]["state_dict"] = p5.get("state_dict")
        if sorted(p5.get("saved_tensors", [])) != sorted(file_names):
            keep = OUT / "hf_tf5" / arch
            shutil.rmtree(keep, ignore_errors=True)
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(tmp / arch, keep)
            e["transformers_5"]["saved_dir"] = describe_dir(keep)
    for arch in ("llama", "qwen2"):
        broken[f"{arch}_hidden_mismatch"]["transformers_5"] = summarize(next(it))
        broken[f"{arch}_missing_down_proj"]["transformers_5"] = summarize(next(it))
    shutil.rmtree(tmp)
    write_json(d / "manifest.json", {
        "about": "Tiny random-init Hugging Face directories (config.json, generation_config.json where written, "
                 "model.safetensors) saved by transformers 4.57 save_pretrained from a BF16 model "
                 "(hidden 64, 2 layers, vocab 256; MoE: 4 experts, top 2). Per architecture: the config keys that "
                 "determine the tensor shapes, the state_dict (names, dtypes, shapes; tied names share storage), "
                 "which state_dict names the file omits, the file as a reader sees it, and what transformers 4.57 "
                 "and 5 do when loading it (transformers_5: whether 5.x sees the same state_dict and writes the "
                 "same names on save_pretrained; where it does not, its saved directory is in ../hf_tf5/<arch>/).",
        "versions": {"tools": versions(), "tf5": tf5_versions},
        "made_by": "scripts/make_real_fixtures.py hf",
        "models": models})
    write_json(bd / "manifest.json", {
        "about": "Broken copies of hf/llama and hf/qwen2, and what transformers 4.57 and 5 say when loading them "
                 "(from_pretrained; the directory path is replaced by <dir>).",
        "versions": {"tools": versions(), "tf5": tf5_versions},
        "made_by": "scripts/make_real_fixtures.py hf",
        "dirs": broken})


# ---------------------------------------------------------------- group: mlx_lm (issue 15 item 1, 5; issue 16 item 7)

def mx_hex(a):
    import mlx.core as mx
    import numpy as np
    f = np.array(a.astype(mx.float32)).astype("<f4")
    return {"input_ids": INPUT_IDS, "shape": list(f.shape), "source_dtype": str(a.dtype).replace("mlx.core.", ""),
            "sha256_f32": sha256(f.tobytes()), "f32_hex": f32_hex(f.flatten().tolist())}


def mlx_dir_record(d):
    """An mlx-lm model directory: files, safetensors layout, index, config's quantization block, the
    dequantized weight of every quantized layer (per expert for 3-D switch_mlp stacks), and the logits
    of mlx_lm.load(d) on INPUT_IDS."""
    import mlx.core as mx
    import mlx_lm
    d = Path(d)
    rec = describe_dir(d)
    rec.pop("dir", None)
    cfg = json.loads((d / "config.json").read_text())
    rec["config"] = cfg
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    rec["index_points_only_to"] = sorted(set(idx["weight_map"].values()))
    st_names = [t["name"] for f in rec["safetensors"] for t in f["tensors"]]
    rec["index_weight_map_equals_file_tensors"] = sorted(idx["weight_map"]) == sorted(st_names)
    rec["index_weight_map_sorted"] = list(idx["weight_map"]) == sorted(idx["weight_map"])
    q = cfg.get("quantization")
    deq = []
    if q is not None:
        w = {}
        for f in sorted(d.glob("*.safetensors")):
            w.update(mx.load(str(f)))
        for k in sorted(w):
            if not k.endswith(".scales"):
                continue
            base = k[: -len(".scales")]
            p = q.get(base) if isinstance(q.get(base), dict) else q
            gs, bits, mode = p["group_size"], p["bits"], p.get("mode", "affine")
            wq, sc, bi, g = w[base + ".weight"], w[k], w.get(base + ".biases"), w.get(base + ".global_scale")
            if g is not None and g.ndim == 1 and wq.ndim == 3:
                parts = [mx.dequantize(wq[e], sc[e], None, group_size=gs, bits=bits, mode=mode, global_scale=g[e])
                         for e in range(wq.shape[0])]
                full = mx.stack(parts)
            else:
                kw = {"global_scale": g} if g is not None else {}
                full = mx.dequantize(wq, sc, bi, group_size=gs, bits=bits, mode=mode, **kw)
                parts = [full[e] for e in range(full.shape[0])] if wq.ndim == 3 else None
            mx.eval(full)
            r = {"layer": base, "mode": mode, "bits": bits, "group_size": gs,
                 "weight": {"dtype": str(wq.dtype).replace("mlx.core.", ""), "shape": list(wq.shape)},
                 "scales": {"dtype": str(sc.dtype).replace("mlx.core.", ""), "shape": list(sc.shape)},
                 "biases": None if bi is None else {"dtype": str(bi.dtype).replace("mlx.core.", ""),
                                                    "shape": list(bi.shape)},
                 "global_scale": None if g is None else {"dtype": str(g.dtype).replace("mlx.core.", ""),
                                                         "shape": list(g.shape),
                                                         "f32_hex": f32_hex(g.astype(mx.float32).tolist()
                                                                            if g.ndim else [g.item()])},
                 "dequantized": mx_desc("dequantized", full)}
            if parts is not None:
                r["dequantized_per_expert_sha256"] = [sha256(mx_bytes(x)) for x in parts]
            deq.append(r)
    rec["quantized_layers"] = deq
    model, _ = mlx_lm.load(str(d))
    try:
        logits = model(mx.array([INPUT_IDS]))
        mx.eval(logits)
        rec["logits"] = mx_hex(logits)
    except Exception as e:
        # MLX's CPU gather_mm (the float switch_mlp path) takes float32 only
        rec["forward_error"] = f"{type(e).__name__}: {e}"
        from mlx.utils import tree_map
        model.update(tree_map(lambda a: a.astype(mx.float32) if mx.issubdtype(a.dtype, mx.floating) else a,
                              model.parameters()))
        try:
            logits = model(mx.array([INPUT_IDS]))
            mx.eval(logits)
        except Exception as e2:
            rec["forward_error_after_float32_cast"] = f"{type(e2).__name__}: {e2}"
            return rec
        rec["logits_after_float32_cast"] = dict(mx_hex(logits), about=(
            "forward failed as loaded (forward_error); these are the logits after casting every floating "
            "parameter (BF16 weights, scales, biases: exact) to float32 in memory"))
    return rec


def mlx_moe_global_scale(src, dst, llama_src, llama_ref_sha):
    """(tf5 venv, mlx-lm 0.32) nvfp4 with one global scale per expert, and a plain 4-bit llama convert
    compared with the one mlx-lm 0.29 wrote."""
    import mlx_lm
    from mlx_lm.utils import load, quantize_model, save
    from mlx_lm import convert
    model, tok, config = load(src, return_config=True, lazy=True)
    with capture() as r:
        model, config = quantize_model(model, config, 16, 4, mode="nvfp4", global_scale=True)
        save(dst, src, model, tok, config)
    out = {"mlx_lm": mlx_lm.__version__, "record": mlx_dir_record(dst), "stdout": r["stdout"]}
    with tempfile.TemporaryDirectory() as t:
        with capture():
            convert(llama_src, str(Path(t) / "q"), quantize=True, q_group_size=64, q_bits=4)
        out["llama_q4_same_model_safetensors"] = sha256((Path(t) / "q" / "model.safetensors").read_bytes()) == \
            llama_ref_sha
        out["llama_q4_files"] = sorted(p.name for p in (Path(t) / "q").iterdir())
        out["llama_q4_config"] = json.loads((Path(t) / "q" / "config.json").read_text())
    return out


def group_mlx_lm():
    from mlx_lm import convert
    d = OUT / "mlx_lm"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    tmp = Path(tempfile.mkdtemp())
    tok = train_tokenizer()
    srcs = {}
    for arch, seed in [("llama", 51), ("mixtral", 60)]:
        model, cls = make_model(arch, seed, dtype="bfloat16")
        src = tmp / f"hf_{arch}"
        model.save_pretrained(str(src), safe_serialization=True)
        tok.save_pretrained(str(src))
        srcs[arch] = {"path": src, "sha": sha256((src / "model.safetensors").read_bytes())}
    made = {}
    plan = [("llama_bf16", "llama", {}),
            ("llama_q4", "llama", {"quantize": True, "q_group_size": 64, "q_bits": 4}),
            ("mixtral_bf16", "mixtral", {}),
            ("mixtral_q4", "mixtral", {"quantize": True, "q_group_size": 64, "q_bits": 4}),
            ("mixtral_nvfp4", "mixtral", {"quantize": True, "q_group_size": 16, "q_bits": 4, "q_mode": "nvfp4"})]
    for name, arch, kw in plan:
        with capture() as r:
            convert(str(srcs[arch]["path"]), str(d / name), **kw)
        rec = mlx_dir_record(d / name)
        rec.update({"source": f"hf/{arch} (the same bytes: made again from the same seed; "
                              f"sha256 {srcs[arch]['sha']})", "mlx_lm_call": f"mlx_lm.convert(hf_path, mlx_path, **{kw})",
                    "convert_stdout": r["stdout"]})
        made[name] = rec
    ref = sha256((d / "llama_q4" / "model.safetensors").read_bytes())
    g = run_tf5([{"kind": "mlx_moe_global_scale", "src": str(srcs["mixtral"]["path"]),
                  "dst": str(d / "mixtral_nvfp4_global_scale"), "llama_src": str(srcs["llama"]["path"]),
                  "llama_ref_sha": ref}, {"kind": "versions"}])
    gs, tf5_versions = g
    made["mixtral_nvfp4_global_scale"] = dict(gs["record"], source="hf/mixtral", mlx_lm_call=(
        "mlx-lm %s: model, tok, config = mlx_lm.utils.load(src, return_config=True, lazy=True); "
        "quantize_model(model, config, 16, 4, mode='nvfp4', global_scale=True); "
        "mlx_lm.utils.save(dst, src, model, tok, config)" % gs["mlx_lm"]), convert_stdout=gs["stdout"])
    hf_ok = {a: (OUT / "hf" / a / "model.safetensors").exists() and
             sha256((OUT / "hf" / a / "model.safetensors").read_bytes()) == srcs[a]["sha"] for a in srcs}
    shutil.rmtree(tmp)
    write_json(d / "manifest.json", {
        "about": "mlx-lm model directories converted from the tiny BF16 Llama and Mixtral of ../hf/ (with a BPE "
                 "tokenizer trained locally, vocab 256, added to the source directory as mlx_lm.convert needs one). "
                 "mlx-lm 0.29.1 (the version that installs beside transformers 4.57) wrote all but "
                 "mixtral_nvfp4_global_scale, written by mlx-lm 0.32 (tf5 venv), which stores one F32 "
                 "global_scale per expert stack. Per directory: files, each safetensors file as a reader sees "
                 "it, the index, config.json (with its quantization block), every quantized layer's "
                 "mx.dequantize output (sha256; per expert for 3-D switch_mlp stacks), and the logits of "
                 "mlx_lm.load(dir) on token ids [1,2,3,4,5].",
        "versions": {"tools": versions(), "tf5": tf5_versions},
        "made_by": "scripts/make_real_fixtures.py mlx_lm",
        "source_equals_hf_fixture": hf_ok,
        "mlx_lm_0.32_llama_q4": {"same_model_safetensors_bytes_as_llama_q4": gs["llama_q4_same_model_safetensors"],
                                 "files": gs["llama_q4_files"], "config": gs["llama_q4_config"]},
        "dirs": made})


# ---------------------------------------------------------------- main

def main():
    group = sys.argv[1] if len(sys.argv) > 1 else "all"
    if group == "_tf5":
        return tf5_main(sys.argv[2], sys.argv[3])
    import importlib
    groups = ["mlx_quant", "checkpoint", "tied_bin", "sharded", "hf", "mlx_lm"]
    todo = groups if group == "all" else [group]
    for g in todo:
        print("==", g, flush=True)
        globals()["group_" + g]()


if __name__ == "__main__":
    main()
