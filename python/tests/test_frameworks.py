"""tensorfile.flax, .tensorflow, .paddle and .mlx against the reference's
modules (safetensors 0.8.0) on the same arrays and files: the same bytes
saved, the same dtypes, shapes and values loaded, through ``load_file``,
``load`` and ``safe_open``. Each framework's tests are skipped when it (or
the reference) is not installed; CI installs jax."""

import subprocess
import sys

import numpy as np
import pytest

import tensorfile
from tensorfile import _frameworks, _native

ml_dtypes = pytest.importorskip("ml_dtypes")

# The arrays every framework saves, as numpy makes them (the framework's
# own arrays are made from these). Zero-sized and 0-d tensors included.
_CASES = {
    "f32": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7,
    "f16": (np.arange(12, dtype=np.float16) - 3).reshape(3, 4),
    "bf16": (np.arange(10, dtype=np.float32) / 3).astype(ml_dtypes.bfloat16),
    "f64": np.array([1.5, -2.25, 1e30], dtype=np.float64),
    "f8": (np.arange(8, dtype=np.float32) - 4).astype(ml_dtypes.float8_e4m3fn),
    "i64": np.array([-(2**40), 0, 7], dtype=np.int64),
    "i16": np.array([-300, 0, 300], dtype=np.int16),
    "i32": np.array([[1, -2], [3, -4]], dtype=np.int32),
    "i8": np.array([-128, 0, 127], dtype=np.int8),
    "u8": np.array([0, 255, 9], dtype=np.uint8),
    "bool": np.array([True, False, True]),
    "c64": (np.arange(6, dtype=np.float32) + 1j).astype(np.complex64),
    "scalar": np.array(2.5, dtype=np.float32),
    "empty": np.zeros((2, 0), dtype=np.float32),
    "big": np.linspace(-1, 1, 1 << 15, dtype=np.float32).reshape(128, 256),
}


class _Jax:
    name = "flax"
    module = "jax"

    def __init__(self):
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp

    def make(self, array):
        return self.jnp.asarray(array)

    def raw(self, tensor):
        return np.asarray(tensor).tobytes()

    def pointer(self, tensor):
        return tensor.unsafe_buffer_pointer()

    def compute(self, tensor):
        return bool(self.jnp.equal(tensor, tensor).all())


class _Tf:
    name = "tensorflow"
    module = "tensorflow"

    def __init__(self):
        import tensorflow as tf

        self.tf = tf

    def make(self, array):
        return self.tf.convert_to_tensor(array)

    def raw(self, tensor):
        return tensor.numpy().tobytes()

    def compute(self, tensor):
        return bool(self.tf.reduce_all(self.tf.math.equal(tensor, tensor)))

    def pointer(self, tensor):
        # TensorFlow shows its memory only through DLPack (which numpy takes
        # for bfloat16 as the same bits in uint16).
        if tensor.dtype == self.tf.bfloat16:
            tensor = self.tf.bitcast(tensor, self.tf.uint16)
        return np.from_dlpack(tensor).ctypes.data


class _Paddle:
    name = "paddle"
    module = "paddle"

    def __init__(self):
        import paddle

        self.paddle = paddle

    def make(self, array):
        if array.dtype == ml_dtypes.bfloat16:
            return self.paddle.to_tensor(array.astype(np.float32)).astype(self.paddle.bfloat16)
        if array.dtype == ml_dtypes.float8_e4m3fn:
            return self.paddle.to_tensor(array.astype(np.float32)).astype(self.paddle.float8_e4m3fn)
        return self.paddle.to_tensor(array)

    def raw(self, tensor):
        # (BF16 and float8 come to numpy as integers of their width.)
        return tensor.numpy().tobytes()

    def pointer(self, tensor):
        return tensor.data_ptr()

    def compute(self, tensor):
        return bool(self.paddle.equal(tensor, tensor).all())


