"""Shared fixtures of the Python package's tests: the repository's test
files (tests/fixtures, read-only) and helpers to make small files."""

import json
import pathlib
import struct

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def manifest(path: pathlib.Path) -> dict:
    """The description beside a fixture (NAME.json for NAME.safetensors)."""
    return json.loads(path.with_suffix(".json").read_text())


def raw_file(header: bytes, data: bytes = b"") -> bytes:
    """A file of exactly these header and data bytes (no padding, no checks)."""
    return struct.pack("<Q", len(header)) + header + data


@pytest.fixture
def fixtures() -> pathlib.Path:
    return FIXTURES


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


@pytest.fixture
def torch():
    """torch, or the test is skipped (CI runs without it)."""
    module = _torch()
    if module is None:
        pytest.skip("torch is not installed")
    return module
