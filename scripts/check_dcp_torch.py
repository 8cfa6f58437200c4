#!/usr/bin/env python3
"""Check `tensorfile merge` against torch's own DCP consolidation, by hand
(needs torch; not run in CI, which uses tests/fixtures/dcp instead).

    /work/venvs/torch/bin/python scripts/check_dcp_torch.py [TENSORFILE] [WORKDIR]

Two processes (gloo, CPU) save larger DTensors than the fixture's (up to
2048 x 4096; Shard(0), Shard(1), Shard(2) of a 3-d tensor, Replicate; F32,
BF16, F16) with `HuggingFaceStorageWriter(save_distributed=True,
enable_consolidation=True, fqn_to_index_mapping=...)`: torch writes the rank
files to WORKDIR/sharded and its consolidation to WORKDIR. Then
`TENSORFILE merge WORKDIR/sharded WORKDIR/ours` (TENSORFILE defaults to
target/release/tensorfile), and every tensor of ours is compared with torch's
(dtype, shape, bytes) and with the tensor saved. Prints one line a tensor and
exits 1 on any difference.
"""
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SPEC = {
    "embed": (torch.float32, (2048, 1024), "row", 1),
    "q_proj": (torch.bfloat16, (1536, 4096), "col", 1),
    "experts": (torch.float16, (8, 512, 768), "last", 2),
    "norm": (torch.float32, (4096,), "rep", 2),
    "odd": (torch.bfloat16, (1023, 777), "col", 2),
}


def tensors():
    g = torch.Generator().manual_seed(2)
    return {n: torch.randn(s, generator=g).to(d) for n, (d, s, _, _) in SPEC.items()}


def save(rank, out):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    place = {"row": Shard(0), "col": Shard(1), "last": Shard(2), "rep": Replicate()}
    state = {n: distribute_tensor(t, mesh, [place[SPEC[n][2]]]) for n, t in tensors().items()}
    writer = HuggingFaceStorageWriter(
        out,
        save_distributed=True,
        enable_consolidation=True,
        fqn_to_index_mapping={n: s[3] for n, s in SPEC.items()},
    )
    dcp.save(state, storage_writer=writer)
    dist.destroy_process_group()


def main():
    from safetensors import safe_open

    tool = sys.argv[1] if len(sys.argv) > 1 else "target/release/tensorfile"
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
    mp.spawn(save, args=(work,), nprocs=2)
    ours = os.path.join(work, "ours")
    print(subprocess.run([tool, "merge", os.path.join(work, "sharded"), ours],
                         check=True, capture_output=True, text=True).stdout.strip())

    def read(d):
        out = {}
        for f in sorted(os.listdir(d)):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(d, f), "pt") as st:
                    out.update({k: (f, st.get_tensor(k)) for k in st.keys()})
        return out

    theirs, mine, saved = read(work), read(ours), tensors()
    bad = 0
    for n in SPEC:
        (tf, t), (mf, m) = theirs[n], mine[n]
        same = t.dtype == m.dtype and t.shape == m.shape and torch.equal(t.view(-1).view(torch.uint8), m.view(-1).view(torch.uint8))
        as_saved = torch.equal(saved[n].view(-1).view(torch.uint8), m.view(-1).view(torch.uint8))
        bad += not (same and as_saved)
        print(f"{n}: {m.dtype} {list(m.shape)} ours {mf} torch {tf}: bytes equal to torch's: {same}, to the saved tensor: {as_saved}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