class _Mlx:
    name = "mlx"
    module = "mlx.core"

    def __init__(self):
        import mlx.core as mx

        self.mx = mx

    def make(self, array):
        if array.dtype == ml_dtypes.bfloat16:
            return self.mx.array(array.astype(np.float32)).astype(self.mx.bfloat16)
        return self.mx.array(array)

    def raw(self, tensor):
        if tensor.dtype == self.mx.bfloat16:
            return np.asarray(tensor.view(self.mx.uint16)).tobytes()
        return np.asarray(tensor).tobytes()

    pointer = None

    def compute(self, tensor):
        return bool(self.mx.array_equal(tensor, tensor))


_KINDS = {"flax": _Jax, "tensorflow": _Tf, "paddle": _Paddle, "mlx": _Mlx}


@pytest.fixture(params=sorted(_KINDS))
def fw(request):
    """One framework, its tensorfile module and the reference's, or the test
    is skipped."""
    kind = _KINDS[request.param]
    pytest.importorskip(kind.module)
    pytest.importorskip("safetensors")
    import importlib

    helper = kind()
    helper.ours = importlib.import_module(f"tensorfile.{kind.name}")
    helper.ref = importlib.import_module(f"safetensors.{kind.name}")
    return helper


# The cases a framework has no dtype for (TensorFlow has no float8; this
# mlx makes no float8 arrays).
_WITHOUT = {"tensorflow": {"f8"}, "mlx": {"f8"}}


def _names(fw):
    return [name for name in _CASES if name not in _WITHOUT.get(fw.name, ())]


def _cases(fw):
    """The framework's tensors of each case, by name."""
    return {name: fw.make(_CASES[name]) for name in _names(fw)}


def _reference(call, *args, **kwargs):
    """The reference's result, or None where it fails (its tensorflow cannot
    save 0-d tensors, its flax and tensorflow ``load`` cannot read BF16, its
    mlx cannot save BF16): there tensorfile is checked against the case's
    own tensor instead."""
    try:
        return call(*args, **kwargs)
    except Exception:
        return None


def _same(fw, ours, ref):
    """The same names, dtypes, shapes and bytes."""
    assert sorted(ours) == sorted(ref)
    for name in ref:
        assert ours[name].dtype == ref[name].dtype, name
        assert tuple(ours[name].shape) == tuple(ref[name].shape), name
        assert fw.raw(ours[name]) == fw.raw(ref[name]), name


def _as_made(fw, ours, name):
    """Where the reference fails: the case's tensor as the framework made it."""
    _same(fw, ours, {name: fw.make(_CASES[name])})


