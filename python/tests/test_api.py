"""The reference's API, behaving as the reference does (or as numpy does
where the reference is wrong)."""

import gc
import io
import os
import pathlib

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open
from tensorfile.numpy import load, load_file, save, save_file


@pytest.fixture
def sample(tmp_path):
    tensors = {
        "b": np.arange(12, dtype=np.float32).reshape(3, 4),
        "a": np.arange(6, dtype=np.int64),
        "c": np.array(True),
        "big": np.arange(50_000, dtype=np.float32),
    }
    path = tmp_path / "sample.safetensors"
    save_file(tensors, path, metadata={"format": "np"})
    return path, tensors


def test_keys_sorted_and_offset_keys_in_data_order(sample):
    path, tensors = sample
    with safe_open(path, framework="np") as f:
        assert f.keys() == sorted(tensors)
        # The canonical writer puts larger alignments first.
        assert f.offset_keys() == ["a", "b", "big", "c"]
        assert f.metadata() == {"format": "np"}
        assert len(f) == 4 and "a" in f and "zz" not in f


def test_get_tensor_and_get_tensors(sample):
    path, tensors = sample
    f = safe_open(str(path), "numpy")
    for name, expected in tensors.items():
        got = f.get_tensor(name)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    every = f.get_tensors()
    assert list(every) == f.offset_keys()
    for name, expected in tensors.items():
        np.testing.assert_array_equal(every[name], expected)
    f.close()


def test_metadata_none_when_absent(tmp_path):
    path = tmp_path / "x.safetensors"
    save_file({"a": np.zeros(2)}, path)
    with safe_open(path, "np") as f:
        assert f.metadata() is None


def test_closed_handle_raises(sample):
    path, _ = sample
    with safe_open(path, "np") as f:
        kept = f.get_tensor("big")
    with pytest.raises(SafetensorError, match="File is closed"):
        f.keys()
    with pytest.raises(SafetensorError):
        f.get_tensor("a")
    # What was handed out lives on.
    assert kept[10] == 10.0


def test_missing_file_and_tensor(tmp_path, sample):
    with pytest.raises(FileNotFoundError) as e:
        safe_open("notafile", framework="np")
    assert str(e.value) == "No such file or directory: notafile"
    path, _ = sample
    with safe_open(path, "np") as f:
        with pytest.raises(SafetensorError, match="no tensor named"):
            f.get_tensor("nope")
        with pytest.raises(SafetensorError):
            f.get_slice("nope")


def test_framework_device_backend_checked(sample):
    path, _ = sample
    with pytest.raises(SafetensorError, match="framework foo is invalid"):
        safe_open(path, framework="foo")
    with pytest.raises(SafetensorError, match="not supported for framework numpy"):
        safe_open(path, framework="np", device="cuda:0")
    with pytest.raises(SafetensorError, match="backend"):
        safe_open(path, framework="np", backend="not_a_backend")


def test_mlx_without_mlx_is_a_clear_error(sample):
    path, _ = sample
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        with pytest.raises(SafetensorError, match="mlx"):
            safe_open(path, framework="mlx")
    else:
        with safe_open(path, framework="mlx") as f:
            assert f.get_tensor("b").shape == (3, 4)


def test_accepts_path_objects(sample):
    path, _ = sample
    assert isinstance(path, pathlib.Path)
    with safe_open(path, "np") as f:
        assert f.keys()
    assert set(load_file(path)) == {"a", "b", "c", "big"}


def test_save_is_canonical_and_order_invariant():
    data = np.zeros((2, 2), dtype=np.int32)
    out = save({"test": data})
    assert out == (
        b'@\x00\x00\x00\x00\x00\x00\x00{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}   '
        b" " + b"\x00" * 16
    )
    a, b = np.zeros(3, np.float16), np.ones(2, np.int64)
    assert save({"a": a, "b": b}) == save({"b": b, "a": a})


def test_save_writes_views_in_c_order_and_big_endian_as_little():
    base = np.arange(16, dtype=np.float32).reshape(4, 4)
    view = base[:, 1]
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(load(save({"v": view}))["v"], view)
    big = np.arange(4, dtype=">i4")
    assert save({"x": big}) == save({"x": big.astype("<i4")})


def test_load_round_trip_and_writeable():
    tensors = {"x": np.arange(10, dtype=np.uint8), "e": np.zeros((2, 0), np.float32)}
    back = load(save(tensors))
    for name in tensors:
        np.testing.assert_array_equal(back[name], tensors[name])
        assert back[name].flags.writeable
    back["x"][0] = 7
    assert back["x"][0] == 7


def test_unknown_dtype_names_the_supported_ones():
    with pytest.raises(SafetensorError, match='Unknown dtype "object". Supported dtypes: bool'):
        save({"a": np.array([object()])})
    with pytest.raises(SafetensorError):
        tensorfile.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0)
    with pytest.raises(TypeError):
        tensorfile.serialize({"t": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}})


def test_tensorspec_and_serialize():
    a = np.arange(4, dtype=np.float32)
    spec = tensorfile.TensorSpec(dtype="float32", shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes)
    assert (spec.dtype, spec.shape, spec.data_len) == ("F32", [4], 16)
    assert tensorfile.serialize({"a": spec}) == save({"a": a})
    # A length that does not match the shape is refused, not written.
    bad = tensorfile.TensorSpec(dtype="float32", shape=[8], data_ptr=a.ctypes.data, data_len=a.nbytes)
    with pytest.raises(SafetensorError):
        tensorfile.serialize({"a": bad})
    # torch's packed float4: the storage shape's last dimension doubles.
    packed = tensorfile.TensorSpec(dtype="float4_e2m1fn_x2", shape=[2, 2], data_ptr=a.ctypes.data, data_len=4)
    assert packed.shape == [2, 4] and packed.dtype == "F4"


