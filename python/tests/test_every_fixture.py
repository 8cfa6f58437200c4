"""Every fixture file that a manifest describes tensor by tensor, wherever
it is under tests/fixtures (valid/, models/, mlx/, pytorch/, real/...), read
through Python: safetensors files with safe_open, PyTorch checkpoints with
load_pytorch, each tensor's dtype, shape and sha256 as the manifest says.
Files are found by their own sha256, so manifests of any shape are walked
the same way. Non-safetensors inputs (GGUF, npz) are refused, named."""

import hashlib
import json

import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open

from conftest import FIXTURES

SUB_BYTE = {"F4", "F6_E2M3", "F6_E3M2"}


def index_by_hash():
    found = {}
    for path in FIXTURES.rglob("*"):
        if path.is_file() and path.suffix in (".safetensors", ".pt", ".bin", ".pth"):
            found[hashlib.sha256(path.read_bytes()).hexdigest()] = path
    return found


def tensor_lists(node):
    """(file sha256, tensors) for every dict in a manifest that describes a
    file's tensors with their hashes."""
    if isinstance(node, dict):
        digest = node.get("sha256") or node.get("sha256_file")
        tensors = node.get("tensors")
        if isinstance(tensors, dict):
            tensors = [dict(t, name=n) for n, t in tensors.items() if isinstance(t, dict)]
        if isinstance(digest, str) and isinstance(tensors, list) and tensors and all(
            isinstance(t, dict) and "sha256" in t and "name" in t for t in tensors
        ):
            yield digest, tensors
        for value in node.values():
            yield from tensor_lists(value)
    elif isinstance(node, list):
        for value in node:
            yield from tensor_lists(value)


def described_files():
    files = index_by_hash()
    seen = {}
    for manifest in sorted(FIXTURES.rglob("*.json")):
        if "invalid" in manifest.parts:
            continue
        try:
            text = json.loads(manifest.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        for digest, tensors in tensor_lists(text):
            path = files.get(digest)
            if path is not None and path not in seen:
                seen[path] = tensors
    return sorted(seen.items())


DESCRIBED = described_files()


def test_the_walk_finds_the_fixtures():
    kinds = {p.suffix for p, _ in DESCRIBED}
    assert len(DESCRIBED) >= 40 and {".safetensors", ".pt"} <= kinds, [str(p) for p, _ in DESCRIBED]


@pytest.mark.parametrize("path,tensors", DESCRIBED, ids=[str(p.relative_to(FIXTURES)) for p, _ in DESCRIBED])
def test_fixture_tensors(path, tensors):
    if path.suffix == ".safetensors":
        with safe_open(path, "np") as f:
            for t in tensors:
                s = f.get_slice(t["name"])
                if "dtype" in t:
                    assert s.get_dtype() == t["dtype"], t["name"]
                if "shape" in t:
                    assert s.get_shape() == t["shape"], t["name"]
                if s.get_dtype() in ("F6_E2M3", "F6_E3M2"):
                    continue
                data = f.get_tensor(t["name"]).tobytes()
                assert hashlib.sha256(data).hexdigest() == t["sha256"], t["name"]
    else:
        loaded = tensorfile.load_pytorch(path)
        for t in tensors:
            arr = loaded[t["name"]]
            if "shape" in t and t.get("dtype") not in SUB_BYTE:
                assert list(arr.shape) == t["shape"], t["name"]
            assert hashlib.sha256(arr.tobytes()).hexdigest() == t["sha256"], t["name"]


@pytest.mark.parametrize("pattern", ["gguf/**/*.gguf", "npz/**/*.npz", "npz/**/*.npy"])
def test_other_formats_are_named(pattern):
    paths = sorted(FIXTURES.glob(pattern))
    if not paths:
        pytest.skip(f"no {pattern}")
    for path in paths[:5]:
        with pytest.raises(SafetensorError, match="not safetensors"):
            safe_open(path, "np")
