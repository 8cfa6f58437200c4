"""What the reference cannot do: casts on load, validate, load_pytorch,
convert, quantize and dequantize."""

import json
import os

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open
from tensorfile.numpy import load_file, save_file

from conftest import FIXTURES

ml_dtypes = pytest.importorskip("ml_dtypes")


@pytest.fixture
def floats(tmp_path):
    path = tmp_path / "f.safetensors"
    save_file(
        {
            "w": np.array([1.5, -2.25, 3.0, 1e-3], dtype=np.float32),
            "ids": np.arange(4, dtype=np.int64),
            "big": np.array([1e6, 70000.0], dtype=np.float32),
        },
        path,
        metadata={"format": "np"},
    )
    return path


def test_cast_on_load(floats):
    with safe_open(floats, "np") as f:
        bf = f.get_tensor("w", dtype="bf16")
        assert bf.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(bf.astype(np.float32), np.array([1.5, -2.25, 3.0, 1e-3], np.float32).astype(ml_dtypes.bfloat16).astype(np.float32))
        assert f.get_tensor("w", dtype="float16").dtype == np.float16
        assert f.get_tensor("w", dtype=np.float64).dtype == np.float64
        assert f.get_tensor("w", dtype="F32").dtype == np.float32
        with pytest.raises(SafetensorError, match="unknown dtype"):
            f.get_tensor("w", dtype="float17")
        with pytest.raises(SafetensorError):
            f.get_tensor("ids", dtype="bf16")  # integers need allow_int
        every = f.get_tensors(dtype="f16")
        assert every["w"].dtype == np.float16
    arrays = load_file(floats, dtype="bf16")
    assert arrays["w"].dtype == ml_dtypes.bfloat16 and arrays["ids"].dtype == np.int64


def test_validate_set_and_garbage(tmp_path):
    report = tensorfile.validate(FIXTURES / "real" / "sharded" / "unet_sharded_safetensors")
    assert report["valid"], report
    (tmp_path / "x.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{}")
    report = tensorfile.validate(tmp_path / "x.safetensors")
    assert report == {
        "file": str(tmp_path / "x.safetensors"),
        "valid": False,
        "rule": 1,
        "error": report["error"],
        "warnings": [],
    }
    assert "rule 1" in report["error"]


def test_load_pytorch_key_and_name():
    ckpt = FIXTURES / "pytorch" / "zip_checkpoint_nested.pt"
    every = tensorfile.load_pytorch(ckpt)
    assert every and all(isinstance(v, np.ndarray) for v in every.values())
    first = next(iter(every))
    if "." in first:
        key = first.split(".")[0]
        part = tensorfile.load_pytorch(ckpt, key=key)
        assert set(part) == {n[len(key) + 1 :] for n in every if n.startswith(key + ".")}
    with pytest.raises(FileNotFoundError):
        tensorfile.load_pytorch("/nonexistent.pt")
    with pytest.raises(SafetensorError, match="eval|not allow"):
        tensorfile.load_pytorch(FIXTURES / "pytorch" / "evil_builtins_eval.pt")


def test_convert_file(floats, tmp_path):
    out = tmp_path / "bf16.safetensors"
    summary = tensorfile.convert(floats, out, "bf16")
    assert summary["cast"] == 2 and summary["tensors"] == 3 and summary["files"] == [str(out)]
    with safe_open(out, "np") as f, safe_open(floats, "np") as g:
        assert f.metadata() == {"format": "np"}
        assert f.get_slice("w").get_dtype() == "BF16" and f.get_slice("ids").get_dtype() == "I64"
        np.testing.assert_array_equal(f.get_tensor("w"), g.get_tensor("w", dtype="bf16"))


def test_convert_counts_losses_and_strict_refuses(floats, tmp_path):
    out = tmp_path / "f8.safetensors"
    summary = tensorfile.convert(floats, out, "f8_e4m3")
    assert summary["losses"]["big"]["to_nan"] == 2
    refused = tmp_path / "strict.safetensors"
    with pytest.raises(SafetensorError):
        tensorfile.convert(floats, refused, "f8_e4m3", strict=True)
    assert not refused.exists()
    assert sorted(os.listdir(tmp_path)) == sorted(["f.safetensors", "f8.safetensors"])


def test_convert_refuses_its_input_and_int_without_allow(floats):
    with pytest.raises(SafetensorError):
        tensorfile.convert(floats, floats, "bf16")
    with pytest.raises(SafetensorError, match="allow_int"):
        tensorfile.convert(floats, floats.with_name("i.safetensors"), "i8")


