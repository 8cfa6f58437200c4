"""Loading across processes without torch: rank plans tile each tensor among
the ranks and read only their bytes; cooperative segments put together are
the tensors, each byte read once (counted by the test HTTP server)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, cooperative_plan, rank_plan, read_cooperative_share
from tensorfile.numpy import load_file, load_rank_share, save_file

from remote_server import Server

RULES = """
*.experts.{E}.* = owner(E)
*.q_proj.weight = split(0)
*.qkv_proj.weight = split(0, sections=3)
*.o_proj.weight = split(1)
*.gate_up_proj.weight = split(1, sections=2)
embed.weight = split(0)
"""


def model() -> dict:
    rng = np.random.default_rng(7)
    t = {"embed.weight": rng.standard_normal((32, 8)).astype(np.float32)}
    for layer in range(2):
        p = f"layers.{layer}"
        t[f"{p}.norm.weight"] = rng.standard_normal(8).astype(np.float32)
        t[f"{p}.q_proj.weight"] = rng.standard_normal((8, 8)).astype(np.float16)
        t[f"{p}.qkv_proj.weight"] = rng.standard_normal((24, 8)).astype(np.float32)
        t[f"{p}.o_proj.weight"] = rng.standard_normal((8, 8)).astype(np.float64)
        t[f"{p}.gate_up_proj.weight"] = rng.integers(0, 100, (8, 16)).astype(np.int32)
        for e in range(3):
            t[f"{p}.experts.{e}.w"] = rng.integers(0, 9, (3, 5)).astype(np.uint8)
    return t


@pytest.fixture
def model_dir(tmp_path):
    t = model()
    names = sorted(t)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for shard, ns in shards.items():
        save_file({n: t[n] for n in ns}, str(tmp_path / shard))
        weight_map.update({n: shard for n in ns})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return tmp_path, t


def join(shares, share, full):
    """The full tensor from the shares of every rank, by the plan."""
    if share.dim is None:
        return shares[0]
    dim = share.dim
    sections = []
    per_rank = [np.split(s, np.cumsum([b - a for a, b in share.parts])[:-1], axis=dim) for s in shares]
    for k in range(len(share.parts)):
        sections.append(np.concatenate([pr[k] for pr in per_rank], axis=dim))
    return np.concatenate(sections, axis=dim)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_shares_put_together_are_the_tensors(model_dir, world):
    path, tensors = model_dir
    loaded = [load_rank_share(str(path), RULES, world, r) for r in range(world)]
    plans = [rank_plan(str(path), RULES, world, r) for r in range(world)]
    assert plans == [rank_plan(str(path), RULES, world, r) for r in range(world)]
    for name, full in tensors.items():
        holders = [r for r in range(world) if name in loaded[r]]
        share = next(s for s in plans[holders[0]] if s.name == name)
        for r in holders:
            got = loaded[r][name]
            assert got.dtype == full.dtype and got.shape == next(s for s in plans[r] if s.name == name).shape
        if ".experts." in name:
            assert holders == [int(name.split(".")[3]) % world]
            np.testing.assert_array_equal(loaded[holders[0]][name], full)
        elif share.dim is None:
            assert holders == list(range(world))
            for r in holders:
                np.testing.assert_array_equal(loaded[r][name], full)
        else:
            assert holders == list(range(world))
            np.testing.assert_array_equal(join([loaded[r][name] for r in range(world)], share, full), full)


def test_fused_sections_give_each_rank_its_part_of_each(model_dir):
    path, tensors = model_dir
    got = load_rank_share(str(path), RULES, 2, 1)["layers.0.qkv_proj.weight"]
    full = tensors["layers.0.qkv_proj.weight"]
    np.testing.assert_array_equal(got, np.concatenate([full[4:8], full[12:16], full[20:24]]))
    got = load_rank_share(str(path), RULES, 2, 0)["layers.1.gate_up_proj.weight"]
    full = tensors["layers.1.gate_up_proj.weight"]
    np.testing.assert_array_equal(got, np.concatenate([full[:, 0:4], full[:, 8:12]], axis=1))


def test_llama_preset_and_errors(model_dir):
    path, _ = model_dir
    plan = {s.name: s for s in rank_plan(str(path), "llama", 2, 0)}
    assert plan["layers.0.o_proj.weight"].dim == 1
    assert plan["layers.0.qkv_proj.weight"].parts == ((0, 4), (8, 12), (16, 20))
    with pytest.raises(SafetensorError, match="rank rules line 2"):
        rank_plan(str(path), "a = split(0)\nb = spread", 2, 0)
    with pytest.raises(SafetensorError, match="no preset named"):
        rank_plan(str(path), "gpt", 2, 0)
    # Naming the set, the tensor and the rule broken.
    with pytest.raises(SafetensorError, match=re.escape(str(path)) + r": tensor \"layers\.0\.o_proj\.weight\": .*does not divide among 3 ranks"):
        rank_plan(str(path), RULES, 3, 0)
    with pytest.raises(SafetensorError, match="outside a world of 2"):
        rank_plan(str(path), RULES, 2, 2)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_cooperative_segments_put_together_are_the_tensors(model_dir, world):
    path, tensors = model_dir
    plan = cooperative_plan(str(path), world)
    assert plan == cooperative_plan(str(path), world)
    assert plan.nbytes % world == 0
    buffer = np.zeros(plan.nbytes, dtype=np.uint8)
    read = 0
    for rank in range(world):
        # Each rank's own buffer; its segment is copied as the collective would.
        mine = np.zeros(plan.nbytes, dtype=np.uint8)
        read += read_cooperative_share(str(path), world, rank, mine)
        start, stop = plan.segment(rank)
        assert not mine[:start].any() and not mine[stop:].any()
        buffer[start:stop] = mine[start:stop]
    assert read == sum(t.nbytes for t in tensors.values())
    views = tensorfile._ranks.view_tensors(plan, buffer)
    assert views.keys() == tensors.keys()
    for name, full in tensors.items():
        np.testing.assert_array_equal(views[name], full)


def test_cooperative_segment_alone_and_wrong_buffers(model_dir):
    path, _ = model_dir
    plan = cooperative_plan(str(path), 2)
    start, stop = plan.segment(1)
    whole = np.zeros(plan.nbytes, dtype=np.uint8)
    read_cooperative_share(str(path), 2, 1, whole)
    alone = np.zeros(stop - start, dtype=np.uint8)
    read_cooperative_share(str(path), 2, 1, alone)
    assert (alone == whole[start:stop]).all()
    with pytest.raises(SafetensorError, match="output buffer holds 3 bytes"):
        read_cooperative_share(str(path), 2, 1, np.zeros(3, dtype=np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        read_cooperative_share(str(path), 2, 1, np.zeros(plan.nbytes // 4, dtype=np.float32))


def test_remote_reads_count_each_byte_once(tmp_path):
    t = {f"w{i}": np.full((256, 1024), i, dtype=np.float32) for i in range(6)}
    save_file(t, str(tmp_path / "m.safetensors"))
    data = (tmp_path / "m.safetensors").read_bytes()
    data_len = sum(a.nbytes for a in t.values())
    server = Server()
    try:
        server.put("/m.safetensors", data)
        url = f"{server.url}/m.safetensors"
        world = 3
        plan = cooperative_plan(url, world)
        buffer = np.zeros(plan.nbytes, dtype=np.uint8)
        server.reset_counts()
        for rank in range(world):
            handle = tensorfile._ranks._handle(url)
            opened = server.counts()[1]
            read_cooperative_share(handle, world, rank, buffer)
            assert server.counts()[1] - opened <= data_len // world + 4096
        # Each data byte once, plus what each open reads of the start of the
        # file (its header, in one request of up to 64 KiB).
        assert server.counts()[1] <= 1.1 * data_len
        views = tensorfile._ranks.view_tensors(plan, buffer)
        for name, full in load_file(str(tmp_path / "m.safetensors")).items():
            np.testing.assert_array_equal(views[name], full)
        # A rank plan over HTTP reads about its share.
        server.reset_counts()
        rules = "w* = split(0)"
        got = load_rank_share(url, rules, 2, 1)
        assert server.counts()[1] <= 0.55 * data_len
        np.testing.assert_array_equal(got["w3"], t["w3"][128:])
    finally:
        server.stop()


def test_cooperative_loads_of_some_tensors(model_dir):
    path, tensors = model_dir
    # The replicated tensors beside a rank plan, say.
    names = ["layers.1.norm.weight", "layers.0.norm.weight"]
    plan = cooperative_plan(str(path), 2, names)
    assert [t.name for t in plan.tensors] == sorted(names)
    buffer = np.zeros(plan.nbytes, dtype=np.uint8)
    read = sum(read_cooperative_share(str(path), 2, r, buffer, names) for r in range(2))
    assert read == sum(tensors[n].nbytes for n in names)
    views = tensorfile._ranks.view_tensors(plan, buffer)
    for n in names:
        np.testing.assert_array_equal(views[n], tensors[n])
    with pytest.raises(SafetensorError, match="no tensor named \"nope\""):
        cooperative_plan(str(path), 2, ["nope"])
