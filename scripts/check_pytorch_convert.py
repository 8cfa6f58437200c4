#!/usr/bin/env python3
"""transformers and diffusers load what `tensorfile convert` makes of the
PyTorch checkpoints in tests/fixtures/real, with the original models'
outputs bit for bit (issue 15 items 2 to 4).

Run by hand, in the tools venv (transformers 4.57, diffusers 0.39) and in
the tf5 venv (transformers 5.x; the diffusers part is skipped where
diffusers is not installed):

    /work/venvs/tools/bin/python scripts/check_pytorch_convert.py [path/to/tensorfile]
    /work/venvs/tf5/bin/python scripts/check_pytorch_convert.py [path/to/tensorfile]

(the binary defaults to target/release/tensorfile). For each case the
input is converted with the binary into a fresh directory beside the
fixture's config files, loaded with `from_pretrained`, and run as the
fixture script ran the original:

- real/tied_bin/{llama,qwen2,gpt2,t5,bert_mlm}/bin/pytorch_model.bin:
  `convert pytorch_model.bin model.safetensors`; the model (the manifest's
  class) must load with no missing key and nothing on the meta device,
  its output embedding tied to the input embedding, and give the recorded
  logits on token ids [1, 2, 3, 4, 5] (T5: the same ids as
  decoder_input_ids);
- real/sharded/llama_tied_bin: `convert DIR OUTDIR` (a sharded set with
  its index), the same checks;
- real/sharded/unet_bin: `convert diffusion_pytorch_model.bin`, and the
  same file indexed as a one-shard diffusers .bin set converted with
  `--max-shard-size 50KB` (four shards and their index): UNet2DModel must
  load both and give the recorded forward output;
- real/checkpoint/legacy_train_checkpoint.pt with `--key model`: the
  tensors equal torch.load(...)["model"] exactly.

Prints one line per case and exits 1 on any difference.
"""

import json
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real"
BIN = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "release" / "tensorfile"
INPUT_IDS = [1, 2, 3, 4, 5]
failures = []


def hexes(t):
    f = t.detach().float().cpu().contiguous().flatten().tolist()
    return ["%08x" % struct.unpack("<I", struct.pack("<f", v))[0] for v in f]


