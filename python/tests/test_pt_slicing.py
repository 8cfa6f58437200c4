"""get_slice with framework="pt" follows torch, as the reference's does:
every record of tests/fixtures/slicing/pt_get_slice.json (the reference's
results, made by gen_pt_slicing.py) replayed against tensorfile.

The replay through torch is skipped without torch. Without it (CI), the
same index plan is checked through numpy: the indexes that need no torch
are planned by torch's rules, read by the native slicer and finished with
numpy, which must give the reference's shapes, values and exception types.
"""

import json
import math
import warnings

import numpy as np
import pytest

from conftest import FIXTURES
from tensorfile import safe_open
from tensorfile import _frameworks, _index
from tensorfile.numpy import save_file

FIXTURE = json.loads((FIXTURES / "slicing" / "pt_get_slice.json").read_text())
NUMPY_DTYPES = {"F32": np.float32, "I16": np.int16, "F64": np.float64}
RECORDS = FIXTURE["records"]


class _Index:
    def __getitem__(self, key):
        return key


def _scope(torch=None):
    scope = {"I": _Index(), "np": np}
    if torch is not None:
        scope["torch"] = torch
    return scope


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """The fixture's tensors: arange(n) in each dtype and shape."""
    arrays = {}
    for name, spec in FIXTURE["tensors"].items():
        n = math.prod(spec["shape"])
        arrays[name] = np.arange(n).astype(NUMPY_DTYPES[spec["dtype"]]).reshape(spec["shape"])
    out = tmp_path_factory.mktemp("pt") / "s.safetensors"
    save_file(arrays, out)
    return out


def _check(record, get):
    what = f"{record['tensor']}{record['index'][1:]}"
    if "error" in record:
        with pytest.raises(Exception) as e:
            get()
        assert type(e.value).__name__ == record["error"], f"{what}: {e.value!r}"
        return
    got = get()
    assert list(got.shape) == record["shape"], what
    assert [float(v) for v in np.asarray(got).flatten()] == [float(v) for v in record["values"]], what


def _ids(records):
    return [f"{r['tensor']}{r['index'][1:]}" for r in records]


NEEDS_TORCH = [r for r in RECORDS if "torch." in r["index"]]
# torch checks an advanced index's bounds element by element, so an index
# out of range selects nothing from an empty tensor; numpy checks them all.
NUMPY_DIFFERS = {("e", "I[:, np.array([4, -5])]")}
TORCH_FREE = [
    r for r in RECORDS if "torch." not in r["index"] and (r["tensor"], r["index"]) not in NUMPY_DIFFERS
]


def test_the_fixture_covers_every_form():
    assert FIXTURE["versions"]["safetensors"] == "0.8.0"
    errors = {r["error"] for r in RECORDS if "error" in r}
    assert errors == {"IndexError", "ValueError", "TypeError"}
    assert len(TORCH_FREE) > 400 and len(NEEDS_TORCH) > 50


@pytest.mark.parametrize("record", RECORDS, ids=_ids(RECORDS))
def test_pt_get_slice_is_the_references(record, path, torch):
    index = eval(record["index"], _scope(torch))  # noqa: S307 - the fixture's own expressions
    with safe_open(path, "pt") as f:
        s = f.get_slice(record["tensor"])

        def get():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = s[index]
            assert isinstance(out, torch.Tensor)
            if "dtype" in record:
                assert str(out.dtype) == "torch." + record["dtype"]
            return out.numpy()

        _check(record, get)


@pytest.mark.parametrize("record", TORCH_FREE, ids=_ids(TORCH_FREE))
def test_torch_rules_without_torch(record, path):
    """torch's index plan, the native read and numpy for the rest."""
    index = eval(record["index"], _scope())  # noqa: S307 - the fixture's own expressions
    numpy = _frameworks.framework("np", None)
    with safe_open(path, "np") as f:
        s = f.get_slice(record["tensor"])
        _check(record, lambda: s._by_torch_rules(index, numpy, _index.NUMPY_RULES))


def test_np_keeps_numpy_rules(path):
    """The numpy framework is unchanged: a stop past the end is refused, as
    the reference refuses it, where pt clamps."""
    from tensorfile import SafetensorError

    with safe_open(path, "np") as f:
        with pytest.raises(SafetensorError):
            f.get_slice("m")[0:100]
        assert f.get_slice("m")[-3:].shape == (3, 5)
