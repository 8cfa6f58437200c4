#!/usr/bin/env python3
"""transformers and diffusers load what `tensorfile convert` makes of the
PyTorch checkpoints in tests/fixtures/real with the same tensors and the
same outputs as the `.bin` files loaded by the library itself (issue 15
items 2 to 4).

Run by hand, in the tools venv (transformers 4.57, diffusers 0.39) and in
the tf5 venv (transformers 5.x; the diffusers part is skipped where
diffusers is not installed):

    /work/venvs/tools/bin/python scripts/check_pytorch_convert.py [path/to/tensorfile]
    /work/venvs/tf5/bin/python scripts/check_pytorch_convert.py [path/to/tensorfile]

(the binary defaults to target/release/tensorfile). For each case the
input is converted with the binary into a fresh directory beside the
fixture's config files; the original directory (the `.bin` files) and the
converted one are both loaded with `from_pretrained`, and must give:

- the same state dict (names, dtypes, bytes), with no missing or
  unexpected key and nothing left on the meta device in the converted one,
  the output embedding still tied to the input embedding where it was;
- bit-identical outputs on the same input (token ids [1, 2, 3, 4, 5]; T5:
  the same ids as decoder_input_ids). The logits the fixture script
  recorded from the model it saved are compared too, for the record.
  The UNet (torch.randn(1, 3, 8, 8) after torch.manual_seed(0), timestep
  10): diffusers' CPU kernels round in the last bits differently with the
  tensors' addresses, so the same weights loaded from the .bin and from
  any safetensors file (diffusers' own saves included) differ by ~6e-7 as
  loaded; its forward must be bit-identical to that of diffusers' own
  safetensors save of the same layout (one file, or 50KB shards), and to
  the .bin's once both models' tensors are copied to fresh memory.

Cases:
- real/tied_bin/{llama,qwen2,gpt2,t5,bert_mlm}/bin/pytorch_model.bin:
  `convert pytorch_model.bin model.safetensors`;
- real/sharded/llama_tied_bin: `convert DIR OUTDIR` (a sharded set with
  its index);
- real/sharded/unet_bin: `convert diffusion_pytorch_model.bin`, and the
  same file indexed as a one-shard diffusers .bin set converted with
  `--max-shard-size 50KB` (four shards and their index);
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


def same_state_dict(theirs, ours):
    """Whether two models hold the same tensors: names, dtypes, bytes."""
    a, b = theirs.state_dict(), ours.state_dict()
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def transformers_model(cls, d):
    model, info = cls.from_pretrained(str(d), output_loading_info=True)
    return model.eval(), info


def logits_of(model):
    ids = torch.tensor([INPUT_IDS])
    with torch.no_grad():
        if getattr(model.config, "is_encoder_decoder", False):
            return model(input_ids=ids, decoder_input_ids=ids).logits
        return model(input_ids=ids).logits


def tied(model):
    out = model.get_output_embeddings()
    return out is not None and out.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def check_transformers(case, original, converted, cls_name, want):
    import transformers
    transformers.logging.set_verbosity_error()
    cls = getattr(transformers, cls_name)
    theirs, _ = transformers_model(cls, original)
    ours, info = transformers_model(cls, converted)
    meta = [n for n, t in list(ours.named_parameters()) + list(ours.named_buffers())
            if t.device.type == "meta"]
    missing = list(info.get("missing_keys", []))
    unexpected = list(info.get("unexpected_keys", []))
    same_sd = same_state_dict(theirs, ours)
    a, b = hexes(logits_of(theirs)), hexes(logits_of(ours))
    same_out = a == b
    recorded = b == want["f32_hex"]
    ties = (tied(theirs), tied(ours))
    ok = same_sd and same_out and not meta and not missing and not unexpected and ties[0] == ties[1]
    report(case, ok, f"transformers {transformers.__version__} {cls_name}: state dict "
           f"{'equal' if same_sd else 'DIFFERS'} to the .bin's, logits "
           f"{'bit-identical' if same_out else 'DIFFER'} to the .bin's ({len(b)} values; "
           f"{'and' if recorded else 'not'} to the recorded ones), missing {missing}, unexpected "
           f"{unexpected}, meta {meta}, output embedding tied {ties[1]} (.bin: {ties[0]})")


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
        check_transformers(f"tied_bin/{model}", src, d, spec["class"], spec["logits"])


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
    check_transformers("sharded/llama_tied_bin", src, d, spec["class"], spec["logits"])


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

    def forward(model):
        torch.manual_seed(0)
        sample = torch.randn(1, 3, 8, 8)
        with torch.no_grad():
            return model(sample, timestep=10).sample

    def fresh(model):
        # The same values in memory of torch's own: diffusers' CPU kernels
        # give results that differ in the last bits with the tensors'
        # addresses (from a .bin they are aligned, from a mapped
        # safetensors file not), whatever file they came from.
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                t.data = t.data.clone()
        return model

    load = lambda d: diffusers.UNet2DModel.from_pretrained(str(d)).eval()  # noqa: E731
    theirs = load(src)
    a = forward(theirs)
    a_fresh = forward(fresh(load(src)))
    for case, d, own_dir in [
        ("sharded/unet_bin", single, "unet_safetensors"),
        ("sharded/unet_bin as a .bin set, 50KB shards", sharded, "unet_sharded_safetensors"),
    ]:
        # diffusers' own safetensors save of the same model and layout.
        own = forward(load(REAL / "sharded" / own_dir))
        ours = load(d)
        b = forward(ours)
        b_fresh = forward(fresh(load(d)))
        same_sd = same_state_dict(theirs, ours) and ours.state_dict().keys() == sd.keys()
        same_own = hexes(b) == hexes(own)
        same_fresh = hexes(b_fresh) == hexes(a_fresh)
        report(case, same_sd and same_own and same_fresh,
               f"diffusers {diffusers.__version__} UNet2DModel: state dict {'equal' if same_sd else 'DIFFERS'} "
               f"to the .bin's; forward ({b.numel()} values) {'bit-identical' if same_own else 'DIFFERS'} to "
               f"diffusers' own {own_dir} save's, {'bit-identical' if same_fresh else 'DIFFERS'} to the .bin's "
               f"with both models' tensors copied to fresh memory; as loaded, "
               f"{'bit-identical' if hexes(a) == hexes(b) else 'max |diff| %.3g' % (a - b).abs().max().item()} "
               f"to the .bin's (diffusers' own save: "
               f"{'bit-identical' if hexes(a) == hexes(own) else 'max |diff| %.3g' % (a - own).abs().max().item()}), "
               f"{'bit-identical' if hexes(b) == want else 'not bit-identical'} to the recorded one")


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