def test_convert_pytorch_checkpoint(tmp_path):
    ckpt = FIXTURES / "pytorch" / "zip_simple.pt"
    out = tmp_path / "zip.safetensors"
    summary = tensorfile.convert(ckpt, out)
    assert summary["input_format"] == "pytorch" and summary["tensors"] == 2
    expected = tensorfile.load_pytorch(ckpt)
    got = load_file(out)
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_convert_set_keeps_its_shards(tmp_path):
    src = FIXTURES / "real" / "sharded" / "unet_sharded_safetensors"
    out = tmp_path / "bf16"
    summary = tensorfile.convert(src, out, "bf16")
    assert len(summary["files"]) == 4 and summary["index"]
    with safe_open(out, "np") as f, safe_open(src, "np") as g:
        assert f.keys() == g.keys()
        name = g.keys()[0]
        np.testing.assert_array_equal(f.get_tensor(name), g.get_tensor(name, dtype="bf16"))


def test_quantize_int4_matches_the_fixture(tmp_path):
    fixture = FIXTURES / "quant" / "int4_g32_sym.json"
    described = json.loads(fixture.read_text())
    source = tmp_path / "float.safetensors"
    w = described["quantized_from"]["layer.weight"]
    with safe_open(FIXTURES / "quant" / "int4_g32_sym.safetensors", "np") as f:
        bias = f.get_tensor("layer.bias")
    save_file(
        {"layer.weight": np.array(w["values"], np.float32).reshape(w["shape"]), "layer.bias": bias},
        source,
        metadata={"format": "tinyllm"},
    )
    quantized = tmp_path / "q.safetensors"
    summary = tensorfile.quantize(source, quantized, "int4-g32-sym")
    assert summary["quantized"] == ["layer.weight"]
    assert quantized.read_bytes() == (FIXTURES / "quant" / "int4_g32_sym.safetensors").read_bytes()
    back = tmp_path / "dq.safetensors"
    summary = tensorfile.dequantize(quantized, back, "F32")
    assert [d["name"] for d in summary["dequantized"]] == ["layer.weight"]
    d = described["dequantized"]["layer.weight"]
    np.testing.assert_array_equal(
        load_file(back)["layer.weight"], np.array(d["values"], np.float32).reshape(d["shape"])
    )


def test_quantize_mlx_and_dequantize_with_parameters(tmp_path):
    rng = np.random.default_rng(5)
    source = tmp_path / "m.safetensors"
    save_file({"l.weight": rng.standard_normal((8, 128)).astype(np.float32)}, source)
    out = tmp_path / "mlx.safetensors"
    summary = tensorfile.quantize(source, out, "mlx-affine", bits=4, group_size=64)
    assert summary["bits"] == 4 and summary["group_size"] == 64 and summary["mode"] == "affine"
    back = tmp_path / "back.safetensors"
    tensorfile.dequantize(out, back, "F32", bits=4, group_size=64)
    restored = load_file(back)["l.weight"]
    original = load_file(source)["l.weight"]
    assert restored.shape == original.shape
    assert np.max(np.abs(restored - original)) < 0.5
    with pytest.raises(SafetensorError):
        tensorfile.quantize(source, tmp_path / "bad.safetensors", "mlx-affine", bits=3)


def test_inspect_file_matches_the_manifest():
    path = FIXTURES / "valid" / "every_dtype.safetensors"
    described = json.loads(path.with_suffix(".json").read_text())
    info = tensorfile.inspect(path, hash=True)
    assert info["size"] == described["size"] and info["header_len"] == described["header_len"]
    assert info["metadata"] == described["metadata"]
    for got, want in zip(info["tensors"], described["tensors"]):
        assert (got["name"], got["dtype"], got["shape"], got["data_offsets"], got["sha256"]) == (
            want["name"],
            want["dtype"],
            want["shape"],
            want["data_offsets"],
            want["sha256"],
        )
    assert info["warnings"] == [] and "parameters" in info and "misaligned_tensors" in info


def test_inspect_set_checkpoint_and_quantized():
    info = tensorfile.inspect(FIXTURES / "real" / "sharded" / "unet_sharded_safetensors")
    assert info["totals"]["shards"] == 4 and len(info["shards"]) == 4
    assert all("shard" in t for t in info["tensors"])
    ckpt = tensorfile.inspect(FIXTURES / "pytorch" / "zip_simple.pt", hash=True)
    assert ckpt["format"].startswith("PyTorch zip") and [t["name"] for t in ckpt["tensors"]] == ["a", "b"]
    assert ckpt["tensors"][0]["sha256"] == "e2c0a71510b5394df7773b63fb5f54372b84c3564e67811bde7d665be227976d"
    q = tensorfile.inspect(FIXTURES / "quant" / "int4_g32_sym.safetensors")
    assert [w["name"] for w in q["quantized"]] == ["layer.weight"] and q["quantized_problem"] is None
    with pytest.raises(SafetensorError):
        tensorfile.inspect(FIXTURES / "invalid" / "overlap.safetensors")


def test_inspect_gguf_is_the_commands_description():
    info = tensorfile.inspect(FIXTURES / "gguf" / "files" / "tensors_v3.gguf", hash=True)
    assert info["format"] == "gguf" and info["version"] == 3
    assert sum(t["tensors"] for t in info["types"].values()) == len(info["tensors"])
    assert all(len(t["sha256"]) == 64 for t in info["tensors"])
