"""One set, many writers, into a bucket: ``plan_set``, ``write_set_parts``
(in processes of their own), ``commit_set``, ``abort_set`` and
``run_distributed`` with ``s3://`` and ``az://`` OUTDIRs, through the
staging the CLI's ``tensorfile shard --plan/--write-part/--commit/--abort``
uses. What a commit publishes is, object by object, what the same steps
write locally; nothing has one of the set's names before the commit; an
abort leaves nothing under the staging prefix.

Against moto (``TENSORFILE_TEST_S3``) and Azurite (``TENSORFILE_TEST_AZURE``),
as test_remote.py: skipped without them, except in CI."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open
from tensorfile._sets import run_distributed
from tensorfile.numpy import load_file

from test_remote import AZURITE_ACCOUNT, AZURITE_KEY, azure_endpoint, azure_put, s3_endpoint, s3_put
from test_sets import FakeDist, np_specs, run_ranks


def tensors():
    """Tensors of several sizes and dtypes, their bytes all different."""
    rng = np.random.default_rng(34)
    return {
        "embed": rng.standard_normal((16, 8)).astype(np.float32),
        "layer0.w": rng.standard_normal((8, 8)).astype(np.float16),
        "layer0.b": np.arange(8, dtype=np.int64),
        "layer1.w": rng.standard_normal((8, 8)).astype(np.float32),
        "layer1.b": np.arange(8, dtype=np.int32),
        "head": rng.standard_normal((8, 16)).astype(np.float32),
    }


def specs_of(ts):
    codes = {np.float32: "F32", np.float16: "F16", np.int64: "I64", np.int32: "I32"}
    return {name: (codes[a.dtype.type], list(a.shape)) for name, a in ts.items()}


WRITER = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from test_sets_buckets import tensors
from tensorfile.numpy import save_set_parts
print("\\n".join(save_set_parts(tensors(), sys.argv[1], int(sys.argv[2]))))
"""


def write_in_processes(out, writers):
    """``save_set_parts`` of each writer, each in a process of its own (the
    store's settings come from the environment); their staged paths."""
    here = os.path.dirname(os.path.abspath(__file__))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, out, str(w), here],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    staged = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        staged += stdout.split()
    return staged


class S3:
    """A fresh bucket in moto, the environment object_store reads set."""

    scheme = "s3"

    def __init__(self, monkeypatch):
        self.endpoint = s3_endpoint()
        self.bucket = "tf-sets-" + hashlib.sha256(os.urandom(8)).hexdigest()[:12]
        s3_put(self.endpoint, self.bucket, acl="private")
        monkeypatch.setenv("AWS_ENDPOINT_URL", self.endpoint)
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
        monkeypatch.delenv("AWS_NO_SIGN_REQUEST", raising=False)

    def request(self, path, query=""):
        # moto takes any signature; unsigned, it would hold the objects
        # private.
        auth = "AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"
        url = f"{self.endpoint}/{self.bucket}/{path}" + (f"?{query}" if query else "")
        req = urllib.request.Request(url, headers={"Authorization": auth})
        with urllib.request.urlopen(req, timeout=30) as answer:
            return answer.read()

    def keys(self, prefix):
        """Every object's key under ``prefix``."""
        query = urllib.parse.urlencode({"list-type": "2", "prefix": prefix})
        root = ET.fromstring(self.request("", query))
        return sorted(e.text for e in root.iter() if e.tag.endswith("}Key"))

    def get(self, key):
        return self.request(key)


class Azure:
    """A fresh container in Azurite, the emulator's settings in the
    environment."""

    scheme = "az"

    def __init__(self, monkeypatch):
        self.endpoint = azure_endpoint()
        self.bucket = "tf-sets-" + hashlib.sha256(os.urandom(8)).hexdigest()[:12]
        azure_put(self.endpoint, self.bucket)
        monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
        monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", self.endpoint)

    def request(self, path, query=None):
        """A GET signed with the account key (SharedKey: Azurite checks it)."""
        query = query or {}
        headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
        canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{self.bucket}" + (f"/{path}" if path else "")
        resource += "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
        to_sign = "GET\n" + "\n" * 11 + canonical_headers + resource
        sig = base64.b64encode(
            hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()
        ).decode()
        headers["Authorization"] = f"SharedKey {AZURITE_ACCOUNT}:{sig}"
        url = f"{self.endpoint}/{AZURITE_ACCOUNT}/{self.bucket}" + (f"/{path}" if path else "")
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            return answer.read()

    def keys(self, prefix):
        root = ET.fromstring(self.request("", {"restype": "container", "comp": "list", "prefix": prefix}))
        return sorted(e.text for e in root.iter("Name"))

    def get(self, key):
        return self.request(key)


@pytest.fixture(params=[S3, Azure], ids=["s3", "az"])
def store(request, monkeypatch):
    return request.param(monkeypatch)


def local_set(tmp_path, ts, **plan):
    """The same steps into a local directory: its files' bytes by name."""
    out = tmp_path / "local"
    tensorfile.plan_set(out, specs_of(ts), **plan)
    for w in range(plan["writers"]):
        tensorfile.numpy.save_set_parts(ts, out, w)
    tensorfile.commit_set(out)
    return {p.name: p.read_bytes() for p in out.iterdir()}


