"""tensorfile.torch.save_distributed over a real torch.distributed (gloo,
CPU): several processes, each with its own tensors, make one set; a rank
that fails leaves nothing under the output's names. Skipped without torch
(the protocol itself is tested with a stand-in in test_sets.py)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

WORKER = textwrap.dedent(
    """
    import json, sys
    import torch, torch.distributed as dist
    from tensorfile.torch import save_distributed
    rank, world, init, out, fail, ref = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    torch.manual_seed(rank)
    mine = {f"layer{rank}.w{i}": torch.randn(64, 8 + i) for i in range(3)}
    mine[f"layer{rank}.b"] = torch.arange(10, dtype=torch.int64) + rank
    if fail == str(rank):
        # A tensor the writer cannot take: this rank fails while the
        # others go on; every rank must raise and nothing be published.
        mine["bad"] = torch.zeros(4)[::2]
    torch.save(mine, ref + f".rank{rank}.pt")
    try:
        summary = save_distributed(mine, out, max_shard_size=4096)
        print(json.dumps({"ok": True, "files": len(summary["files"]), "index": summary["index"] is not None}))
    except Exception as e:
        print(json.dumps({"ok": False, "error": type(e).__name__ + ": " + str(e)}))
    dist.destroy_process_group()
    """
)


def run(tmp_path, world, fail=-1, out=None):
    """Runs ``world`` ranks saving into ``out`` (default: ``tmp_path/out``);
    each rank's tensors are kept beside ``tmp_path/out`` too."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ref = tmp_path / "out"
    out = out or ref
    init = tmp_path / f"init-{world}-{fail}"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(world), str(init), str(out), str(fail), str(ref)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return out, results


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_writes_its_shards_and_rank_0_commits(tmp_path, world):
    from tensorfile.torch import load_file

    out, results = run(tmp_path, world)
    assert all(r["ok"] for r in results), results
    assert len({r["files"] for r in results}) == 1
    names = sorted(os.listdir(out))
    assert "model.safetensors.index.json" in names
    assert not [n for n in names if n.startswith(".tensorfile-set-")]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    loaded = {}
    for shard in sorted(set(index["weight_map"].values())):
        loaded.update(load_file(out / shard))
    for r in range(world):
        mine = torch.load(str(out) + f".rank{r}.pt")
        for name, t in mine.items():
            assert torch.equal(loaded[name], t), name
            assert index["weight_map"][name] in names


def test_a_failing_rank_fails_every_rank_and_publishes_nothing(tmp_path):
    out, results = run(tmp_path, 3, fail=1)
    assert not any(r["ok"] for r in results), results
    assert all("rank 1" in r["error"] for r in results), results
    assert not out.exists() or os.listdir(out) == []


def test_save_distributed_into_a_bucket(tmp_path, monkeypatch):
    from test_sets_buckets import S3

    from tensorfile import safe_open

    store = S3(monkeypatch)
    url = f"s3://{store.bucket}/ckpt"
    _, results = run(tmp_path, 2, out=url)
    assert all(r["ok"] for r in results), results
    with safe_open(f"{url}/model.safetensors.index.json", "pt") as f:
        for r in range(2):
            mine = torch.load(str(tmp_path / "out") + f".rank{r}.pt")
            for name, t in mine.items():
                assert torch.equal(f.get_tensor(name), t), name
    keys = store.keys("ckpt/")
    assert "ckpt/model.safetensors.index.json" in keys
    assert not [k for k in keys if ".tensorfile-set-" in k], keys
