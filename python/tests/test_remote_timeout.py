"""``timeout=`` on the functions that take a URL: one deadline for all of a
call's remote reads (for ``safe_open``, from opening, over every read through
the handle), so that a server that accepts and never answers cannot hold a
call for minutes. A value that is not a positive number of seconds is a
``ValueError``."""

from __future__ import annotations

import math
import socket
import threading
import time

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open
from tensorfile.numpy import load_file, save

from remote_server import Server

# Well past the 1 s deadline, well short of the limits that end a call
# without one (30 s for a first byte, retried).
WITHIN = 8.0


@pytest.fixture
def silent():
    """A server that accepts connections and never says a word: the URL of
    a file on it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)  # kept open, never answered

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    yield f"http://127.0.0.1:{port}/model.safetensors"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def names_timeout(message: str) -> bool:
    return "timed out" in message and "timeout of 1s" in message


def test_safe_open_of_a_silent_server_ends_at_the_timeout(silent):
    start = time.monotonic()
    with pytest.raises(SafetensorError) as e:
        safe_open(silent, "np", timeout=1)
    assert time.monotonic() - start < WITHIN
    assert names_timeout(str(e.value)), str(e.value)


@pytest.mark.parametrize("call", ["load_file", "inspect", "load_file_dtype"])
def test_calls_on_a_silent_server_end_at_the_timeout(silent, call):
    start = time.monotonic()
    with pytest.raises(SafetensorError) as e:
        if call == "load_file":
            load_file(silent, timeout=1)
        elif call == "load_file_dtype":
            load_file(silent, dtype="f32", timeout=1)
        else:
            tensorfile.inspect(silent, timeout=1)
    assert time.monotonic() - start < WITHIN
    assert names_timeout(str(e.value)), str(e.value)


def test_validate_of_a_silent_server_reports_the_timeout(silent):
    start = time.monotonic()
    verdict = tensorfile.validate(silent, timeout=1)
    assert time.monotonic() - start < WITHIN
    assert verdict["valid"] is False
    assert names_timeout(verdict["error"]), verdict["error"]


def test_torch_load_file_of_a_silent_server_ends_at_the_timeout(silent):
    pytest.importorskip("torch")
    from tensorfile.torch import load_file as torch_load_file

    start = time.monotonic()
    with pytest.raises(SafetensorError) as e:
        torch_load_file(silent, timeout=1)
    assert time.monotonic() - start < WITHIN
    assert names_timeout(str(e.value)), str(e.value)


def test_safe_open_deadline_runs_from_opening_over_later_reads():
    server = Server()
    try:
        # Past the 64 KiB read with the header: fetched when asked for.
        w = np.arange(1 << 16, dtype=np.float32)
        server.put("/m.safetensors", save({"w": w}))
        url = f"{server.url}/m.safetensors"
        with safe_open(url, "np", timeout=1) as f:
            np.testing.assert_array_equal(f.get_tensor("w"), w)
            time.sleep(1.2)
            with pytest.raises(SafetensorError) as e:
                f.get_tensor("w")
        assert names_timeout(str(e.value)), str(e.value)
        # Without a timeout the same reads are not cut off.
        with safe_open(url, "np") as f:
            time.sleep(0.1)
            assert f.get_tensor("w").shape == w.shape
    finally:
        server.stop()


@pytest.mark.parametrize("bad", [0, -1, -0.5, math.nan, math.inf])
def test_a_bad_timeout_is_a_value_error(bad, tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(save({"w": np.zeros(2, dtype=np.float32)}))
    calls = [
        lambda: safe_open(path, "np", timeout=bad),
        lambda: load_file(path, timeout=bad),
        lambda: tensorfile.validate(path, timeout=bad),
        lambda: tensorfile.inspect(path, timeout=bad),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="timeout") as e:
            call()
        # A usage error, not a file's.
        assert not isinstance(e.value, SafetensorError)


def test_a_good_timeout_on_a_local_file_changes_nothing(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(save({"w": np.ones(3, dtype=np.float32)}))
    assert load_file(path, timeout=0.5)["w"].tolist() == [1.0, 1.0, 1.0]
    assert tensorfile.validate(path, timeout=2)["valid"]
