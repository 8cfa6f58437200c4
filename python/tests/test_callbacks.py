"""Exceptions raised by Python callbacks (a file object's read() and seek()).

An ``Exception`` the callback raises is a failed read: it becomes the
documented ``SafetensorError`` naming the call. A ``BaseException`` that is
not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``
or a user's own) asks the program to stop rather than reporting a failed
read, so it comes back as itself, never caught by ``except Exception``."""

import io

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError
from tensorfile.numpy import save

DATA = save({"a": np.arange(6, dtype=np.float32), "b": np.ones(3, dtype=np.int64)})


class Stop(BaseException):
    """A user's own BaseException that is not an Exception."""


class Failing(io.BytesIO):
    """A file object whose read() or seek() raises ``error`` once armed."""

    def __init__(self, method, error, armed=True):
        super().__init__(DATA)
        self.method = method
        self.error = error
        self.armed = armed

    def read(self, n=-1):
        if self.armed and self.method == "read":
            raise self.error
        return super().read(n)

    def seek(self, *args):
        # The first seek finds the length; the next ones come before reads.
        if self.armed and self.method == "seek" and args != (0, 2):
            raise self.error
        return super().seek(*args)


PASSING = [KeyboardInterrupt, SystemExit, GeneratorExit, Stop]


@pytest.mark.parametrize("method", ["read", "seek"])
@pytest.mark.parametrize("kind", PASSING)
def test_base_exceptions_pass_through_when_opening(method, kind):
    error = kind("from the callback")
    with pytest.raises(kind) as caught:
        tensorfile._safe_open_handle(Failing(method, error), "np")
    assert caught.value is error


@pytest.mark.parametrize("method", ["read", "seek"])
@pytest.mark.parametrize("kind", PASSING)
def test_base_exceptions_pass_through_when_reading_a_tensor(method, kind):
    source = Failing(method, None, armed=False)
    with tensorfile._safe_open_handle(source, "np") as f:
        source.error = kind("later")
        source.armed = True
        with pytest.raises(kind) as caught:
            f.get_tensor("a")
        assert caught.value is source.error
        with pytest.raises(kind):
            f.get_slice("b")[1:]


@pytest.mark.parametrize("method", ["read", "seek"])
@pytest.mark.parametrize("error", [OSError("disk on fire"), ValueError("closed file")])
def test_exceptions_become_safetensor_errors(method, error):
    with pytest.raises(SafetensorError, match=f"{method} failed: .*(disk on fire|closed file)"):
        tensorfile._safe_open_handle(Failing(method, error), "np")
    source = Failing(method, None, armed=False)
    with tensorfile._safe_open_handle(source, "np") as f:
        source.error = error
        source.armed = True
        with pytest.raises(SafetensorError, match=f"{method} failed"):
            f.get_tensor("a")
