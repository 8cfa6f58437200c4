#!/usr/bin/env python3
"""Writes the IQ lattice grids of ggml as data files for tensorfile's GGUF
dequantizer: crates/tensorfile/src/gguf/grids/<TYPE>.bin.

Each file holds the grid's values in row order, one signed byte per value
(rows of 8 values for IQ2_XXS, IQ2_XS, IQ2_S and IQ1_S; of 4 for IQ3_XXS and
IQ3_S), decoded from gguf-py's own tables (gguf.quants, `init_grid`). IQ1_M
uses IQ1_S's grid. Run in the venv of scripts/requirements-gguf.txt:

    /work/venvs/gguf/bin/python scripts/make_gguf_grids.py
"""

import hashlib
import pathlib

import numpy as np
from gguf import quants

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/tensorfile/src/gguf/grids"

for name in ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S"]:
    cls = getattr(quants, name)
    cls.init_grid()
    grid = np.asarray(cls.grid, dtype=np.float32).reshape(cls.grid_shape)
    as_int = grid.astype(np.int8)
    assert (as_int.astype(np.float32) == grid).all(), name
    data = as_int.tobytes()
    (OUT / f"{name}.bin").write_bytes(data)
    print(name, cls.grid_shape, hashlib.sha256(data).hexdigest())
