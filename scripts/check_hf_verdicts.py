#!/usr/bin/env python3
"""Compare `tensorfile check` with what transformers does on the same
directories: every tests/fixtures/real/hf/<arch>/ as saved, and broken
copies of each (a tensor of the last layer taken away, a stray tensor
added, intermediate_size doubled in config.json, one expert of a MoE
layer taken away).

For each directory and each transformers (4.57 in the tools venv, 5.x in
the tf5 venv), the class in config.json's "architectures" is loaded with
from_pretrained(dir, output_loading_info=True, ignore_mismatched_sizes=True)
to list what it initializes at random (missing), drops (unexpected) and
cannot load (mismatched), and again without ignore_mismatched_sizes to see
whether it refuses the directory. `tensorfile check --json` must name
exactly the missing, unexpected and mismatched tensors transformers names
(tied aliases aside: transformers reports neither side of a tie).

Not run by CI. Run by hand, from the repository root, after
`cargo build -p tensorfile-cli`:

    /work/venvs/tools/bin/python scripts/check_hf_verdicts.py [--tf5 /work/venvs/tf5/bin/python]

Prints one line per directory and version, then a JSON summary.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "fixtures" / "real" / "hf"
TENSORFILE = ROOT / "target" / "debug" / "tensorfile"

LOADER = r"""
import json, sys, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
import transformers
d = sys.argv[1]
cls = getattr(transformers, json.load(open(d + "/config.json"))["architectures"][0])
out = {"transformers": transformers.__version__}
def keys(v):
    return sorted({k[0] if isinstance(k, (list, tuple)) else k for k in (v or [])})
try:
    _, info = cls.from_pretrained(d, output_loading_info=True, ignore_mismatched_sizes=True)
    out.update(missing=keys(info.get("missing_keys")), unexpected=keys(info.get("unexpected_keys")),
               mismatched=keys(info.get("mismatched_keys")))
except Exception as e:
    out["error_lenient"] = f"{type(e).__name__}: {str(e)[:300]}"
try:
    cls.from_pretrained(d)
    out["refused"] = False
except Exception as e:
    out["refused"] = True
    out["refusal"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
print(json.dumps(out))
"""


def st_tensors(path):
    from safetensors.torch import load_file
    return load_file(str(path))


def save(path, tensors):
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata={"format": "pt"})


def cases(tmp):
    """(name, directory) for every fixture and its broken copies."""
    out = []
    for src in sorted(p for p in HF.iterdir() if p.is_dir()):
        arch = src.name
        out.append((f"{arch}", src))
        tensors = st_tensors(src / "model.safetensors")
        config = json.loads((src / "config.json").read_text())
        layers = config.get("num_hidden_layers") or config.get("n_layer") or config.get("num_layers")
        last = [k for k in tensors if f".{layers - 1}." in k and k.endswith(".weight") and tensors[k].dim() == 2]

        def copy(name, edit_tensors=None, edit_config=None):
            d = tmp / f"{arch}-{name}"
            shutil.copytree(src, d)
            if edit_tensors:
                t = dict(tensors)
                edit_tensors(t)
                save(d / "model.safetensors", t)
            if edit_config:
                c = dict(config)
                edit_config(c)
                (d / "config.json").write_text(json.dumps(c, indent=2))
            out.append((f"{arch}-{name}", d))

        gone = sorted(last)[0]
        copy("missing", edit_tensors=lambda t: t.pop(gone))
        copy("stray", edit_tensors=lambda t: t.__setitem__("stray.weight", t[gone].clone()))
        key = "d_ff" if arch == "t5" else "n_inner" if arch == "gpt2" else "intermediate_size"
        base = config.get(key) or 4 * config.get("n_embd", 0)
        copy("wider", edit_config=lambda c: c.__setitem__(key, 2 * base))
        experts = [k for k in tensors if ".experts.1." in k]
        if experts:
            copy("expert_missing", edit_tensors=lambda t: [t.pop(k) for k in experts])
    return out


def tensorfile(d):
    r = subprocess.run([str(TENSORFILE), "check", "--json", str(d)], capture_output=True, text=True)
    report = json.loads(r.stdout)["report"]
    by = {"missing_tensor": "missing", "unexpected_tensor": "unexpected", "wrong_shape": "mismatched"}
    out = {"missing": [], "unexpected": [], "mismatched": [], "other": []}
    for p in report["problems"]:
        out[by.get(p["kind"], "other")].append(p["subject"])
    return {k: sorted(v) for k, v in out.items()} | {"exit": r.returncode}


def load(python, d):
    r = subprocess.run([python, "-c", LOADER, str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"crashed": r.stderr[-500:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tf4", default=sys.executable)
    ap.add_argument("--tf5", default="/work/venvs/tf5/bin/python")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    summary = []
    try:
        for name, d in cases(tmp):
            tf = tensorfile(d)
            for python in [args.tf4, args.tf5]:
                t = load(python, d)
                agree = all(sorted(t.get(k, [])) == tf[k] for k in ("missing", "unexpected", "mismatched"))
                fails = tf["exit"] != 0
                verdict_agrees = fails == bool(t.get("refused") or t.get("missing") or t.get("mismatched")
                                               or t.get("unexpected"))
                row = {"dir": name, "transformers": t.get("transformers"), "names_agree": agree,
                       "verdict_agrees": verdict_agrees, "tensorfile": tf, "loader": t}
                summary.append(row)
                print(f"{name:28} tf {t.get('transformers', '?'):8} refused={t.get('refused')!s:5} "
                      f"tensorfile exit {tf['exit']}  names {'agree' if agree else 'DIFFER'}  "
                      f"verdict {'agrees' if verdict_agrees else 'DIFFERS'}", flush=True)
    finally:
        shutil.rmtree(tmp)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
