"""Prefetch plans, reads into the caller's memory, whole loads on read plans,
and the staging ring that takes tensors to a device.

- ``safe_open(...).prefetch(plan)`` on every valid fixture and a sharded
  set, whole tensors and slices, gives what ``load_file`` and ``get_slice``
  give, and hands it over without reading the file again (the file is cut
  short after the prefetch: a read would fail);
- ``read_into`` fills fresh and reused numpy arrays, whole or sliced, and
  refuses the wrong memory naming the tensor and both sizes;
- a remote prefetch of half of every tensor's rows is served at most 52%
  of the data bytes, counted by the server;
- the staging ring, run with fake "device" operations that copy only when
  an event is waited for (as an asynchronous copy would), never reuses a
  buffer early, splits tensors larger than a buffer, and lands the exact
  bytes; with torch installed, the same ring through torch's API on the CPU.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

import tensorfile
from tensorfile import PrefetchPlan, SafetensorError, _staging, safe_open
from tensorfile.numpy import load, load_file, save, save_file

from conftest import FIXTURES, manifest
from remote_server import Server

VALID = sorted((FIXTURES / "valid").glob("*.safetensors"))
SET = FIXTURES / "real" / "sharded" / "unet_sharded_safetensors"
SET_SINGLE = FIXTURES / "real" / "sharded" / "unet_safetensors"
# No numpy (nor torch) dtype holds these: get_tensor refuses them, with or
# without a prefetch.
NO_CARRIER = {"F6_E2M3", "F6_E3M2"}


def digest(array) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def half_rows(shape):
    """The first half (rounded up) of the first dimension, or None for a
    scalar."""
    if not shape:
        return None
    return slice(0, (shape[0] + 1) // 2)


@pytest.fixture
def sample(tmp_path):
    tensors = {
        "a": np.arange(24, dtype=np.float32).reshape(4, 6),
        "b": np.arange(60, dtype=np.int16).reshape(5, 3, 4),
        "c": np.arange(10, dtype=np.float64),
        "s": np.array(7, dtype=np.int64),
    }
    path = tmp_path / "sample.safetensors"
    save_file(tensors, path)
    return path, tensors


# -- prefetch: every tensor, on every valid fixture -------------------------


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_prefetch_of_every_tensor_gives_the_files_bytes(path, backend):
    described = {t["name"]: t for t in manifest(path)["tensors"]}
    with safe_open(path, "np", backend=backend) as f:
        f.prefetch()
        assert len(f._held) == len(described)
        for name, t in described.items():
            if t["dtype"] in NO_CARRIER:
                with pytest.raises(SafetensorError, match="dtype='F32'"):
                    f.get_tensor(name)
                continue
            arr = f.get_tensor(name)
            assert digest(arr) == t["sha256"], name
            assert arr.flags.writeable
        assert len(f._held) == 0


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_prefetch_equals_load_file(path):
    dtypes = {t["dtype"] for t in manifest(path)["tensors"]}
    if dtypes & NO_CARRIER:
        pytest.skip("load_file refuses the F6 types in numpy")
    loaded = load_file(path)
    with safe_open(path, "np") as f:
        f.prefetch()
        got = f.get_tensors()
    assert list(got) == list(loaded) or sorted(got) == sorted(loaded)
    for name, arr in loaded.items():
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape
        assert got[name].tobytes() == arr.tobytes(), name


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_a_plan_of_half_rows_gives_what_get_slice_gives(path):
    described = manifest(path)["tensors"]
    plan = PrefetchPlan()
    expected = {}
    with safe_open(path, "np", backend="pread") as plain:
        for t in described:
            index = half_rows(t["shape"])
            if index is None or t["dtype"] in NO_CARRIER:
                continue
            try:
                expected[t["name"]] = plain.get_slice(t["name"])[index]
            except SafetensorError:
                continue  # a slice the format cannot cut (values below a byte)
            plan.add(t["name"], index)
    with safe_open(path, "np", backend="pread") as f:
        f.prefetch(plan)
        assert len(f._held) == len(expected)
        for name, want in expected.items():
            shape = f.get_slice(name).get_shape()
            got = f.get_slice(name)[half_rows(shape)]
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert got.tobytes() == want.tobytes(), name
        assert len(f._held) == 0


def test_a_sharded_set_prefetched_equals_the_single_file():
    with safe_open(SET_SINGLE, "np") as one, safe_open(SET, "np") as many:
        many.prefetch()
        for name in one.keys():
            np.testing.assert_array_equal(many.get_tensor(name), one.get_tensor(name))
        plan = PrefetchPlan()
        for name in one.keys():
            index = half_rows(one.get_slice(name).get_shape())
            if index is not None:
                plan.add(name, index)
        many.prefetch(plan)
        for name, index in plan:
            np.testing.assert_array_equal(many.get_slice(name)[index], one.get_slice(name)[index])


# -- prefetch: nothing read again; what is held and for how long ------------


def test_prefetched_tensors_are_handed_over_without_reading(sample):
    path, tensors = sample
    with safe_open(path, "np", backend="pread") as f:
        plan = PrefetchPlan().add("a").add("b", np.s_[1:3, :, 2]).add("s")
        f.prefetch(plan)
        assert len(f._held) == 3
        # The file loses its data: any read of it fails from now on.
        with open(path, "r+b") as fh:
            fh.truncate(16)
        with pytest.raises(SafetensorError, match="truncated|past its end"):
            f.get_tensor("c")
        # A slice cut from a tensor held whole leaves it held.
        np.testing.assert_array_equal(f.get_slice("a")[1:3, ::2], tensors["a"][1:3, ::2])
        np.testing.assert_array_equal(f.get_slice("a")[...], tensors["a"])
        np.testing.assert_array_equal(f.get_tensor("a"), tensors["a"])
        # The same values, written another way, are the slice the plan holds.
        np.testing.assert_array_equal(f.get_slice("b")[1:3, 0:3, 2], tensors["b"][1:3, :, 2])
        np.testing.assert_array_equal(f.get_tensor("s"), tensors["s"])
        # Handed over once: the handle holds nothing more, and reads again.
        assert len(f._held) == 0
        with pytest.raises(SafetensorError, match="truncated|past its end"):
            f.get_tensor("a")


def test_a_slice_the_plan_does_not_cover_is_read_as_usual(sample):
    path, tensors = sample
    with safe_open(path, "np") as f:
        f.prefetch(PrefetchPlan().add("b", np.s_[0:2]))
        np.testing.assert_array_equal(f.get_slice("b")[2:4], tensors["b"][2:4])
        np.testing.assert_array_equal(f.get_tensor("b"), tensors["b"])
        # Still held: only the slice named takes it.
        assert len(f._held) == 1
        np.testing.assert_array_equal(f.get_slice("b")[:2], tensors["b"][:2])
        assert len(f._held) == 0


def test_several_slices_of_one_tensor(sample):
    path, tensors = sample
    with safe_open(path, "np", backend="pread") as f:
        plan = PrefetchPlan().add("c", np.s_[:5]).add("c", np.s_[5:]).add("c", np.s_[0:5]).add("a")
        f.prefetch(plan)
        assert len(f._held) == 3  # [:5] and [0:5] are one slice
        with open(path, "r+b") as fh:
            fh.truncate(16)
        np.testing.assert_array_equal(f.get_slice("c")[5:], tensors["c"][5:])
        np.testing.assert_array_equal(f.get_slice("c")[:5], tensors["c"][:5])


def test_get_tensors_takes_what_is_held(sample):
    path, tensors = sample
    with safe_open(path, "np", backend="pread") as f:
        f.prefetch()
        got = f.get_tensors()
        assert list(got) == f.offset_keys()
        for name, arr in tensors.items():
            np.testing.assert_array_equal(got[name], arr)
        assert len(f._held) == 0


def test_a_new_prefetch_or_close_frees_what_was_held(sample):
    path, _ = sample
    f = safe_open(path, "np")
    f.prefetch()
    assert len(f._held) == 4
    f.prefetch(PrefetchPlan().add("a"))
    assert len(f._held) == 1
    f.close()
    assert len(f._held) == 0


def test_plans_are_checked_before_anything_is_read(sample):
    path, _ = sample
    with safe_open(path, "np") as f:
        f.prefetch(PrefetchPlan().add("a"))
        with pytest.raises(SafetensorError, match="nope"):
            f.prefetch(PrefetchPlan().add("c").add("nope"))
        with pytest.raises(SafetensorError, match="out of bounds"):
            f.prefetch(PrefetchPlan().add("a", np.s_[:9]))
        with pytest.raises(TypeError, match="PrefetchPlan"):
            f.prefetch(["a"])
    with pytest.raises(SafetensorError, match="not an integer, a slice"):
        PrefetchPlan().add("a", np.s_[None, :])
    with pytest.raises(SafetensorError, match="not an integer, a slice"):
        PrefetchPlan().add("a", [0, 1])
    with pytest.raises(TypeError, match="str"):
        PrefetchPlan().add(3)


def test_prefetch_follows_the_frameworks_slicing_rules(sample):
    """numpy's rules refuse a stop past the end (as the reference); a plan
    resolves its slices by the same rules as get_slice."""
    path, tensors = sample
    with safe_open(path, "np") as f:
        f.prefetch(PrefetchPlan().add("c", np.s_[-3:]))
        np.testing.assert_array_equal(f.get_slice("c")[7:10], tensors["c"][-3:])
        assert len(f._held) == 0


def test_a_file_object_without_a_descriptor_prefetches(sample):
    """Its reads go through the object's own seek and read, from the pool's
    threads, the interpreter taken for each."""
    import io

    path, tensors = sample
    f = tensorfile._safe_open_handle(io.BytesIO(path.read_bytes()), "np")
    f.prefetch(PrefetchPlan().add("a").add("b", np.s_[2]))
    np.testing.assert_array_equal(f.get_tensor("a"), tensors["a"])
    np.testing.assert_array_equal(f.get_slice("b")[2], tensors["b"][2])
    out = np.empty(10, dtype=np.float64)
    np.testing.assert_array_equal(f.read_into("c", out), tensors["c"])


def test_prefetched_memory_is_the_librarys_own(sample):
    path, _ = sample
    with safe_open(path, "np") as f:
        f.prefetch()
        arr = f.get_tensor("c")
        assert arr.base.is_loaded and not arr.base.is_mapped
        assert arr.ctypes.data % 64 == 0


# -- whole loads on read plans --------------------------------------------


def test_load_file_gives_each_tensor_memory_of_its_own(sample):
    path, tensors = sample
    loaded = load_file(path)
    buffers = {name: arr.base for name, arr in loaded.items()}
    assert len({id(b) for b in buffers.values()}) == len(tensors)
    for name, arr in loaded.items():
        assert buffers[name].is_loaded and len(buffers[name]) == tensors[name].nbytes
        assert arr.ctypes.data % 64 == 0
        np.testing.assert_array_equal(arr, tensors[name])
    assert list(loaded) == sorted(tensors)


def test_load_copies_each_tensor_from_the_bytes(sample):
    path, tensors = sample
    got = load(path.read_bytes())
    assert list(got) == sorted(tensors)
    for name, arr in tensors.items():
        np.testing.assert_array_equal(got[name], arr)
        assert got[name].base.is_loaded and got[name].flags.writeable


def test_load_file_errors_are_unchanged(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        load_file(tmp_path / "missing.safetensors")
    png = tmp_path / "picture.safetensors"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with pytest.raises(SafetensorError, match="rule 1") as e:
        load_file(png)
    assert e.value.rule == 1
    with pytest.raises(SafetensorError, match="not a regular file"):
        load_file(tmp_path)


def test_a_half_rows_plan_reads_half_the_data(tmp_path):
    tensors = {f"t{i}": np.full((64, 256), i, dtype=np.float32) for i in range(8)}
    path = tmp_path / "rows.safetensors"
    save_file(tensors, path)
    handle = tensorfile._native.Handle(str(path), "pread")
    wants = [(name, [(0, 32, 1)]) for name in tensors]
    pairs, counts = handle.read_plan(wants)
    data = sum(a.nbytes for a in tensors.values())
    assert counts["bytes_read"] <= 0.52 * data
    assert counts["tensors"] == len(tensors)
    for name, buffer in pairs:
        np.testing.assert_array_equal(np.asarray(buffer), tensors[name][:32])
    with pytest.raises(SafetensorError, match="twice"):
        handle.read_plan([("t0", None), ("t0", [(0, 1, 1)])])


# -- read_into ------------------------------------------------------------


def test_read_into_fresh_and_reused_arrays(sample):
    path, tensors = sample
    with safe_open(path, "np") as f:
        out = np.empty((4, 6), dtype=np.float32)
        assert f.read_into("a", out) is out
        np.testing.assert_array_equal(out, tensors["a"])
        # The same memory again, for other values.
        out[...] = -1
        f.read_into("a", out)
        np.testing.assert_array_equal(out, tensors["a"])
        raw = np.zeros(tensors["b"].nbytes, dtype=np.uint8)
        f.read_into("b", raw)
        assert raw.tobytes() == tensors["b"].tobytes()
        scalar = np.empty((), dtype=np.int64)
        f.read_into("s", scalar)
        assert scalar == 7


def test_read_into_a_slice_lands_c_ordered(sample):
    path, tensors = sample
    with safe_open(path, "np") as f:
        out = np.empty((2, 3), dtype=np.int16)
        f.read_into("b", out, np.s_[1:5:2, :, 3])
        np.testing.assert_array_equal(out, tensors["b"][1:5:2, :, 3])
        np.testing.assert_array_equal(out, f.get_slice("b")[1:5:2, :, 3])
        rows = np.empty(3 * 6 * 4, dtype=np.uint8)
        f.read_into("a", rows, np.s_[1:4])
        assert rows.tobytes() == tensors["a"][1:4].tobytes()


def test_read_into_a_set_and_bf16(tmp_path):
    with safe_open(SET_SINGLE, "np") as one, safe_open(SET, "np") as many:
        for name in one.keys()[:20]:
            shape = one.get_slice(name).get_shape()
            want = one.get_tensor(name)
            out = np.empty(shape, dtype=want.dtype)
            many.read_into(name, out)
            np.testing.assert_array_equal(out, want)
    path = FIXTURES / "valid" / "minimal_bf16.safetensors"
    with safe_open(path, "np") as f:
        for name in f.keys():
            want = f.get_tensor(name)
            out = np.empty(want.shape, dtype=want.dtype)
            f.read_into(name, out)
            assert out.tobytes() == want.tobytes()


def test_read_into_refuses_the_wrong_memory(sample):
    path, _ = sample
    with safe_open(path, "np") as f:
        with pytest.raises(ValueError, match=r"'a'.*96 bytes.*holds 92 bytes, not 96"):
            f.read_into("a", np.empty(23, dtype=np.float32))
        with pytest.raises(ValueError, match=r"'a'.*slice \[0:2\].*holds 96 bytes, not 48"):
            f.read_into("a", np.empty((4, 6), dtype=np.float32), np.s_[:2])
        ro = np.empty((4, 6), dtype=np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match=r"'a'.*96 bytes.*read-only"):
            f.read_into("a", ro)
        wide = np.empty((4, 12), dtype=np.float32)[:, ::2]
        with pytest.raises(ValueError, match=r"'a'.*96 bytes.*not C-contiguous"):
            f.read_into("a", wide)
        with pytest.raises(ValueError, match=r"'a'.*out is int32 \[4, 6\].*uint8 of 96 bytes"):
            f.read_into("a", np.empty((4, 6), dtype=np.int32))
        with pytest.raises(ValueError, match=r"'a'.*out is float32 \[6, 4\]"):
            f.read_into("a", np.empty((6, 4), dtype=np.float32))
        with pytest.raises(TypeError, match="numpy array or a torch tensor"):
            f.read_into("a", bytearray(96))
        with pytest.raises(SafetensorError, match="no tensor named"):
            f.read_into("zz", np.empty(1, dtype=np.uint8))


# -- remote ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def test_a_remote_prefetch_of_half_the_rows_is_served_half_the_bytes(server, tmp_path):
    tensors = {f"layer.{i}": np.full((512, 1024), i, dtype=np.float32) for i in range(4)}
    data = save(tensors)
    server.put("/m/rows.safetensors", data)
    url = f"{server.url}/m/rows.safetensors"
    data_bytes = sum(a.nbytes for a in tensors.values())
    with safe_open(url, "np") as f:
        server.reset_counts()
        plan = PrefetchPlan()
        for name in tensors:
            plan.add(name, np.s_[:256])
        f.prefetch(plan)
        _, served = server.counts()
        assert served <= 0.52 * data_bytes, (served, data_bytes)
        server.reset_counts()
        for name, arr in tensors.items():
            np.testing.assert_array_equal(f.get_slice(name)[:256], arr[:256])
        assert server.counts() == (0, 0)
    with safe_open(url, "np") as f:
        server.reset_counts()
        f.prefetch()
        _, served = server.counts()
        assert data_bytes <= served <= len(data)
        for name, arr in tensors.items():
            np.testing.assert_array_equal(f.get_tensor(name), arr)
    loaded = load_file(url)
    for name, arr in tensors.items():
        np.testing.assert_array_equal(loaded[name], arr)


# -- the staging ring -------------------------------------------------------


class FakeEvent:
    def __init__(self) -> None:
        self.done = False


class FakeOps:
    """Device operations that behave as an asynchronous copy engine: a copy
    is queued and its bytes move only when an event at or after it is
    waited for (or at finish), so a staging buffer overwritten before its
    copy completes lands wrong bytes. Records what the ring did."""

    def __init__(self) -> None:
        self.queue = []  # (dst, offset, src, event)
        self.hosts = []
        self.reads_while_copying = 0
        self.log = []

    def host(self, nbytes):
        buf = np.zeros(nbytes, dtype=np.uint8)
        self.hosts.append(buf)
        return buf

    def view(self, host, nbytes):
        return host[:nbytes]

    def device_bytes(self, nbytes):
        return np.full(nbytes, 0xEE, dtype=np.uint8)

    def copy(self, dst, offset, src):
        event = FakeEvent()
        self.queue.append((dst, offset, src, event))
        self.log.append(("copy", offset, src.nbytes))
        return event

    def pending_sources(self):
        return [src for _, _, src, event in self.queue if not event.done]

    def wait(self, event):
        while self.queue and not event.done:
            dst, offset, src, ev = self.queue.pop(0)
            dst[offset : offset + src.nbytes] = src
            ev.done = True
        self.log.append(("wait",))

    def finish(self):
        while self.queue:
            dst, offset, src, ev = self.queue.pop(0)
            dst[offset : offset + src.nbytes] = src
            ev.done = True

    def typed(self, data, code, shape):
        return data


def checked_reader(ops, source):
    """A reader of numpy 'files' (name -> array) that fails when it writes a
    buffer a queued copy has yet to read."""

    def read(name, args, out):
        for src in ops.pending_sources():
            assert not np.shares_memory(src, out), "a staging buffer reused before its copy completed"
        if ops.pending_sources():
            ops.reads_while_copying += 1
        array = source[name]
        if args is not None:
            array = array[tuple(a if isinstance(a, int) else slice(*a) for a in args)]
        out[...] = np.ascontiguousarray(array).view(np.uint8).reshape(-1)

    return read


def test_pieces_cover_a_result_in_c_order_within_the_capacity():
    rng = np.random.default_rng(0)
    for shape, bits, capacity in [
        ((10, 7), 32, 64),       # rows of 28 bytes: two a piece
        ((3, 100), 32, 64),      # a row larger than a piece: cut inside rows
        ((4, 3, 5), 16, 16),     # rows of 30 bytes, then of 10
        ((2, 10), 4, 3),         # F4: values below a byte, cut at whole bytes
        ((5,), 8, 1000),         # all of it in one piece
        ((), 64, 8),             # a scalar
        ((0, 4), 32, 8),         # nothing
    ]:
        parts = _staging.pieces(shape, bits, capacity)
        total = math.prod(shape) * bits // 8
        assert sum(p.nbytes for p in parts) == total
        offset = 0
        for p in parts:
            assert p.offset == offset and 0 < p.nbytes <= capacity
            offset += p.nbytes
    # Rows of F4 that do not start on a byte cannot be cut.
    with pytest.raises(SafetensorError, match="whole bytes"):
        _staging.pieces((2, 9), 4, 3)
    # Each piece is the C-order run of bytes its index selects.
    array = rng.integers(0, 1000, size=(3, 100), dtype=np.int32)
    flat = array.reshape(-1).view(np.uint8)
    for p in _staging.pieces(array.shape, 32, 64):
        args = _staging.compose(None, array.shape, p.index)
        part = array[tuple(a if isinstance(a, int) else slice(*a) for a in args)]
        assert part.tobytes() == flat[p.offset : p.offset + p.nbytes].tobytes()


def test_compose_maps_a_piece_through_a_slice():
    array = np.arange(7 * 8 * 9).reshape(7, 8, 9)
    args = [(1, 7, 2), 3, (0, 9, 1)]  # a [3, 9] slice
    view = array[1:7:2, 3, :]
    for p in _staging.pieces(view.shape, 64, 40):
        sub = _staging.compose(args, array.shape, p.index)
        got = array[tuple(a if isinstance(a, int) else slice(*a) for a in sub)]
        want = view.reshape(-1)[p.offset // 8 : (p.offset + p.nbytes) // 8]
        assert got.reshape(-1).tolist() == want.tolist()
    assert _staging.compose(None, (4, 4), ()) is None


def test_the_ring_reuses_a_buffer_only_after_its_copy_completed():
    rng = np.random.default_rng(1)
    source = {
        "big": rng.integers(0, 255, size=(40, 50), dtype=np.uint8),  # 2000 bytes: many pieces
        "row": rng.standard_normal(300).astype(np.float32),  # 1200 bytes, one row cut
        "tiny": np.array([1, 2, 3], dtype=np.int16),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    codes = {"big": "U8", "row": "F32", "tiny": "I16", "empty": "F32"}
    items = [_staging.Item(n, n, None, codes[n], a.shape) for n, a in source.items()]
    items.append(_staging.Item("big[5:9, 3]", "big", [(5, 9, 1), 3], "U8", (4,)))
    shapes = {n: a.shape for n, a in source.items()}
    ops = FakeOps()
    out = _staging.load(ops, checked_reader(ops, source), items, shapes, size=256, count=3)
    for name, array in source.items():
        assert out[name].tobytes() == array.tobytes(), name
    assert out["big[5:9, 3]"].tobytes() == source["big"][5:9, 3].tobytes()
    assert len(ops.hosts) == 3 and all(h.nbytes == 256 for h in ops.hosts)
    # Reads went on while earlier copies were still queued: they overlap.
    assert ops.reads_while_copying > 0
    copies = [e for e in ops.log if e[0] == "copy"]
    assert len(copies) == math.ceil(2000 / 256) + math.ceil(1200 / 256) + 2


def test_one_buffer_is_waited_for_before_every_reuse():
    source = {"x": np.arange(1000, dtype=np.uint8)}
    ops = FakeOps()
    out = _staging.load(
        ops, checked_reader(ops, source), [_staging.Item("x", "x", None, "U8", (1000,))], {"x": (1000,)},
        size=100, count=1,
    )
    assert out["x"].tobytes() == source["x"].tobytes()
    # With one buffer, each copy is waited for before the next read.
    assert [e[0] for e in ops.log][:4] == ["copy", "wait", "copy", "wait"]


def test_the_ring_reads_with_the_library_into_staging_views(sample):
    """The ring with the handle's own reads (no torch): what prefetch to a
    device does, a fake device standing in for CUDA."""
    path, tensors = sample
    with safe_open(path, "np") as f:
        ops = FakeOps()
        items = [
            _staging.Item("a", "a", None, "F32", (4, 6)),
            _staging.Item("b1", "b", [(0, 5, 2), (0, 3, 1), 1], "I16", (3, 3)),
        ]
        shapes = {"a": [4, 6], "b": [5, 3, 4]}

        def read(name, args, out):
            f._read_native(name, args, out, None)

        out = _staging.load(ops, read, items, shapes, size=20, count=2)
    assert out["a"].tobytes() == tensors["a"].tobytes()
    assert out["b1"].tobytes() == tensors["b"][0:5:2, :, 1].tobytes()


# -- torch (skipped without it) ---------------------------------------------


def test_torch_ring_on_the_cpu(torch, sample):
    """TorchOps through the ring on the CPU (pinning and streams need CUDA)."""
    path, tensors = sample
    with safe_open(path, "pt") as f:
        items = [_staging.Item(n, n, None, f.get_slice(n).get_dtype(), f.get_slice(n).get_shape()) for n in f.keys()]
        shapes = {n: f.get_slice(n).get_shape() for n in f.keys()}
        ops = _staging.TorchOps(torch, "cpu")

        def read(name, args, out):
            f._read_native(name, args, out, None)

        out = _staging.load(ops, read, items, shapes, size=16, count=2)
    for name, arr in tensors.items():
        assert out[name].dtype == torch.from_numpy(arr).dtype
        torch.testing.assert_close(out[name], torch.from_numpy(arr), rtol=0, atol=0)


def test_torch_prefetch_and_read_into(torch, tmp_path):
    from tensorfile.torch import load_file as torch_load_file, save_file as torch_save_file

    tensors = {
        "w": torch.arange(64, dtype=torch.float32).reshape(8, 8).to(torch.bfloat16),
        "b": torch.arange(8, dtype=torch.int64),
    }
    path = tmp_path / "t.safetensors"
    torch_save_file(tensors, path)
    with safe_open(path, "pt") as f:
        f.prefetch(PrefetchPlan().add("w", np.s_[:, 2:6]).add("b"))
        assert torch.equal(f.get_slice("w")[:, 2:6], tensors["w"][:, 2:6])
        assert torch.equal(f.get_tensor("b"), tensors["b"])
        out = torch.empty((8, 8), dtype=torch.bfloat16)
        f.read_into("w", out)
        assert torch.equal(out, tensors["w"])
        raw = torch.empty(8 * 8 * 2, dtype=torch.uint8)
        f.read_into("w", raw)
        assert torch.equal(raw.view(torch.bfloat16).reshape(8, 8), tensors["w"])
        with pytest.raises(ValueError, match=r"'w'.*128 bytes.*holds 64 bytes, not 128"):
            f.read_into("w", torch.empty(32, dtype=torch.float16))
        with pytest.raises(ValueError, match="not C-contiguous"):
            f.read_into("w", torch.empty((8, 8), dtype=torch.bfloat16).t())
    loaded = torch_load_file(path)
    for name, t in tensors.items():
        assert torch.equal(loaded[name], t)
