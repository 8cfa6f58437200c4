"""Zero copy where it is safe: safe_open's arrays view private copy-on-write
maps of the file (writeable, writes never reach the file, alive while any
array is); pread and load_file give memory of their own that nothing done to
the file can hurt."""

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tensorfile import _native, safe_open
from tensorfile.numpy import load_file, save_file

N = 100_000  # 400 KB of F32: mapped (64 KiB or more)


@pytest.fixture
def big(tmp_path):
    path = tmp_path / "big.safetensors"
    save_file({"w": np.arange(N, dtype=np.float32), "small": np.arange(10, dtype=np.float32)}, path)
    return path


def buffer_of(array):
    """The native buffer at the end of an array's base chain."""
    base = array
    while base is not None and not isinstance(base, _native.Buffer):
        base = base.base
    return base


def mappings_of(path):
    """The address ranges of this process's maps of ``path`` (Linux)."""
    real = os.path.realpath(path)
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip() == real:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                ranges.append((lo, hi, parts[1]))
    return ranges


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_mmap_tensor_views_a_private_map_of_the_file(big):
    with safe_open(big, "np") as f:
        arr = f.get_tensor("w")
    buf = buffer_of(arr)
    assert buf is not None and buf.is_mapped
    assert arr.ctypes.data == buf.address
    maps = [(lo, hi, perms) for lo, hi, perms in mappings_of(big) if lo <= arr.ctypes.data < hi]
    assert maps, "the array's bytes are not inside a map of the file"
    lo, hi, perms = maps[0]
    # Private ("p") and writeable: copy-on-write, never the file's pages.
    assert perms.startswith("rw") and perms[3] == "p"
    assert arr.ctypes.data + arr.nbytes <= hi


def test_writes_stay_private(big):
    before = big.read_bytes()
    with safe_open(big, "np") as f:
        a = f.get_tensor("w")
        b = f.get_tensor("w")
        assert a.flags.writeable
        a[:] = -1
        # Another tensor handed out, from the same handle, is independent
        # (as the reference's copies are).
        assert b[5] == 5.0
        assert f.get_tensor("w")[5] == 5.0
    assert big.read_bytes() == before


def test_map_outlives_the_handle(big):
    f = safe_open(big, "np")
    arr = f.get_tensor("w")
    f.close()
    del f
    gc.collect()
    np.testing.assert_array_equal(arr, np.arange(N, dtype=np.float32))
    # A view of a view still keeps the map.
    part = arr[10:20]
    del arr
    gc.collect()
    assert part[0] == 10.0


def test_small_tensors_are_read_not_mapped(big):
    with safe_open(big, "np") as f:
        small = f.get_tensor("small")
    assert not buffer_of(small).is_mapped and small.flags.writeable


def test_pread_backend_owns_its_memory(big):
    with safe_open(big, "np", backend="pread") as f:
        arr = f.get_tensor("w")
    assert not buffer_of(arr).is_mapped and arr.flags.writeable
    with open(big, "r+b") as fh:
        fh.truncate(16)
    np.testing.assert_array_equal(arr, np.arange(N, dtype=np.float32))


def test_load_file_owns_its_memory(big):
    arrays = load_file(big)
    buf = buffer_of(arrays["w"])
    assert buf.is_loaded and not buf.is_mapped
    assert arrays["w"].flags.writeable
    with open(big, "r+b") as fh:
        fh.truncate(16)
    np.testing.assert_array_equal(arrays["w"], np.arange(N, dtype=np.float32))


def test_every_array_is_writeable(big):
    """No read-only shared map is ever handed out (writing through one would
    kill the interpreter)."""
    for backend in ("mmap", "pread"):
        with safe_open(big, "np", backend=backend) as f:
            for t in f.get_tensors().values():
                assert t.flags.writeable
                t[...] = 0


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_truncated_under_a_map_is_sigbus_as_documented(big):
    """As with the reference: a mapped tensor whose file is truncated
    underneath dies with SIGBUS when touched (pread and load_file are the
    ways out); the map is only made for a file long enough at the time."""
    script = textwrap.dedent(
        f"""
        import os, tensorfile
        f = tensorfile.safe_open({str(big)!r}, "np")
        arr = f.get_tensor("w")
        os.truncate({str(big)!r}, 16)
        print(float(arr[-1]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == -7 or done.returncode == 135, done


def test_truncated_before_the_map_is_an_error(big):
    f = safe_open(big, "np")
    os.truncate(big, 4096)
    with pytest.raises(Exception) as e:
        f.get_tensor("w")
    assert "SafetensorError" in type(e.value).__name__
