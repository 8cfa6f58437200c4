"""Records what the reference (safetensors 0.8.0) returns for
``safe_open(path, "pt").get_slice(name)[index]`` over many index expressions,
into tests/fixtures/slicing/pt_get_slice.json, which test_pt_slicing.py
replays against tensorfile.

The reference indexes a torch tensor for ``pt``, so these are torch's rules
(torch 2.15): stops past the end clamp, lists and tensors index rows, an
index out of range raises IndexError, a negative step ValueError.

Run it in a venv with the reference, torch and numpy (e.g. the one of
scripts/requirements-tools.txt), from the repository's root:

    python python/tests/gen_pt_slicing.py

Each index is stored as the Python expression that makes it (``I[...]``
returns its key; ``torch`` and ``np`` are in scope), with the result's shape,
dtype and values, or the name of the exception the reference raised.
"""

import json
import pathlib
import sys
import tempfile
import warnings

import numpy as np
import safetensors
import torch
from safetensors import safe_open
from safetensors.torch import save_file

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "slicing" / "pt_get_slice.json"

# Every tensor holds arange(n) in its dtype, in this shape.
TENSORS = {
    "m": ("F32", [6, 5]),
    "c": ("I16", [4, 3, 2]),
    "s": ("F64", []),
    "e": ("F32", [0, 3]),
}
TORCH_DTYPES = {"F32": torch.float32, "I16": torch.int16, "F64": torch.float64}


class _Index:
    """``I[...]`` is the key itself."""

    def __getitem__(self, key):
        return key


I = _Index()

# Index expressions: every form torch accepts or refuses, as the reference's
# tests and torch's own indexing use them.
EXPRESSIONS = [
    # integers
    "I[0]", "I[3]", "I[5]", "I[6]", "I[10]", "I[-1]", "I[-6]", "I[-7]", "I[0, 0]", "I[0, -1]",
    "I[2, 4]", "I[1, 2, 1]", "I[1, 2, 3]", "I[1, 2, 3, 4]", "I[()]", "I[...]", "I[np.int64(2)]",
    "I[np.int32(-1)]", "I[np.uint8(1)]",
    # slices
    "I[:]", "I[0:100]", "I[-100:2]", "I[2:-100]", "I[7:]", "I[6:]", "I[5:2]", "I[1:1]",
    "I[::2]", "I[1::3]", "I[::100]", "I[::-1]", "I[::0]", "I[3:1:-1]", "I[:, 1:3]", "I[:, ::2]",
    "I[1:4, 1:]", "I[:20]", "I[:, :20]", "I[-3:]", "I[:-1, -2:]", "I[2:, -6]", "I[2:, 20]",
    "I[np.int32(1):np.int64(4)]", "I[1.0:3]", "I[:, 0:2:1.5]", "I[0, :]", "I[:, 0]",
    # None and Ellipsis
    "I[None]", "I[None, 2]", "I[:, None]", "I[..., None]", "I[None, ..., None]",
    "I[..., 1]", "I[1, ...]", "I[..., ...]", "I[..., 1:, ...]", "I[None, None, 0, None]",
    "I[0, None, 1]", "I[..., None, 0]", "I[None, ...]",
    # booleans
    "I[True]", "I[False]", "I[True, 1]", "I[0, False]", "I[True, [0, 1]]", "I[None, True]",
    "I[True, True]", "I[..., False]", "I[np.bool_(True)]", "I[[True]]",
    # lists
    "I[[0, 1]]", "I[[[0, 1]]]", "I[[0, 1],]", "I[:, [0, 2]]", "I[[0, 1], [1, 2]]",
    "I[[-1, 0]]", "I[[6]]", "I[[-7]]", "I[[]]", "I[[0], 1]", "I[1, [0, 1]]", "I[[[0, 1], [2, 3]]]",
    "I[[True, False, True, False, False, False]]", "I[[True, False]]", "I[:, [True, False, True, False, False]]",
    "I[[0, 1], None]", "I[None, [0, 1]]", "I[[0, 1], ..., [1, 0]]", "I[[0] * 40]", "I[[2, 0, 2]]",
    "I[[[0, 1], [1, 0]], :]", "I[[0, slice(None)]]", "I[[0, None]]", "I[[0, ...]]", "I[[0.5, 1]]",
    "I[[1, 2], 1:]", "I[:, [0, 1], 0]", "I[0, :, [0, 1]]", "I[[0, 1], :, [0, 1]]", "I[..., [0, 1]]",
    "I[[0, 1], 1:, 0]", "I[[[0], [1]], [0, 1]]", "I[[0, 1, 2], [0, 1]]",
    # numpy arrays
    "I[np.array([0, 1])]", "I[np.array([[0, 1], [2, 3]])]", "I[np.array(2)]",
    "I[np.array([True, False, True, False, False, False])]", "I[np.array([1, 0], dtype=np.uint8)]",
    "I[np.array([0.0, 2.0])]", "I[:, np.array([4, -5])]",
    # tensors
    "I[torch.tensor(1)]", "I[torch.tensor(-1)]", "I[torch.tensor(9)]", "I[torch.tensor([0, 1])]",
    "I[torch.tensor([[0, 1], [2, 3]])]", "I[torch.tensor(True)]", "I[torch.tensor(False)]",
    "I[torch.tensor([True, False, True, False, False, False])]", "I[torch.tensor(1):3]",
    "I[torch.tensor([0, 1]), torch.tensor([1, 2])]", "I[torch.ones(6, 5, dtype=torch.bool)]",
    "I[torch.ones(4, 3, dtype=torch.bool)]", "I[torch.ones(4, 3, dtype=torch.bool), 0:1]",
    "I[torch.tensor([1, 0, 1, 0, 0, 0], dtype=torch.uint8)]", "I[torch.tensor(2, dtype=torch.uint8)]",
    "I[torch.tensor([0.0])]", "I[torch.tensor(1.0)]", "I[:, torch.tensor([0, 1])]", "I[torch.tensor([], dtype=torch.long)]",
    "I[torch.tensor(0), torch.tensor([0, 1])]",
    # what torch refuses
    "I[2.0]", "I[0, 'a']", "I['a']", "I[{}]", "I[None, 1.5]", "I[[0, 'a']]", "I[[[0, 1], [2]]]",
]


