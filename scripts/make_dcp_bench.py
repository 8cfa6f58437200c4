#!/usr/bin/env python3
"""Write a torch-DCP-like checkpoint of 2 ranks for benchmarks (no torch
needed): the rank files torch's HuggingFaceStorageWriter(save_distributed=True)
writes, shard-0000R-model-0000K-of-00002.safetensors, each tensor's piece
with its saved_offsets in DCP_SHARDING_INFO.

    python3 scripts/make_dcp_bench.py DIR [GIB]

GIB (default 2) GiB of BF16 [8192, 8192] tensors (128 MiB each), half cut in
rows (Shard(0): each rank a contiguous half) and half in columns (Shard(1):
each rank half of every row), alternating between output files 1 and 2.
The bytes are random (one 64 MiB block from os.urandom, repeated).
"""
import json
import os
import struct
import sys

ROWS = COLS = 8192
ELEM = 2  # BF16


def main(out: str, gib: int) -> None:
    os.makedirs(out, exist_ok=True)
    count = gib * 8
    block = os.urandom(64 << 20)
    for rank in range(2):
        for k in (1, 2):
            names = [i for i in range(count) if i % 2 == k - 1]
            header, info, at = {}, {}, 0
            for i in names:
                if i % 4 < 2:  # rows
                    shape, offsets = [ROWS // 2, COLS], [rank * ROWS // 2, 0]
                else:  # columns
                    shape, offsets = [ROWS, COLS // 2], [0, rank * COLS // 2]
                n = shape[0] * shape[1] * ELEM
                name = f"model.layers.{i}.weight"
                header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + n]}
                info[name] = {"saved_offsets": offsets}
                at += n
            header["__metadata__"] = {
                "format": "pt",
                "DCP_VERSION": "1.0",
                "DCP_SHARDING_INFO": json.dumps(info),
            }
            text = json.dumps(header, separators=(",", ":")).encode()
            text += b" " * (-len(text) % 8)
            path = os.path.join(out, f"shard-{rank + 1:05}-model-{k:05}-of-00002.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(text)) + text)
                left = at
                while left:
                    n = min(left, len(block))
                    f.write(block[:n])
                    left -= n


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 2)
