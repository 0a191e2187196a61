"""Where the MTP context's prompt time goes on a GPU: per-token cost of the MTP context at several batch
sizes (to separate fixed from per-row costs), the time to fill the batch's hidden rows in Python, and (with
GGML_SCHED_DEBUG=2 in the environment) the scheduler's split of one MTP graph across back-ends.
Usage: python bench/gpu_mtp_graph.py MODEL.gguf [NGL]"""

import sys
import time

import gguf_mtp  # noqa: F401  (loads llama.cpp before numpy)
import numpy as np  # noqa: E402

from gguf_mtp.runtime.llama import Batch, Context, Model  # noqa: E402

path, ngl = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 99
m = Model(path, load_mtp=True, n_gpu_layers=ngl)
toks = (m.tokenize("for i in range(10):\n    print(i)\n" * 400) * 2)[:2048]
print(f"n_embd {m.n_embd_out}, {len(toks)} tokens")
for nb in (512, 256, 128, 32):
    best = (1e9, 1e9)
    for _ in range(2):
        mc = Context(m, n_ctx=4096, n_batch=nb, mtp=True)
        mb = Batch(nb, m.n_embd_out)
        rows = np.random.default_rng(0).standard_normal((nb, m.n_embd_out), dtype=np.float32)
        fill = dec = 0.0
        for i in range(0, len(toks), nb):
            t = time.perf_counter()
            mb.fill(toks[i:i + nb], i, embd=rows)
            t2 = time.perf_counter()
            mc.decode_batch(mb)
            mc.synchronize()
            fill, dec = fill + t2 - t, dec + time.perf_counter() - t2
        mc.close()
        best = min(best, (dec, fill))
    dec, fill = best
    print(f"batch {nb:4}: MTP decode {dec * 1000:7.1f} ms ({dec / len(toks) * 1e6:6.1f} us/token), "
          f"python fill {fill * 1000:6.1f} ms")
