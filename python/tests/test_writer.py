"""Streaming saves (tensorfile.Writer, tensorfile.save_stream, and save_file
through them) and in-place metadata edits (tensorfile.edit_metadata)."""

import os
import pathlib
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, Writer, edit_metadata, save_stream
from tensorfile.numpy import load_file, save, save_file

from conftest import manifest

VALID = sorted((pathlib.Path(__file__).resolve().parents[2] / "tests/fixtures/valid").glob("*.safetensors"))
SUB_BYTE = {"F4", "F6_E2M3", "F6_E3M2"}


def tensors():
    rng = np.random.default_rng(0)
    return {
        "b": rng.standard_normal((3, 5)).astype(np.float32),
        "a": np.arange(7, dtype=np.int64),
        "c": np.zeros((), dtype=np.float16),
        "e": np.zeros((0, 4), dtype=np.uint8),
    }


def declaration(ts):
    return {name: (a.dtype, a.shape) for name, a in ts.items()}


def leftovers(directory, keep=()):
    return sorted(p.name for p in pathlib.Path(directory).iterdir() if p.name not in keep)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_save_file_goes_through_the_writer_to_the_reference_bytes(path, tmp_path):
    described = manifest(path)
    if any(t["dtype"] in SUB_BYTE for t in described["tensors"]):
        pytest.skip("numpy holds no sub-byte dtype")
    out = tmp_path / "out.safetensors"
    save_file(load_file(path), out, metadata=described["metadata"])
    assert out.read_bytes() == path.read_bytes()


def test_tensors_in_any_order_give_the_canonical_bytes(tmp_path):
    ts = tensors()
    out = tmp_path / "out.safetensors"
    names = list(ts)
    random.Random(1).shuffle(names)
    with Writer(out, declaration(ts), {"k": "v"}) as w:
        assert sorted(w.missing) == sorted(ts)
        for name in names:
            w.write(name, ts[name])
        assert w.missing == []
    assert out.read_bytes() == save(ts, metadata={"k": "v"})
    assert leftovers(tmp_path) == ["out.safetensors"]


def test_a_declaration_may_be_arrays(tmp_path):
    ts = tensors()
    out = tmp_path / "out.safetensors"
    with Writer(out, ts) as w:
        for name, a in ts.items():
            w.write(name, a)
    assert out.read_bytes() == save(ts)


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("z", np.zeros(2, np.float32), "was not declared"),
        ("b", np.zeros((3, 5), np.float64), "was declared F32 [3, 5], but is F64 [3, 5]"),
        ("b", np.zeros((5, 3), np.float32), "but is F32 [5, 3]"),
    ],
)
def test_refuses_what_was_not_declared(tmp_path, name, value, says):
    ts = tensors()
    out = tmp_path / "out.safetensors"
    w = Writer(out, declaration(ts))
    with pytest.raises(SafetensorError, match=say(says)):
        w.write(name, value)
    w.abort()
    assert leftovers(tmp_path) == []


def say(text):
    import re

    return re.escape(text)


def test_refuses_a_tensor_twice_and_a_missing_one(tmp_path):
    ts = tensors()
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"old")
    w = Writer(out, declaration(ts))
    w.write("b", ts["b"])
    with pytest.raises(SafetensorError, match="already written"):
        w.write("b", ts["b"])
    with pytest.raises(SafetensorError, match='tensor "a"'):
        w.close()
    assert out.read_bytes() == b"old"
    with pytest.raises(SafetensorError, match="closed"):
        w.write("a", ts["a"])
    assert leftovers(tmp_path) == ["out.safetensors"]


def test_an_exception_in_the_block_leaves_nothing(tmp_path):
    ts = tensors()
    out = tmp_path / "out.safetensors"
    with pytest.raises(KeyError):
        with Writer(out, declaration(ts)) as w:
            w.write("a", ts["a"])
            raise KeyError("boom")
    assert leftovers(tmp_path) == []


def test_a_generator_goes_through_a_spool(tmp_path):
    ts = tensors()
    out = tmp_path / "out.safetensors"
    save_stream(out, ((n, a) for n, a in ts.items()), {"k": "v"}, align=8)
    assert out.read_bytes() == save(ts, metadata={"k": "v"})
    assert leftovers(tmp_path) == ["out.safetensors"]
    # Two tensors of one name: refused at the end, nothing left.
    other = tmp_path / "other.safetensors"
    with pytest.raises(SafetensorError, match='two tensors are named "a"'):
        save_stream(other, [("a", ts["a"]), ("a", ts["a"])])
    # A generator that raises: its error, nothing left.

    def failing():
        yield "a", ts["a"]
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError, match="source failed"):
        save_stream(other, failing())
    assert leftovers(tmp_path) == ["out.safetensors"]


