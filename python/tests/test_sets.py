"""One set, many writers: plan, write from several processes, commit, abort;
and the torch.distributed protocol over a fake group (threads), without
torch."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError
from tensorfile._sets import run_distributed
from tensorfile.numpy import load_file, save_set_parts


def tensors(n=4, size=16):
    return {f"t{i}": np.full(size // 4, i, dtype=np.float32) for i in range(n)}


def specs_of(ts):
    return {name: ("F32", list(a.shape)) for name, a in ts.items()}


def visible(outdir):
    return sorted(n for n in os.listdir(outdir) if not n.startswith("."))


def read_set(outdir):
    index = json.load(open(os.path.join(outdir, "model.safetensors.index.json")))
    out = {}
    for name, file in index["weight_map"].items():
        out[name] = load_file(os.path.join(outdir, file))[name]
    return out


def test_plan_write_commit(tmp_path):
    out = tmp_path / "out"
    ts = tensors()
    plan = tensorfile.plan_set(out, specs_of(ts), writers=2, max_shard_size=32)
    assert plan["writers"] == [0, 1]
    assert os.path.basename(plan["staging"]) == ".tensorfile-set-" + plan["plan_id"]
    # The same plan again, as another process would: the same id.
    assert tensorfile.plan_set(out, specs_of(ts), writers=2, max_shard_size=32) == plan
    save_set_parts({k: ts[k] for k in ("t0", "t1")}, out, 0)
    with pytest.raises(SafetensorError, match="run writer 1"):
        tensorfile.commit_set(out)
    assert visible(out) == []
    staged = save_set_parts(ts, out, 1, sync=False)
    assert [os.path.basename(p) for p in staged] == ["model-00002-of-00002.safetensors"]
    assert visible(out) == []
    summary = tensorfile.commit_set(out)
    assert summary["total_size"] == 64
    assert visible(out) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    assert os.listdir(out) == visible(out) or sorted(os.listdir(out)) == visible(out)
    got = read_set(out)
    for name, a in ts.items():
        np.testing.assert_array_equal(got[name], a)
    with pytest.raises(SafetensorError, match="no set is staged"):
        tensorfile.commit_set(out)


def test_a_different_plan_is_refused_until_aborted(tmp_path):
    ts = tensors()
    tensorfile.plan_set(tmp_path, specs_of(ts), writers=2, max_shard_size=32)
    with pytest.raises(SafetensorError, match="another plan"):
        tensorfile.plan_set(tmp_path, specs_of(ts), writers=1, max_shard_size=32)
    tensorfile.abort_set(tmp_path)
    assert os.listdir(tmp_path) == []
    tensorfile.plan_set(tmp_path, specs_of(ts), writers=1, max_shard_size=32)


def test_wrong_tensors_are_refused(tmp_path):
    ts = tensors()
    tensorfile.plan_set(tmp_path, specs_of(ts), max_shard_size=32)
    with pytest.raises(SafetensorError, match="not among the tensors given"):
        save_set_parts({"t0": ts["t0"]}, tmp_path, 0)
    bad = dict(ts, t1=np.zeros(4, dtype=np.float64))
    with pytest.raises(SafetensorError, match="the plan has F32"):
        save_set_parts(bad, tmp_path, 0)


WRITER = """
import sys
import numpy as np
from tensorfile.numpy import save_set_parts
out, rank = sys.argv[1], int(sys.argv[2])
ts = {f"t{i}": np.full(4, i, dtype=np.float32) for i in range(8)}
save_set_parts(ts, out, rank)
"""


@pytest.mark.parametrize("named", [False, True])
def test_four_processes_then_one_commit(tmp_path, named):
    ts = {f"t{i}": np.full(4, i, dtype=np.float32) for i in range(8)}
    tensorfile.plan_set(tmp_path, specs_of(ts), writers=4, max_shard_size=16)
    env = dict(os.environ)
    if named:
        env["TENSORFILE_NO_TMPFILE"] = "1"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(r)], env=env)
        for r in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    assert visible(tmp_path) == []
    summary = tensorfile.commit_set(tmp_path)
    assert len(summary["files"]) == 8
    got = read_set(tmp_path)
    for name, a in ts.items():
        np.testing.assert_array_equal(got[name], a)
    assert sorted(os.listdir(tmp_path)) == visible(tmp_path)


class FakeDist:
    """torch.distributed's collectives for ranks that are threads."""

    def __init__(self, size):
        self.size = size
        self.barrier_ = threading.Barrier(size)
        self.slots = [None] * size
        self.local = threading.local()

    def get_rank(self):
        return self.local.rank

    def get_world_size(self):
        return self.size

    def barrier(self):
        self.barrier_.wait()

    def all_gather_object(self, out, obj):
        self.barrier_.wait()
        self.slots[self.local.rank] = obj
        self.barrier_.wait()
        out[:] = list(self.slots)
        self.barrier_.wait()

    def broadcast_object_list(self, box, src=0):
        self.barrier_.wait()
        if self.local.rank == src:
            self.slots[0] = list(box)
        self.barrier_.wait()
        box[:] = list(self.slots[0])
        self.barrier_.wait()


