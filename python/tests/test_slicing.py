"""get_slice: numpy's results wherever numpy and the reference's tests
agree; the reference's pinned error texts; numpy's rules where the reference
is wrong (negative bounds, booleans, empty dimensions, start >= stop)."""

import itertools

import numpy as np
import pytest

from tensorfile import SafetensorError, safe_open
from tensorfile.numpy import save_file

ARRAYS = {
    "m": np.arange(50, dtype=np.float32).reshape(10, 5),
    "c": np.arange(24, dtype=np.int16).reshape(4, 3, 2),
    "s": np.array(3.5, dtype=np.float64),
    "e": np.zeros((0, 3), dtype=np.float32),
    "big": np.arange(40_000, dtype=np.int32).reshape(200, 200),
}


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    path = tmp_path_factory.mktemp("slices") / "s.safetensors"
    save_file(ARRAYS, path)
    with safe_open(path, "np") as f:
        yield f


def bounds(n):
    return [None, 0, 1, n - 1, n, -1, -n, -n - 3, 2]


def test_slice_object(opened):
    s = opened.get_slice("m")
    assert s.get_shape() == [10, 5] and s.get_dtype() == "F32"
    assert s.shape == [10, 5] and s.dtype == "F32" and len(s) == 10


@pytest.mark.parametrize("name", ["m", "big", "e"])
def test_one_dimension_against_numpy(opened, name):
    array = ARRAYS[name]
    s = opened.get_slice(name)
    n = array.shape[0]
    for start, stop, step in itertools.product(bounds(n), bounds(n), [None, 1, 2, 3, 7]):
        if (start is not None and start > n) or (stop is not None and stop > n):
            continue
        index = slice(start, stop, step)
        np.testing.assert_array_equal(s[index], array[index], err_msg=str(index))
        inner = array.shape[1]
        if (start is None or start <= inner) and (stop is None or stop <= inner):
            np.testing.assert_array_equal(s[:, index], array[:, index], err_msg=str(index))


INDICES = [
    (),
    Ellipsis,
    (Ellipsis, 1),
    (1, Ellipsis),
    (slice(None), 2),
    (2, slice(1, 3)),
    (-1,),
    (-10, -5),
    (slice(2, None), -1),
    (slice(None, None, 3), slice(None, None, 2)),
    (None,),
    (None, 2),
    (slice(1, 3), None),
    (True,),
    (False,),
    (True, 1),
    (np.int64(3),),
    (slice(np.int32(1), np.int64(4)),),
    [],
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_multi_dimensional_against_numpy(opened, index):
    for name in ("m", "c"):
        array = ARRAYS[name]
        try:
            expected = array[index]
        except IndexError:
            with pytest.raises(SafetensorError):
                opened.get_slice(name)[index]
            continue
        got = opened.get_slice(name)[index]
        assert got.shape == expected.shape, (name, index)
        np.testing.assert_array_equal(got, expected)


def test_scalars_and_empty(opened):
    s = opened.get_slice("s")
    assert s[()] == 3.5 and s[...] == 3.5
    assert s[None].shape == (1,)
    e = opened.get_slice("e")
    assert e[:].shape == (0, 3) and e[:, 1].shape == (0,) and e[..., 1:].shape == (0, 2)


def test_slices_are_owned_and_writeable(opened):
    part = opened.get_slice("big")[10:20]
    assert part.flags.writeable and part.flags.c_contiguous
    part[0, 0] = -1
    assert opened.get_slice("big")[10, 0] == 2000


PINNED = [
    ((slice(2, None), -6), "Invalid index -6 for dimension 1 of size 5"),
    ([0, 1], "Non empty lists are not implemented"),
    (
        (slice(2, None), 20),
        "Error during slicing [2:, 20] with shape [10, 5]: index 20 out of bounds for tensor dimension #1 of size 5",
    ),
    (
        slice(None, 20),
        "Error during slicing [:20] with shape [10, 5]: index 19 out of bounds for tensor dimension #0 of size 10",
    ),
    (
        (slice(None), slice(None, 20)),
        "Error during slicing [:, :20] with shape [10, 5]: index 19 out of bounds for tensor dimension #1 of size 5",
    ),
    (
        (1, 2, 3),
        "Error during slicing [1, 2, 3] with shape [10, 5]: more slicing indexes than dimensions in tensor",
    ),
    (10, "Error during slicing [10] with shape [10, 5]: index 10 out of bounds for tensor dimension #0 of size 10"),
    (-11, "Invalid index -11 for dimension 0 of size 10"),
    (slice(11, None), "Error during slicing [11:] with shape [10, 5]: index 11 out of bounds for tensor dimension #0 of size 10"),
    (slice(None, None, -1), "Slice step must be a positive integer, got -1"),
    (slice(None, None, 0), "Slice step must be a positive integer, got 0"),
    ((Ellipsis, Ellipsis), "Only one ellipsis (...) is allowed in slice index"),
    (2.0, "Unsupported slice index at position 0: expected slice, int, or ellipsis"),
    ((0, "a"), "Unsupported slice index at position 1: expected slice, int, or ellipsis"),
]


@pytest.mark.parametrize("index,text", PINNED, ids=[t for _, t in PINNED])
def test_reference_error_texts(opened, index, text):
    with pytest.raises(SafetensorError) as e:
        opened.get_slice("m")[index]
    assert str(e.value) == text


def test_numpy_where_the_reference_is_wrong(opened):
    s = opened.get_slice("m")
    m = ARRAYS["m"]
    # The reference raises OverflowError for negative bounds.
    np.testing.assert_array_equal(s[-3:], m[-3:])
    np.testing.assert_array_equal(s[:-1, -2:], m[:-1, -2:])
    np.testing.assert_array_equal(s[-20:], m[-20:])
    # The reference reads [True] as index 1.
    assert s[True].shape == (1, 10, 5) and s[False].shape == (0, 10, 5)
    # The reference fails with a SystemError on start > stop, and on any
    # slice of a tensor with an empty dimension.
    assert s[5:2].shape == (0, 5)
    assert opened.get_slice("e")[:].shape == (0, 3)
    # A start at the end is an empty slice, as in numpy.
    assert s[10:].shape == (0, 5)