def test_deserialize_gives_bytearrays():
    data = save({"b": np.ones(2, np.float32), "a": np.zeros(1, np.uint8)})
    out = tensorfile.deserialize(data)
    assert [n for n, _ in out] == ["a", "b"]
    assert out[1][1] == {"dtype": "F32", "shape": [2], "data": bytearray(np.ones(2, np.float32).tobytes())}
    assert isinstance(out[1][1]["data"], bytearray)


def test_serialize_file_atomic_and_sync(tmp_path):
    path = tmp_path / "out.safetensors"
    save_file({"a": np.zeros(3)}, path, sync=True)
    save_file({"a": np.ones(3)}, path)
    np.testing.assert_array_equal(load_file(path)["a"], np.ones(3))
    assert sorted(os.listdir(tmp_path)) == ["out.safetensors"]


def test_tensor_named_metadata_is_refused():
    with pytest.raises(SafetensorError):
        save({"__metadata__": np.zeros(1)})


def test_metadata_must_be_strings():
    with pytest.raises(TypeError):
        save({"a": np.zeros(1)}, metadata={"a": 1})


def test_safe_open_handle_real_file_text_mode_and_fsspec(sample):
    path, tensors = sample
    with open(path, "r") as f:
        with tensorfile._safe_open_handle(f, framework="np") as g:
            np.testing.assert_array_equal(g.get_tensor("b"), tensors["b"])
            assert g.metadata() == {"format": "np"}


def test_safe_open_handle_file_object_without_descriptor(sample):
    path, tensors = sample

    class Counting(io.BytesIO):
        reads = 0

        def read(self, n=-1):
            Counting.reads += 1
            return super().read(n)

    source = Counting(path.read_bytes())
    with tensorfile._safe_open_handle(source, framework="np") as g:
        assert g.keys() == sorted(tensors)
        before = Counting.reads
        np.testing.assert_array_equal(g.get_tensor("a"), tensors["a"])
        np.testing.assert_array_equal(g.get_slice("b")[1:, ::2], tensors["b"][1:, ::2])
        assert Counting.reads > before


def test_safe_open_handle_fsspec(sample):
    fsspec = pytest.importorskip("fsspec")
    path, tensors = sample
    fs = fsspec.filesystem("memory")
    with fs.open("/x.safetensors", "wb") as f:
        f.write(path.read_bytes())
    with fs.open("/x.safetensors", "rb") as f:
        with tensorfile._safe_open_handle(f, framework="np") as g:
            np.testing.assert_array_equal(g.get_tensor("big"), tensors["big"])


def test_safe_open_handle_refuses_text_without_bytes():
    with pytest.raises(SafetensorError):
        tensorfile._safe_open_handle(io.StringIO("hello"), framework="np")


def test_safe_open_handle_short_reads(sample):
    path, tensors = sample

    class Dribble(io.RawIOBase):
        """Returns at most 7 bytes per read, as sockets may."""

        def __init__(self, data):
            self.inner = io.BytesIO(data)

        def readable(self):
            return True

        def seekable(self):
            return True

        def seek(self, pos, whence=0):
            return self.inner.seek(pos, whence)

        def read(self, n=-1):
            return self.inner.read(min(n, 7) if n >= 0 else 7)

    with tensorfile._safe_open_handle(Dribble(path.read_bytes()), framework="np") as g:
        np.testing.assert_array_equal(g.get_tensor("b"), tensors["b"])


def test_safetensor_error_module_is_importable():
    import importlib

    importlib.import_module(SafetensorError.__module__)
    assert issubclass(SafetensorError, Exception)


def test_handles_survive_garbage_collection(sample):
    path, tensors = sample
    arrays = [safe_open(path, "np").get_tensor("big") for _ in range(20)]
    gc.collect()
    for arr in arrays:
        np.testing.assert_array_equal(arr, tensors["big"])


def test_frameworks_are_imported_only_when_asked_for(sample):
    import subprocess
    import sys

    path, _ = sample
    script = (
        "import sys, tensorfile, tensorfile.numpy\n"
        f"f = tensorfile.safe_open({str(path)!r}, 'np'); f.get_tensor('b'); f.get_slice('b')[1:]\n"
        "assert 'torch' not in sys.modules and 'mlx' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_safetensor_error_is_a_value_error(tmp_path):
    """The format page says a reader rejects a bad file with ValueError:
    SafetensorError is one, and still what `except SafetensorError` (the
    reference's class, as the reference's code names it) and `except
    Exception` catch."""
    import tensorfile

    assert issubclass(tensorfile.SafetensorError, ValueError)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{}")
    for caught in (ValueError, tensorfile.SafetensorError, Exception):
        try:
            tensorfile.safe_open(bad, "np")
        except caught as e:
            assert isinstance(e, tensorfile.SafetensorError) and isinstance(e, ValueError)
        else:
            pytest.fail(f"{bad} was accepted")
    with pytest.raises(ValueError) as e:
        tensorfile.deserialize(b"\x00")
    assert type(e.value) is tensorfile.SafetensorError
    # Raised from the package's Python code too.
    with pytest.raises(ValueError):
        tensorfile.safe_open(bad, "nonsense")