def run_ranks(dist, fn):
    results, errors = [None] * dist.size, [None] * dist.size

    def main(rank):
        dist.local.rank = rank
        try:
            results[rank] = fn(rank)
        except Exception as e:  # collected for the test to look at
            errors[rank] = e

    threads = [threading.Thread(target=main, args=(r,)) for r in range(dist.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors


def np_specs(ts, keep):
    from tensorfile.numpy import _specs

    return _specs(ts, keep)


def test_distributed_protocol_with_a_fake_group(tmp_path):
    dist = FakeDist(4)
    # Each rank holds its own tensors; rank 3 holds none.
    parts = [{f"r{r}.t{i}": np.full(4, r * 10 + i, dtype=np.float32) for i in range(r + 1)} for r in range(3)]
    parts.append({})
    keep = []

    def rank_main(rank):
        return run_distributed(dist, np_specs(parts[rank], keep), tmp_path, max_shard_size=32)

    results, errors = run_ranks(dist, rank_main)
    assert errors == [None] * 4
    assert all(r == results[0] for r in results)
    got = read_set(tmp_path)
    assert len(got) == 6
    index = json.load(open(tmp_path / "model.safetensors.index.json"))
    # Each rank's tensors are in shards of its own.
    assert index["weight_map"]["r0.t0"] != index["weight_map"]["r1.t0"]
    np.testing.assert_array_equal(got["r2.t1"], parts[2]["r2.t1"])
    assert sorted(os.listdir(tmp_path)) == visible(tmp_path)


def test_distributed_failure_aborts_on_every_rank(tmp_path):
    dist = FakeDist(3)
    parts = [{f"r{r}.t": np.full(4, r, dtype=np.float32)} for r in range(3)]
    keep = []

    def broken_write(specs, outdir, rank, **kw):
        if rank == 1:
            raise OSError("disk on fire")
        return tensorfile.write_set_parts(specs, outdir, rank, **kw)

    def rank_main(rank):
        return run_distributed(dist, np_specs(parts[rank], keep), tmp_path, write=broken_write)

    _, errors = run_ranks(dist, rank_main)
    for e in errors:
        assert isinstance(e, SafetensorError)
        assert "rank 1: OSError: disk on fire" in str(e)
    assert os.listdir(tmp_path) == []


def test_a_rank_whose_tensors_fail_still_joins_and_all_raise(tmp_path):
    dist = FakeDist(2)
    keep = []

    def rank_main(rank):
        specs = ValueError("non contiguous") if rank == 1 else np_specs({"a": np.zeros(2)}, keep)
        return run_distributed(dist, specs, tmp_path)

    _, errors = run_ranks(dist, rank_main)
    for e in errors:
        assert isinstance(e, SafetensorError)
        assert "rank 1: ValueError: non contiguous" in str(e)
    assert os.listdir(tmp_path) == []
