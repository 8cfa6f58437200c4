#!/usr/bin/env python3
"""The gguf package's side of `examples/bench_gguf.rs`: one safetensors file
of F32 weights to a GGUF file of Q8_0 weights, in one run of the package
(`safe_open`, `gguf.quants.quantize`, `GGUFWriter`), as a plain container
with the names as they are (what `tensorfile convert --raw --arch llama
--type q8_0` does). Prints the process's peak resident memory in MiB.

    python scripts/bench_gguf_py.py IN.safetensors OUT.gguf
"""

import resource
import sys

import gguf
from safetensors import safe_open

src, out = sys.argv[1], sys.argv[2]
Q8_0 = gguf.GGMLQuantizationType.Q8_0
w = gguf.GGUFWriter(out, "llama")
with safe_open(src, "np") as f:
    for name in sorted(f.keys()):
        data = f.get_tensor(name)
        w.add_tensor(name, gguf.quants.quantize(data, Q8_0), raw_dtype=Q8_0)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