def test_plan_two_writers_commit(store, tmp_path):
    ts = tensors()
    plan_args = dict(writers=2, max_shard_size=600, metadata={"format": "pt"})
    out = f"{store.scheme}://{store.bucket}/out"
    plan = tensorfile.plan_set(out, specs_of(ts), **plan_args)
    names = [f.rsplit("/", 1)[-1] for f in plan["files"]]
    assert len(names) == 3 and plan["writers"] == [0, 1, 0], plan
    assert plan["files"] == [f"{out}/{n}" for n in names]
    staging = f"out/.tensorfile-set-{plan['plan_id']}/"
    assert plan["staging"] == f"{store.scheme}://{store.bucket}/{staging}", plan
    # Every process may stage the same plan.
    assert tensorfile.plan_set(out, specs_of(ts), **plan_args) == plan

    staged = write_in_processes(out, 2)
    assert sorted(staged) == sorted(f"{plan['staging']}{n}" for n in names)
    # Nothing under the set's own names before the commit: all is staged.
    assert store.keys("out/") == sorted([staging + "plan.json"] + [staging + n for n in names])
    with pytest.raises(FileNotFoundError):
        safe_open(f"{out}/model.safetensors.index.json", "np")

    summary = tensorfile.commit_set(out)
    assert summary["files"] == plan["files"]
    assert summary["index"] == f"{out}/model.safetensors.index.json"
    assert summary["total_size"] == sum(a.nbytes for a in ts.values())
    assert store.keys("out/") == sorted(f"out/{n}" for n in names + ["model.safetensors.index.json"])

    # Object by object, what the same steps write locally.
    local = local_set(tmp_path, ts, **plan_args)
    assert sorted(local) == sorted(names + ["model.safetensors.index.json"])
    for name, data in local.items():
        assert store.get(f"out/{name}") == data, name
    # And read back over the URL: the set, and each shard.
    with safe_open(summary["index"], "np") as f:
        assert sorted(f.keys()) == sorted(ts)
        assert f.metadata() == {"format": "pt"}
        for name, a in ts.items():
            assert f.get_tensor(name).tobytes() == a.tobytes(), name
    for url in summary["files"]:
        shard = load_file(url)
        assert shard and all(shard[k].tobytes() == ts[k].tobytes() for k in shard)

    # A set already there: a new plan for it is refused; nothing staged.
    with pytest.raises(SafetensorError, match="already exists"):
        tensorfile.plan_set(out, specs_of(ts), **plan_args)
    with pytest.raises(SafetensorError, match="no set is staged"):
        tensorfile.commit_set(out)
    assert all(".tensorfile-set-" not in k for k in store.keys("out/"))


def test_abort_removes_the_staging_prefix(store):
    ts = tensors()
    out = f"{store.scheme}://{store.bucket}/aborted/"
    plan = tensorfile.plan_set(out, specs_of(ts), writers=2, max_shard_size=600)
    tensorfile.numpy.save_set_parts(ts, out, 0)
    with pytest.raises(SafetensorError, match="run writer 1"):
        tensorfile.commit_set(out)
    assert f"aborted/.tensorfile-set-{plan['plan_id']}/plan.json" in store.keys("aborted/")
    tensorfile.abort_set(out)
    assert store.keys("aborted/") == []
    with pytest.raises(SafetensorError, match="no set is staged"):
        tensorfile.abort_set(out)
    # A writer after the abort: nothing to write into.
    with pytest.raises(SafetensorError, match="no set is staged"):
        tensorfile.numpy.save_set_parts(ts, out, 1)
    assert store.keys("aborted/") == []


def test_run_distributed_into_s3(monkeypatch):
    store = S3(monkeypatch)
    out = f"s3://{store.bucket}/dist"
    dist = FakeDist(2)
    parts = [{f"r{r}.t{i}": np.full(8, r * 10 + i, dtype=np.float32) for i in range(3)} for r in range(2)]
    keep = []

    def rank_main(rank):
        return run_distributed(dist, np_specs(parts[rank], keep), out, max_shard_size=64)

    results, errors = run_ranks(dist, rank_main)
    assert errors == [None, None]
    assert results[0] == results[1]
    assert results[0]["index"] == f"{out}/model.safetensors.index.json"
    index = json.loads(store.get("dist/model.safetensors.index.json"))
    # Each rank's tensors are in shards of its own.
    assert index["weight_map"]["r0.t0"] != index["weight_map"]["r1.t0"]
    with safe_open(results[0]["index"], "np") as got:
        for part in parts:
            for name, a in part.items():
                assert got.get_tensor(name).tobytes() == a.tobytes(), name
    assert all(".tensorfile-set-" not in k for k in store.keys("dist/"))

    # A failing rank: the set is aborted, nothing under the prefix.
    def broken(specs, outdir, rank, **kw):
        if rank == 1:
            raise OSError("disk on fire")
        return tensorfile.write_set_parts(specs, outdir, rank, **kw)

    again = f"s3://{store.bucket}/failed"
    _, errors = run_ranks(dist, lambda r: run_distributed(dist, np_specs(parts[r], keep), again, write=broken))
    assert all(isinstance(e, SafetensorError) and "rank 1: OSError: disk on fire" in str(e) for e in errors)
    assert store.keys("failed/") == []
