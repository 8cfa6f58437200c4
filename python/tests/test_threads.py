"""One handle used from several threads at once, and saves and loads from
several threads (the interpreter is released around reads and writes)."""

import threading

import numpy as np
import pytest

from tensorfile import SafetensorError, safe_open
from tensorfile.numpy import load_file, save_file

THREADS = 8


def run(workers):
    errors = []

    def guarded(fn):
        try:
            fn()
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.fixture
def file(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {f"t{i}": rng.standard_normal((64, 300)).astype(np.float32) for i in range(12)}
    path = tmp_path / "threads.safetensors"
    save_file(tensors, path)
    return path, tensors


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_one_handle_many_threads(file, backend):
    path, tensors = file
    f = safe_open(path, "np", backend=backend)
    barrier = threading.Barrier(THREADS)

    def worker():
        barrier.wait()
        for _ in range(20):
            for name, expected in tensors.items():
                np.testing.assert_array_equal(f.get_tensor(name), expected)
                np.testing.assert_array_equal(f.get_slice(name)[3:9, ::5], expected[3:9, ::5])
            assert f.keys() == sorted(tensors)

    run([worker] * THREADS)
    f.close()


def test_close_while_other_threads_read(file):
    path, tensors = file
    f = safe_open(path, "np")
    started = threading.Barrier(THREADS + 1)

    def reader():
        started.wait()
        for _ in range(200):
            try:
                np.testing.assert_array_equal(f.get_tensor("t3"), tensors["t3"])
            except SafetensorError as e:
                assert "closed" in str(e)
                return

    def closer():
        started.wait()
        f.close()

    run([reader] * THREADS + [closer])


def test_saves_and_loads_in_threads(tmp_path):
    tensors = {"a": np.random.default_rng(1).standard_normal((300, 300)), "b": np.arange(10)}

    def worker(i):
        def go():
            for j in range(10):
                path = tmp_path / f"w{i}_{j}.safetensors"
                save_file(tensors, path)
                back = load_file(path)
                for k, v in tensors.items():
                    np.testing.assert_array_equal(back[k], v)

        return go

    run([worker(i) for i in range(4)])