CHILD = textwrap.dedent(
    """
    import sys, numpy as np, tensorfile
    out, mode = sys.argv[1], sys.argv[2]
    names = [f"t{i:03d}" for i in range(64)]
    block = np.ones(1 << 16, np.float32)  # 256 KiB

    def step(what):
        # One line out, then wait for the test's go: it kills at a chosen step.
        print(what, flush=True)
        sys.stdin.readline()

    step("start")
    if mode == "writer":
        w = tensorfile.Writer(out, {n: ("float32", block.shape) for n in names})
        step("declared")
        for n in reversed(names):
            w.write(n, block)
            step(n)
        w.close()
    else:
        def gen():
            for n in names:
                yield n, block
                step(n)
        tensorfile.save_stream(out, gen())
    """
)


@pytest.mark.parametrize("mode", ["writer", "spool"])
@pytest.mark.parametrize("named", [False, True], ids=["tmpfile", "named-temporaries"])
def test_a_writer_killed_at_any_point_leaves_nothing_under_the_name(tmp_path, mode, named):
    out = tmp_path / "out.safetensors"
    env = dict(os.environ)
    env.pop("TENSORFILE_NO_TMPFILE", None)
    if named:
        env["TENSORFILE_NO_TMPFILE"] = "1"
    rng = random.Random(7)
    # Killed at the start, at the declaration, and after some tensors (the
    # last step is the last tensor written or spooled, before the commit).
    last = 65 if mode == "writer" else 64  # the writer says "declared" first
    for stop in [0, 1, last, 2 + rng.randrange(62), 2 + rng.randrange(62)]:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(out), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for step in range(stop + 1):
            assert child.stdout.readline(), "the child ended early"
            if step < stop:
                child.stdin.write("\n")
                child.stdin.flush()
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdin.close()
        child.stdout.close()
        assert not out.exists(), f"killed at step {stop}"
        left = leftovers(tmp_path)
        if named:
            # Only hidden temporaries of the killed process, by the one pattern.
            assert all(
                n.startswith(".out.safetensors.tensorfile-") and n.endswith(".tmp") for n in left
            ), left
        else:
            assert left == [], left
    # The next save sweeps temporaries whose process is gone.
    save_file({"x": np.zeros(1)}, out)
    assert leftovers(tmp_path) == ["out.safetensors"]


def test_edit_metadata_in_place_and_by_rewrite(tmp_path):
    ts = tensors()
    out = tmp_path / "m.safetensors"
    with Writer(out, ts, {"k": "v"}, align=4096) as w:
        for n, a in ts.items():
            w.write(n, a)
    expected = tmp_path / "e.safetensors"
    with Writer(expected, ts, {"k": "w", "new": "1"}, align=4096) as w:
        for n, a in ts.items():
            w.write(n, a)
    before = os.stat(out).st_ino
    with tensorfile.safe_open(out, "np") as f:
        report = edit_metadata(out, set={"k": "w", "new": "1"})
        # An open (mapped) reader keeps reading the same data.
        np.testing.assert_array_equal(f.get_tensor("b"), ts["b"])
    assert report["in_place"] is True and report["reason"] is None, report
    assert report["align"] == 4096
    assert os.stat(out).st_ino == before
    assert out.read_bytes() == expected.read_bytes()
    # A canonical (align 8) file with no room: rewritten, the same bytes as a save.
    plain = tmp_path / "p.safetensors"
    save_file(ts, plain, metadata={"k": "v"})
    report = edit_metadata(plain, set={"longer": "x" * 100}, unset=["k"], rename={"a": "a0"})
    assert report["in_place"] is False and "header needs" in report["reason"], report
    renamed = {("a0" if n == "a" else n): a for n, a in ts.items()}
    assert plain.read_bytes() == save(renamed, metadata={"longer": "x" * 100})
    with pytest.raises(ValueError):
        edit_metadata(plain, set={"k": "v"}, unset=["k"])
    with pytest.raises(SafetensorError, match='no tensor named "nope"'):
        edit_metadata(plain, rename={"nope": "x"})
    assert leftovers(tmp_path) == ["e.safetensors", "m.safetensors", "p.safetensors"]


def test_torch_tensors_in_any_order(tmp_path, torch):
    import tensorfile.torch as tft

    ts = {
        "w": torch.randn(4, 4, dtype=torch.bfloat16),
        "b": torch.arange(5, dtype=torch.int32),
        "h": torch.zeros(2, 3, dtype=torch.float16),
    }
    out = tmp_path / "out.safetensors"
    with Writer(out, {k: (v.dtype, v.shape) for k, v in ts.items()}, {"format": "pt"}) as w:
        for k in reversed(list(ts)):
            w.write(k, ts[k])
    assert out.read_bytes() == tft.save(ts, metadata={"format": "pt"})
    with pytest.raises(SafetensorError, match="was declared BF16"):
        with Writer(tmp_path / "x.safetensors", {"w": (torch.bfloat16, (4, 4))}) as w:
            w.write("w", ts["w"].float())
    assert leftovers(tmp_path) == ["out.safetensors"]
