#!/usr/bin/env python3
"""Checks tensorfile's pickle rule against torch's restricted unpickler.

For every PyTorch checkpoint among the fixtures (tests/fixtures/pytorch,
tests/fixtures/real, /work/shared/fixtures/pytorch when present) and the two
clone bombs of issue 27 (built here), runs `torch.load(weights_only=True)`
and `tensorfile inspect --json`, prints a table and checks the rule:

- torch refuses  -> tensorfile refuses (a loader promising torch's safety
  accepts nothing torch refuses);
- torch accepts  -> tensorfile does not refuse it by the pickle rule (an
  opcode torch would refuse, or a global spelled as torch does not spell
  it). tensorfile may still refuse what safetensors cannot hold (complex,
  sparse, quantized tensors): those refusals are not the rule's.

Prints "all ok" and exits 0 when both hold. With --write-manifest, records
torch's verdict on the repository's fixtures in
tests/fixtures/pytorch/weights_only.json, which the Rust test
crates/tensorfile-pytorch/tests/it/weights_only.rs checks tensorfile against.

Run with the tools venv, after `cargo build -p tensorfile-cli`:
    /work/venvs/tools/bin/python scripts/check_pickle_rule.py [--write-manifest]
"""

import io
import json
import re
import os
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("TENSORFILE_BIN", ROOT / "target/debug/tensorfile"))
SHARED = Path("/work/shared/fixtures/pytorch")
MANIFEST = ROOT / "tests/fixtures/pytorch/weights_only.json"
SUFFIXES = {".pt", ".pth", ".bin", ".ckpt"}
# What tensorfile says when the pickle rule itself refuses a file: an opcode
# torch refuses, or a global off the allow-list given without a reason (a
# reason, "is not allowed: quantized tensors have no safetensors
# equivalent", is a refusal of what safetensors cannot hold, not the rule's).
RULE = re.compile(r"does not accept it|is not allowed(?!:)")


def checkpoints():
    """(label, path, in the repository) of every checkpoint fixture."""
    found = []
    for base in (ROOT / "tests/fixtures/pytorch", ROOT / "tests/fixtures/real"):
        for p in sorted(base.rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES:
                found.append((str(p.relative_to(ROOT)), p, True))
    if SHARED.is_dir():
        for p in sorted(SHARED.iterdir()):
            if p.is_file() and p.suffix in SUFFIXES:
                found.append((f"shared/{p.name}", p, False))
    return found


def clone_bomb(apply, n=1_000_000, calls=2000):
    """The issue's clone bomb: a memoized tuple of n Nones, POPped, then
    torch.Size applied to it `calls` times (REDUCE or NEWOBJ), in a dict."""
    p = bytearray(b"\x80\x02(" + b"N" * n + b"tq\x000")
    p += b"ctorch\nSize\nq\x010}("
    for i in range(calls):
        key = f"v{i}".encode()
        p += b"X" + len(key).to_bytes(4, "little") + key + b"h\x01h\x00" + apply
    p += b"u."
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", bytes(p))
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def torch_verdict(path):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.load(path, weights_only=True, map_location="cpu")
        return "ok", ""
    except Exception as e:  # noqa: BLE001 - any refusal is a verdict
        text = " ".join(str(e).split())
        # The restricted unpickler's own words, not the advice around them.
        at = text.find("WeightsUnpickler error:")
        return "refused", (text[at:] if at >= 0 else text)[:100]


def tensorfile_verdict(path):
    o = subprocess.run([str(BIN), "inspect", "--json", str(path)], capture_output=True, text=True)
    if o.returncode == 0:
        return "ok", ""
    # With --json the error is a JSON object on stdout.
    return "refused", " ".join((o.stderr + o.stdout).split())


def main():
    if not BIN.exists():
        sys.exit(f"{BIN}: build it first (cargo build -p tensorfile-cli)")
    tmp = Path(tempfile.mkdtemp())
    files = checkpoints()
    for name, op in (("clone_bomb_reduce", b"R"), ("clone_bomb_newobj", b"\x81")):
        path = tmp / f"{name}.pt"
        path.write_bytes(clone_bomb(op))
        files.append((f"generated/{name}.pt", path, False))
    manifest, bad = {}, []
    print(f"{'file':58} {'torch':8} {'tensorfile':10} verdict")
    for label, path, in_repo in files:
        t, t_why = torch_verdict(path)
        f, f_why = tensorfile_verdict(path)
        by_rule = f == "refused" and RULE.search(f_why) is not None
        if t == "refused" and f == "ok":
            verdict = "BAD: torch refuses, tensorfile accepts"
        elif t == "ok" and by_rule:
            verdict = "BAD: torch accepts, the rule refuses"
        else:
            verdict = "ok"
        if verdict != "ok":
            bad.append(label)
        print(f"{label:58} {t:8} {f:10} {verdict}")
        if t_why and t == "refused":
            print(f"    torch: {t_why}")
        if f_why:
            print(f"    tensorfile: {f_why[:160]}")
        if in_repo:
            manifest[label] = {"torch": t, **({"torch_error": t_why} if t_why else {})}
    if "--write-manifest" in sys.argv:
        about = (
            "torch.load(weights_only=True) on each checkpoint fixture, torch "
            f"{torch.__version__}, written by scripts/check_pickle_rule.py"
        )
        MANIFEST.write_text(json.dumps({"about": about, "files": manifest}, indent=1) + "\n")
        print(f"wrote {MANIFEST.relative_to(ROOT)}")
    if bad:
        print(f"{len(bad)} disagreement(s): {', '.join(bad)}")
        sys.exit(1)
    print("all ok")


if __name__ == "__main__":
    main()
