"""Hostile input: mutated headers, lying lengths, absurd shapes. Every one
is refused with SafetensorError (or, when the mutation left a valid file, read
in full); none crashes, hangs or allocates what the file claims."""

import random
import struct

import numpy as np
import pytest

import tensorfile
from tensorfile import SafetensorError, safe_open
from tensorfile.numpy import load, save

from conftest import raw_file

BASE = save(
    {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([1, 2, 3], dtype=np.int64),
        "c": np.zeros((0, 4), dtype=np.float16),
    },
    metadata={"k": "v"},
)


def exercise(data, path):
    """Opens ``data`` every way and reads everything there is."""
    path.write_bytes(data)
    for opener in (
        lambda: safe_open(path, "np"),
        lambda: safe_open(path, "np", backend="pread"),
        lambda: tensorfile._safe_open_handle(__import__("io").BytesIO(data), "np"),
    ):
        try:
            f = opener()
        except SafetensorError:
            continue
        with f:
            for name in f.keys():
                f.get_tensor(name)
                shape = f.get_slice(name).get_shape()
                if shape and shape[0] > 0:
                    f.get_slice(name)[:1]
            f.metadata()
    for loader in (lambda: load(data), lambda: tensorfile.numpy.load_file(path)):
        try:
            loader()
        except SafetensorError:
            pass
    report = tensorfile.validate(path)
    assert isinstance(report["valid"], bool)


def test_mutated_headers(tmp_path):
    rng = random.Random(19)
    header_end = 8 + struct.unpack("<Q", BASE[:8])[0]
    path = tmp_path / "m.safetensors"
    for _ in range(400):
        data = bytearray(BASE)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(0, header_end)
            data[at] = rng.choice([rng.randrange(256), ord("9"), ord("-"), ord("["), ord('"'), 0])
        exercise(bytes(data), path)


def test_truncations(tmp_path):
    path = tmp_path / "t.safetensors"
    for cut in range(0, len(BASE), 3):
        exercise(BASE[:cut], path)


LIARS = [
    b'{"a":{"dtype":"F32","shape":[1024,1024],"data_offsets":[0,4194304]}}',
    b'{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}}',
    b'{"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,18446744073709551615]}}',
    b'{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}',
    b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"__metadata__":{"x":"' + b"y" * 10000 + b'"}}',
    b"[" * 100000,
    b'{"' + b"a" * 100000 + b'":1}',
]


@pytest.mark.parametrize("header", LIARS, ids=lambda h: h[:40].decode(errors="replace"))
def test_lying_headers(tmp_path, header):
    path = tmp_path / "l.safetensors"
    with pytest.raises(SafetensorError) as e:
        path.write_bytes(raw_file(header, b"\x00"))
        safe_open(path, "np")
    assert e.value.rule in (1, 2, 3, 4, 5)
    exercise(raw_file(header, b"\x00"), path)


def test_header_length_past_the_file(tmp_path):
    path = tmp_path / "h.safetensors"
    path.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    with pytest.raises(SafetensorError, match="rule 1"):
        safe_open(path, "np")


def test_not_safetensors_at_all(tmp_path):
    for data in (b"", b"hello world garbage", b"PK\x03\x04" + b"\x00" * 64, bytes(range(256)) * 4):
        path = tmp_path / "g.safetensors"
        path.write_bytes(data)
        with pytest.raises(SafetensorError):
            safe_open(path, "np")


def test_directories_and_special_files(tmp_path):
    with pytest.raises(SafetensorError):
        safe_open(tmp_path, "np")  # an empty directory holds no weights
    with pytest.raises(SafetensorError):
        safe_open("/dev/null", "np")
