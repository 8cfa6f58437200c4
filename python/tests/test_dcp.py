"""Consolidating a torch distributed checkpoint (tests/fixtures/dcp, written
by torch with scripts/make_dcp_fixture.py): the tensors torch saved, byte for
byte, in one file or in the set torch's mapping says; broken checkpoints and
other inputs refused, nothing written. Without torch."""

import hashlib
import json
import os
import shutil

import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open

from conftest import FIXTURES

DCP = FIXTURES / "dcp"
MANIFEST = json.loads((DCP / "manifest.json").read_text())


def tensor_bytes(paths):
    """Name -> (dtype, shape, sha256 of the bytes) of every tensor in paths."""
    out = {}
    for path in paths:
        with safe_open(str(path), framework="numpy") as f:
            for name in f.keys():
                a = f.get_tensor(name)
                view = f.get_slice(name)
                out[name] = (view.get_dtype(), list(view.get_shape()), hashlib.sha256(a.tobytes()).hexdigest())
    return out


def check(found):
    assert sorted(found) == sorted(MANIFEST["tensors"])
    for name, entry in MANIFEST["tensors"].items():
        assert found[name] == (entry["dtype"], entry["shape"], entry["sha256"]), name


def test_consolidate_to_a_set_and_to_one_file(tmp_path):
    out = tmp_path / "model"
    report = tensorfile.consolidate_dcp(DCP / "two_ranks", out)
    assert report["dcp_ranks"] == 2
    assert report["tensors"] == 11
    assert [os.path.basename(f) for f in report["files"]] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    for name, k in MANIFEST["fqn_to_index_mapping"].items():
        assert index["weight_map"][name] == f"model-0000{k}-of-00002.safetensors"
    check(tensor_bytes(sorted(out.glob("*.safetensors"))))
    one = tmp_path / "one.safetensors"
    report = tensorfile.consolidate_dcp(DCP / "two_ranks", one, sync=False)
    assert "files" not in report and report["dcp_ranks"] == 2
    check(tensor_bytes([one]))


def test_refusals_leave_nothing(tmp_path):
    # Not a DCP checkpoint: a safetensors set is merge's other input.
    with pytest.raises(SafetensorError, match="not a directory holding a torch DCP"):
        tensorfile.consolidate_dcp(DCP / "torch_consolidated", tmp_path / "x.safetensors")
    broken = tmp_path / "in"
    shutil.copytree(DCP / "two_ranks", broken)
    victim = broken / "shard-00002-model-00002-of-00002.safetensors"
    data = victim.read_bytes()
    victim.write_bytes(data[:-5])
    with pytest.raises(SafetensorError, match="shard-00002-model-00002-of-00002"):
        tensorfile.consolidate_dcp(broken, tmp_path / "out")
    victim.write_bytes(data)
    # Rank 1's pieces of output file 2 missing: the tensors it began have
    # gaps. (A missing file holding only whole tensors, or only the last
    # pieces, cannot be noticed: the files do not record the full shapes.)
    (broken / "shard-00001-model-00002-of-00002.safetensors").unlink()
    with pytest.raises(SafetensorError, match="its pieces cover"):
        tensorfile.consolidate_dcp(broken, tmp_path / "out.safetensors")
    assert sorted(os.listdir(tmp_path)) == ["in"]
