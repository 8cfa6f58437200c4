"""save_file of tensorfile.numpy beside the reference's, in one process:
one large file and many tiny tensors, medians of 7 interleaved runs.
Run it once per tensorfile build (PYTHONPATH=<a build's site dir>) to
compare builds; the reference's time in the same process is the yardstick.

    PYTHONPATH=/tmp/pnew python python/bench/save_old_new.py target/benchsave
"""
import os, sys, time, statistics, numpy as np
import tensorfile.numpy as tn, safetensors.numpy as sn
d = sys.argv[1]; runs = 7
rng = np.random.default_rng(0)
cases = {
    "1 GiB, 64 tensors": {f"w{i}": rng.standard_normal(4 * 1024 * 1024 // 1, dtype=np.float32) for i in range(64)},
    "1000 tiny tensors": {f"t{i}": np.zeros(16, np.float32) for i in range(1000)},
    "20000 tiny tensors": {f"t{i}": np.zeros(4, np.float16) for i in range(20000)},
}
for name, arrays in cases.items():
    ours, ref = [], []
    for _ in range(runs):
        for fn, acc, out in ((tn.save_file, ours, "a"), (sn.save_file, ref, "b")):
            p = os.path.join(d, out + ".safetensors")
            t = time.perf_counter(); fn(arrays, p); acc.append(time.perf_counter() - t)
            os.remove(p)
    mo, mr = statistics.median(ours), statistics.median(ref)
    print(f"{name}: tensorfile {mo*1e3:.1f} ms, reference {mr*1e3:.1f} ms, ratio ref/ours {mr/mo:.2f}x")
