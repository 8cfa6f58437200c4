"""Every fixture of tests/fixtures read through Python, checked against its
manifest: valid files give the manifest's dtypes, shapes, bytes and values;
invalid ones are refused with SafetensorError naming the rule they break;
PyTorch checkpoints give the manifest's tensors or are refused."""

import hashlib
import json

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open
from tensorfile.numpy import load_file, save

from conftest import FIXTURES, manifest

VALID = sorted((FIXTURES / "valid").glob("*.safetensors"))
INVALID = sorted((FIXTURES / "invalid").glob("*.safetensors"))
PYTORCH = json.loads((FIXTURES / "pytorch" / "manifest.json").read_text())["fixtures"]
SUB_BYTE = {"F4", "F6_E2M3", "F6_E3M2"}


def decoded(values):
    out = []
    for v in values:
        if isinstance(v, str):
            out.append(float(v))
        elif isinstance(v, list):
            out.append(complex(v[0], v[1]))
        else:
            out.append(v)
    return out


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_fixture(path):
    described = manifest(path)
    with safe_open(path, "np") as f:
        assert f.offset_keys() == [t["name"] for t in described["tensors"]]
        assert f.keys() == sorted(t["name"] for t in described["tensors"])
        assert f.metadata() == described["metadata"]
        for t in described["tensors"]:
            s = f.get_slice(t["name"])
            assert (s.get_dtype(), s.get_shape()) == (t["dtype"], t["shape"])
            if t["dtype"] in ("F6_E2M3", "F6_E3M2"):
                with pytest.raises(SafetensorError, match="dtype='F32'"):
                    f.get_tensor(t["name"])
                continue
            arr = f.get_tensor(t["name"])
            assert hashlib.sha256(arr.tobytes()).hexdigest() == t["sha256"], t["name"]
            if t["dtype"] not in SUB_BYTE:
                assert list(arr.shape) == t["shape"]
            if t.get("values") is not None:
                expected = np.array(decoded(t["values"])).reshape(t["shape"])
                got = arr.astype(expected.dtype) if arr.dtype.kind not in "biuc" else arr
                np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_fixture_rewrites_to_the_same_bytes(path):
    described = manifest(path)
    if any(t["dtype"] in SUB_BYTE for t in described["tensors"]):
        pytest.skip("numpy holds no sub-byte dtype (torch's test does F4)")
    arrays = load_file(path)
    assert save(arrays, metadata=described["metadata"]) == path.read_bytes()


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_fixture_validates(path):
    report = tensorfile.validate(path)
    assert report["valid"] and report["rule"] is None and report["error"] is None


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_fixture_is_refused_naming_the_rule(path):
    described = manifest(path)
    for backend in ("mmap", "pread"):
        with pytest.raises(SafetensorError) as e:
            safe_open(path, "np", backend=backend)
        assert e.value.rule == described["rule"]
        assert f"rule {described['rule']}" in str(e.value)
        assert path.name in str(e.value)
    with pytest.raises(SafetensorError):
        load_file(path)
    with pytest.raises(SafetensorError):
        tensorfile.numpy.load(path.read_bytes())
    report = tensorfile.validate(path)
    assert not report["valid"] and report["rule"] == described["rule"]


def test_duplicate_keys_are_refused_unlike_the_reference():
    with pytest.raises(SafetensorError, match="duplicate key"):
        safe_open(FIXTURES / "invalid" / "duplicate_tensor.safetensors", "np")


@pytest.mark.parametrize("name", sorted(PYTORCH), ids=str)
def test_pytorch_fixture(name):
    described = PYTORCH[name]
    path = FIXTURES / "pytorch" / name
    expect = described["expect"]
    try:
        tensors = tensorfile.load_pytorch(path)
    except SafetensorError:
        assert "reject" in expect, expect
        return
    assert expect.startswith("ok"), f"{name} should be refused: {expect}"
    listed = described.get("tensors")
    if listed is None:
        return
    assert list(tensors) == list(listed)
    for tname, t in listed.items():
        arr = tensors[tname]
        if t["dtype"] not in SUB_BYTE:
            assert list(arr.shape) == t["shape"], tname
        assert arr.nbytes == t["nbytes"]
        assert hashlib.sha256(arr.tobytes()).hexdigest() == t["sha256"], tname


def test_sharded_directory_opens_as_one_file():
    single = FIXTURES / "real" / "sharded" / "unet_safetensors"
    sharded = FIXTURES / "real" / "sharded" / "unet_sharded_safetensors"
    with safe_open(single, "np") as one, safe_open(sharded, "np") as many:
        assert one.keys() == many.keys()
        assert len(set(many.offset_keys())) == len(many.keys())
        for name in one.keys():
            np.testing.assert_array_equal(one.get_tensor(name), many.get_tensor(name))
        name = one.keys()[0]
        np.testing.assert_array_equal(one.get_slice(name)[:1], many.get_slice(name)[:1])
        index = next(sharded.glob("*.index.json"))
        with safe_open(index, "np") as f:
            assert f.keys() == many.keys()


def test_model_directory_with_one_file(fixtures):
    d = fixtures / "models" / "llama_tiny"
    with safe_open(d, "np") as f, safe_open(d / "model.safetensors", "np") as g:
        assert f.keys() == g.keys()
        assert f.metadata() == g.metadata()


def test_a_checkpoint_is_named_as_such(fixtures):
    with pytest.raises(SafetensorError, match="load_pytorch"):
        safe_open(fixtures / "pytorch" / "zip_simple.pt", "np")