def encode(value):
    if isinstance(value, float) and value != value:
        return "nan"
    return value


def main():
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "s.safetensors"
        tensors = {}
        for name, (dtype, shape) in TENSORS.items():
            n = int(np.prod(shape)) if shape else 1
            tensors[name] = torch.arange(n).to(TORCH_DTYPES[dtype]).reshape(shape)
        save_file(tensors, str(path))
        scope = {"I": I, "np": np, "torch": torch}
        with safe_open(str(path), "pt") as f:
            for expression in EXPRESSIONS:
                for name in TENSORS:
                    record = {"tensor": name, "index": expression}
                    index = eval(expression, scope)  # noqa: S307 - our own list
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            result = f.get_slice(name)[index]
                    except Exception as e:  # noqa: BLE001 - the type is the record
                        record["error"] = type(e).__name__
                    else:
                        record["shape"] = list(result.shape)
                        record["dtype"] = str(result.dtype).replace("torch.", "")
                        record["values"] = [encode(v) for v in result.flatten().tolist()]
                    records.append(record)
    document = {
        "generator": "python/tests/gen_pt_slicing.py",
        "versions": {
            "safetensors": safetensors.__version__,
            "torch": torch.__version__.split("+")[0],
            "numpy": np.__version__,
        },
        "about": "safe_open(path, 'pt').get_slice(tensor)[index] by the reference; every tensor "
        "is arange(n) in its dtype and shape; index is a Python expression (I[...] is its key).",
        "tensors": {name: {"dtype": d, "shape": s} for name, (d, s) in TENSORS.items()},
        "records": records,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(document, indent=1) + "\n")
    errors = sum(1 for r in records if "error" in r)
    print(f"{OUT}: {len(records)} records ({errors} errors)", file=sys.stderr)


if __name__ == "__main__":
    main()