def test_import_tensorfile_imports_no_framework():
    code = (
        "import sys, tensorfile, tensorfile.numpy\n"
        "from tensorfile import safe_open\n"
        "print(sorted(m for m in ('jax', 'tensorflow', 'paddle', 'mlx', 'flax', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_reference_framework_names_are_accepted():
    for name in ("flax", "jax", "tf", "tensorflow", "paddle", "mlx"):
        assert name in _frameworks._NAMES
    with pytest.raises(tensorfile.SafetensorError, match="framework keras is invalid"):
        _frameworks.framework("keras", "cpu")


def test_save_is_the_reference_bytes(fw, tmp_path):
    other = fw.make(np.ones((3,), np.float32))
    for name, tensor in _cases(fw).items():
        tensors = {name: tensor, "other": other}
        # One key: the reference writes metadata in hash order.
        meta = {"k": name}
        ours = fw.ours.save(dict(tensors), metadata=meta)
        ref = _reference(fw.ref.save, dict(tensors), metadata=meta)
        if ref is not None:
            assert ours == ref, name
        else:
            _as_made(fw, {name: fw.ours.load(ours)[name]}, name)
        fw.ours.save_file(dict(tensors), tmp_path / "ours.safetensors", metadata=meta)
        assert (tmp_path / "ours.safetensors").read_bytes() == ours, name
        ref_path = tmp_path / f"ref-{name}.safetensors"
        _reference(fw.ref.save_file, dict(tensors), str(ref_path), metadata=meta)
        if ref is not None:
            assert ref_path.read_bytes() == ours, name


def test_save_leaves_the_callers_dict(fw):
    tensors = {"a": fw.make(_CASES["f32"])}
    before = tensors["a"]
    fw.ours.save(tensors)
    assert tensors["a"] is before


def _file(fw, tmp_path, name):
    path = tmp_path / f"{name}.safetensors"
    fw.ours.save_file({name: fw.make(_CASES[name])}, path)
    return path


def test_load_file_is_the_references(fw, tmp_path):
    for name in _names(fw):
        path = _file(fw, tmp_path, name)
        ref = _reference(fw.ref.load_file, str(path))
        for backend in ("mmap", "pread"):
            ours = fw.ours.load_file(path, backend=backend)
            if ref is not None:
                _same(fw, ours, ref)
            else:
                _as_made(fw, ours, name)
    with pytest.raises(tensorfile.SafetensorError, match="backend"):
        fw.ours.load_file(path, backend="nope")


def test_load_is_the_references(fw, tmp_path):
    for name in _names(fw):
        data = _file(fw, tmp_path, name).read_bytes()
        ours = fw.ours.load(data)
        ref = _reference(fw.ref.load, data)
        if ref is not None:
            _same(fw, ours, ref)
        else:
            _as_made(fw, ours, name)


def test_safe_open_is_the_references(fw, tmp_path):
    import safetensors

    path = str(tmp_path / "all.safetensors")
    fw.ours.save_file(_cases(fw), path)
    names = [fw.name] + {"flax": ["jax"], "tensorflow": ["tf"]}.get(fw.name, [])
    for framework in names:
        with tensorfile.safe_open(path, framework) as ours, safetensors.safe_open(path, framework) as ref:
            assert ours.keys() == ref.keys()
            for name in ref.keys():
                theirs = _reference(ref.get_tensor, name)
                mine = {name: ours.get_tensor(name)}
                if theirs is not None:
                    _same(fw, mine, {name: theirs})
                else:
                    _as_made(fw, mine, name)
            for index in [slice(None), (slice(1, None), slice(0, 200, 3)), (3, slice(None, 5)), (-1,)]:
                _same(fw, {"big": ours.get_slice("big")[index]}, {"big": ref.get_slice("big")[index]})
            _same(fw, {"f32": ours.get_slice("f32")[:, 1:]}, {"f32": ref.get_slice("f32")[:, 1:]})


def test_load_file_shares_the_read_memory(fw, tmp_path):
    """The framework's tensor is the memory the native read filled (where
    the framework views foreign memory; MLX copies, as documented)."""
    if fw.pointer is None:
        pytest.skip(f"{fw.name} copies (documented)")
    path = tmp_path / "x.safetensors"
    fw.ours.save_file({k: fw.make(_CASES[k]) for k in ("big", "bf16", "i32", "c64")}, path)
    chosen = _frameworks.framework(fw.name, "cpu")
    shared = 0
    for name, buffer in _native.load_file(str(path)):
        address = np.asarray(buffer).ctypes.data
        if fw.name == "flax" and address % 64:
            continue  # JAX copies what is not 64-byte aligned, by its own rule.
        tensor = chosen.convert(buffer, "cpu")
        assert fw.pointer(tensor) == address, name
        shared += 1
    assert shared >= 1


def test_tensors_at_unaligned_offsets_compute(fw, tmp_path):
    """A mapped tensor whose bytes start off any 64-byte boundary (TensorFlow
    aborts the process computing on such memory, so it is copied) works in
    the framework's own operations."""
    path = tmp_path / "unaligned.safetensors"
    # "a" (4 bytes) first: "b" starts 4 bytes after an 8-byte boundary.
    fw.ours.save_file({"a": fw.make(np.ones((1,), np.float32)), "b": fw.make(_CASES["big"])}, path)
    for framework in [fw.name]:
        with tensorfile.safe_open(path, framework) as f:
            tensor = f.get_tensor("b")
            assert fw.compute(tensor)
            assert fw.raw(tensor) == _CASES["big"].tobytes()
    for name in ("bf16", "c64", "i8"):
        path = tmp_path / f"{name}.safetensors"
        fw.ours.save_file({"a": fw.make(np.ones((1,), np.uint8)), name: fw.make(np.resize(_CASES[name], 1 << 16))}, path)
        with tensorfile.safe_open(path, framework) as f:
            assert fw.compute(f.get_tensor(name)), name
