#!/usr/bin/env python3
"""numpy's side of `examples/bench_npz.rs`: the same conversions in one run
of numpy and the reference safetensors package. Prints the process's peak
resident memory in MiB.

    python scripts/bench_npz_py.py to-npz IN.safetensors OUT.npz
    python scripts/bench_npz_py.py to-st IN.npz OUT.safetensors
"""

import resource
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

mode, src, out = sys.argv[1:4]
if mode == "to-npz":
    # The arrays in the file's data order, as tensorfile writes members.
    arrays = load_file(src)
    np.savez(out, **arrays)
else:
    with np.load(src) as z:
        save_file({k: z[k] for k in z.files}, out)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
