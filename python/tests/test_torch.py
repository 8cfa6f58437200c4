"""torch: zero-copy tensors, every dtype torch has, the fixtures rewritten
byte for byte through torch, and (when the reference wheel is installed
beside) the same bytes and tensors as the reference. Skipped without torch
(CI); run by hand where torch is installed."""

import hashlib
import sys

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open

from conftest import FIXTURES, manifest
from test_zero_copy import mappings_of

torch = pytest.importorskip("torch")
import tensorfile.torch as tt  # noqa: E402

VALID = sorted((FIXTURES / "valid").glob("*.safetensors"))


def raw(t):
    """A tensor's bytes as uint8 (any dtype, any rank)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def test_mmap_tensors_view_the_map(tmp_path):
    path = tmp_path / "w.safetensors"
    tt.save_file({"w": torch.arange(100_000, dtype=torch.float32)}, path)
    with safe_open(path, "pt") as f:
        t = f.get_tensor("w")
    if sys.platform.startswith("linux"):
        inside = [m for m in mappings_of(path) if m[0] <= t.data_ptr() < m[1]]
        assert inside and inside[0][2].startswith("rw") and inside[0][2][3] == "p"
    t[0] = 5
    assert tt.load_file(path)["w"][0] == 0


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_fixture_through_torch(path):
    described = manifest(path)
    if any(t["dtype"] in ("F6_E2M3", "F6_E3M2") for t in described["tensors"]):
        pytest.skip("torch has no F6 dtype")
    loaded = tt.load_file(path)
    with safe_open(path, "pt") as f:
        for t in described["tensors"]:
            a = loaded[t["name"]]
            b = f.get_tensor(t["name"])
            assert a.dtype == b.dtype == tt._getdtype(t["dtype"])
            data = raw(a).numpy().tobytes() if a.numel() else b""
            assert hashlib.sha256(data).hexdigest() == t["sha256"]
    assert tt.save(loaded, metadata=described["metadata"]) == path.read_bytes()


def test_dtypes_round_trip():
    names = ["bool", "uint8", "int8", "int16", "uint16", "float16", "bfloat16", "int32", "uint32",
             "float32", "float64", "int64", "uint64", "complex64", "float8_e4m3fn", "float8_e4m3fnuz",
             "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]
    tensors = {}
    for name in names:
        dtype = getattr(torch, name, None)
        if dtype is not None:
            tensors[name] = torch.arange(6, dtype=torch.float32).reshape(2, 3).abs().to(dtype)
    back = tt.load(tt.save(tensors))
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype
        assert torch.equal(raw(back[name]), raw(t))


def test_float4_packed(tmp_path):
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("torch without float4_e2m1fn_x2")
    t = torch.tensor([[0x12, 0x34], [0x56, 0x78]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    path = tmp_path / "f4.safetensors"
    tt.save_file({"p": t}, path)
    with safe_open(path, "pt") as f:
        assert f.get_slice("p").get_shape() == [2, 4]
        got = f.get_tensor("p")
        assert got.dtype == torch.float4_e2m1fn_x2 and tuple(got.shape) == (2, 2)
        assert torch.equal(got.view(torch.uint8), t.view(torch.uint8))
        part = f.get_slice("p")[1:]
        assert tuple(part.shape) == (1, 2) and part.view(torch.uint8).tolist() == [[0x56, 0x78]]


def test_cast_on_load(tmp_path):
    path = tmp_path / "c.safetensors"
    tt.save_file({"w": torch.tensor([1.5, -2.25, 3.0]), "i": torch.arange(3)}, path)
    with safe_open(path, "pt") as f:
        assert f.get_tensor("w", dtype=torch.bfloat16).dtype == torch.bfloat16
        assert f.get_tensor("w", dtype="bf16").tolist() == [1.5, -2.25, 3.0]
    back = tt.load_file(path, dtype="f16")
    assert back["w"].dtype == torch.float16 and back["i"].dtype == torch.int64


def test_shared_tensors():
    a = torch.zeros((3, 3))
    with pytest.raises(RuntimeError, match="share memory"):
        tt.save({"a": a, "b": a[:1]})
    assert tt._find_shared_tensors({"a": a, "b": a[:1], "c": torch.ones(2)}) == [{"a", "b"}, {"c"}]
    # Overlap counts from the widest span so far, not the previous one.
    base = torch.zeros(10)
    assert tt._find_shared_tensors({"x": base[0:10], "y": base[1:2], "z": base[5:6]}) == [{"x", "y", "z"}]


def test_save_model_and_load_model(tmp_path):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = self.a

    model = Tied()
    path = tmp_path / "m.safetensors"
    tt.save_model(model, path, metadata={"mine": "kept"})
    with safe_open(path, "pt") as f:
        assert f.metadata() == {"mine": "kept", "b.bias": "a.bias", "b.weight": "a.weight"}
    other = Tied()
    missing, unexpected = tt.load_model(other, path)
    assert (missing, unexpected) == ([], [])
    assert torch.equal(other.b.weight, model.a.weight)


def test_errors_as_the_reference():
    with pytest.raises(ValueError, match="Expected a dict"):
        tt.save_file("notadict", "x")
    with pytest.raises(ValueError, match="expected torch.Tensor"):
        tt.save({"a": {"b": 1}})
    with pytest.raises(ValueError, match="non contiguous"):
        tt.save({"a": torch.zeros(4, 4).t()})
    with pytest.raises(SafetensorError, match="Unknown dtype"):
        tt.save({"a": torch.zeros(2, dtype=torch.complex128)})


def test_same_as_the_reference_wheel(tmp_path):
    reference = pytest.importorskip("safetensors.torch")
    if reference.__name__.startswith("tensorfile"):
        pytest.skip("safetensors is aliased to tensorfile here")
    gen = torch.Generator().manual_seed(0)
    tensors = {
        "emb": torch.randn(64, 32, generator=gen).to(torch.bfloat16),
        "ln": torch.randn(32, generator=gen),
        "ids": torch.arange(7),
        "mask": torch.tensor([True, False]),
        "f8": torch.randn(5, generator=gen).to(torch.float8_e4m3fn),
        "empty": torch.zeros(0, 3),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }
    # One key: the reference writes several in its hash map's order.
    meta = {"format": "pt"}
    assert tt.save(tensors, metadata=meta) == reference.save(tensors, metadata=meta)
    path = tmp_path / "r.safetensors"
    reference.save_file(tensors, path, metadata=meta)
    ours = tt.load_file(path)
    theirs = reference.load_file(path)
    assert list(ours) == sorted(theirs) or set(ours) == set(theirs)
    for name in theirs:
        assert ours[name].dtype == theirs[name].dtype
        assert torch.equal(raw(ours[name]), raw(theirs[name]))
    with safe_open(path, "pt") as f:
        import safetensors

        with safetensors.safe_open(str(path), "pt") as g:
            assert f.keys() == g.keys() and f.offset_keys() == g.offset_keys()
            assert f.metadata() == g.metadata()
            s, r = f.get_slice("emb"), g.get_slice("emb")
            for index in [(slice(1, 9), slice(None, None, 3)), 5, (Ellipsis, 2), slice(None, 64)]:
                assert torch.equal(s[index], r[index])


def test_numpy_same_as_the_reference_wheel():
    reference = pytest.importorskip("safetensors.numpy")
    if reference.__name__.startswith("tensorfile"):
        pytest.skip("safetensors is aliased to tensorfile here")
    rng = np.random.default_rng(3)
    for _ in range(20):
        tensors = {
            f"t{i}": rng.standard_normal(rng.integers(0, 5, size=rng.integers(0, 4))).astype(
                rng.choice([np.float32, np.float16, np.int8, np.int64, np.uint16, np.bool_])
            )
            for i in range(rng.integers(1, 6))
        }
        assert tensorfile.numpy.save(tensors) == reference.save(tensors)