def tensorfile(*args):
    r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tensorfile {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip()


def report(case, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {case}: {detail}")
    if not ok:
        failures.append(case)


def check_transformers(case, d, cls_name, want):
    import transformers
    transformers.logging.set_verbosity_error()
    cls = getattr(transformers, cls_name)
    model, info = cls.from_pretrained(str(d), output_loading_info=True)
    model.eval()
    meta = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
            if t.device.type == "meta"]
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight.data_ptr() == emb.data_ptr()
    ids = torch.tensor([INPUT_IDS])
    with torch.no_grad():
        if getattr(model.config, "is_encoder_decoder", False):
            logits = model(input_ids=ids, decoder_input_ids=ids).logits
        else:
            logits = model(input_ids=ids).logits
    got = hexes(logits)
    same = got == want["f32_hex"]
    missing = info.get("missing_keys", [])
    ok = same and not meta and not missing and tied
    report(case, ok, f"transformers {transformers.__version__} {cls_name}: logits "
           f"{'bit-identical' if same else 'DIFFER'} ({len(got)} values), missing keys {missing}, "
           f"meta tensors {meta}, output embedding tied {tied}")


def tied_bins(tmp):
    m = json.loads((REAL / "tied_bin" / "manifest.json").read_text())
    for model, spec in m["models"].items():
        src = REAL / "tied_bin" / model / "bin"
        d = tmp / f"tied_{model}"
        d.mkdir()
        for f in src.iterdir():
            if f.suffix == ".json":
                shutil.copy(f, d / f.name)
        line = tensorfile("convert", "--no-sync", src / "pytorch_model.bin", d / "model.safetensors")
        print(f"     {line}")
        check_transformers(f"tied_bin/{model}", d, spec["class"], spec["logits"])


def sharded_llama(tmp):
    m = json.loads((REAL / "sharded" / "manifest.json").read_text())
    spec = m["sets"]["llama_tied_bin"]
    src = REAL / "sharded" / "llama_tied_bin"
    d = tmp / "sharded_llama"
    print(f"     {tensorfile('convert', '--no-sync', src, d)}")
    for f in src.iterdir():
        if f.suffix == ".json" and not f.name.endswith(".index.json"):
            shutil.copy(f, d / f.name)
    print(f"     files: {sorted(p.name for p in d.iterdir())}")
    check_transformers("sharded/llama_tied_bin", d, spec["class"], spec["logits"])


def unet(tmp):
    try:
        import diffusers
    except ImportError:
        print("skip sharded/unet_bin: diffusers is not installed in this venv")
        return
    m = json.loads((REAL / "sharded" / "manifest.json").read_text())
    want = m["sets"]["unet"]["forward"]["f32_hex"]
    src = REAL / "sharded" / "unet_bin"
    single = tmp / "unet_single"
    single.mkdir()
    shutil.copy(src / "config.json", single / "config.json")
    print(f"     {tensorfile('convert', '--no-sync', src / 'diffusion_pytorch_model.bin', single / 'diffusion_pytorch_model.safetensors')}")
    # The same weights as a one-shard diffusers .bin set, re-cut at 50KB.
    bin_set = tmp / "unet_bin_set"
    bin_set.mkdir()
    shutil.copy(src / "diffusion_pytorch_model.bin", bin_set / "diffusion_pytorch_model.bin")
    sd = torch.load(src / "diffusion_pytorch_model.bin", map_location="cpu", weights_only=True)
    index = {"metadata": {"total_size": 0},
             "weight_map": {k: "diffusion_pytorch_model.bin" for k in sd}}
    (bin_set / "diffusion_pytorch_model.bin.index.json").write_text(json.dumps(index))
    sharded = tmp / "unet_sharded"
    print(f"     {tensorfile('convert', '--no-sync', '--max-shard-size', '50KB', bin_set, sharded)}")
    shutil.copy(src / "config.json", sharded / "config.json")
    print(f"     files: {sorted(p.name for p in sharded.iterdir())}")
    for case, d in [("sharded/unet_bin", single), ("sharded/unet_bin as a .bin set, 50KB shards", sharded)]:
        back = diffusers.UNet2DModel.from_pretrained(str(d)).eval()
        torch.manual_seed(0)
        sample = torch.randn(1, 3, 8, 8)
        with torch.no_grad():
            out = back(sample, timestep=10).sample
        got = hexes(out)
        same_sd = all(torch.equal(back.state_dict()[k], v) for k, v in sd.items()) and \
            back.state_dict().keys() == sd.keys()
        report(case, got == want and same_sd,
               f"diffusers {diffusers.__version__} UNet2DModel: forward "
               f"{'bit-identical' if got == want else 'DIFFERS'} ({len(got)} values), "
               f"state dict {'equal' if same_sd else 'DIFFERS'}")


def legacy_key(tmp):
    from safetensors.torch import load_file
    src = REAL / "checkpoint" / "legacy_train_checkpoint.pt"
    out = tmp / "legacy_model.safetensors"
    print(f"     {tensorfile('convert', '--no-sync', '--key', 'model', src, out)}")
    theirs = torch.load(src, map_location="cpu", weights_only=True)["model"]
    ours = load_file(str(out))
    same = ours.keys() == theirs.keys() and all(
        ours[k].dtype == theirs[k].dtype and torch.equal(ours[k], theirs[k]) for k in theirs)
    report("checkpoint/legacy_train_checkpoint.pt --key model", same,
           f"{len(ours)} tensors {'equal' if same else 'DIFFER'} to torch.load(...)['model'] "
           f"(torch {torch.__version__})")


def main():
    print(f"tensorfile: {BIN}")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for part in (tied_bins, sharded_llama, unet, legacy_key):
            try:
                part(tmp)
            except Exception as e:
                report(part.__name__, False, f"{type(e).__name__}: {e}")
    print(f"{len(failures)} failed" if failures else "all ok")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
