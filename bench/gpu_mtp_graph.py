"""Where the MTP context's prompt time goes on a GPU: the trunk and the MTP context alone at several batch
sizes (fixed vs per-row costs), flash attention on/off, and the time to fill the hidden rows in Python.
With GGML_SCHED_DEBUG=2 GGUF_MTP_LLAMA_LOG=1 and --one, decodes a single MTP batch so the scheduler's
split of the graph across back-ends can be read from stderr.
Usage: python -m bench.gpu_mtp_graph MODEL.gguf [NGL] [--one]"""

import sys
import time

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)

# isort: split

# isort: split
import numpy as np

from gguf_mtp.runtime.llama import Batch, Context, Model

path, ngl = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 99
m = Model(path, load_mtp=True, n_gpu_layers=ngl)
toks = (m.tokenize("for i in range(10):\n    print(i)\n" * 400) * 2)[:2048]
rows = np.random.default_rng(0).standard_normal((512, m.n_embd_out), dtype=np.float32)


def run(nb: int, mtp: bool, fa: bool | None) -> tuple[float, float]:
    best = (1e9, 1e9)
    for _ in range(2):
        c = Context(m, n_ctx=4096, n_batch=nb, mtp=mtp, flash_attn=fa)
        b = Batch(nb, m.n_embd_out if mtp else 0)
        fill = dec = 0.0
        for i in range(0, len(toks), nb):
            t = time.perf_counter()
            b.fill(toks[i:i + nb], i, embd=rows[:nb] if mtp else None)
            t2 = time.perf_counter()
            c.decode_batch(b)
            c.synchronize()
            fill, dec = fill + t2 - t, dec + time.perf_counter() - t2
        c.close()
        best = min(best, (dec, fill))
    return best


if "--one" in sys.argv:
    c = Context(m, n_ctx=1024, n_batch=512, mtp=True)
    b = Batch(512, m.n_embd_out)
    b.fill(toks[:512], 0, embd=rows)
    c.decode_batch(b)
    c.synchronize()
    sys.exit(0)
print(f"n_embd {m.n_embd_out}, {len(toks)} tokens")
for nb in (512, 256, 128):
    for what, mtp, fa in (("trunk", False, None), ("MTP", True, None), ("MTP FA on", True, True),
                          ("MTP FA off", True, False)):
        dec, fill = run(nb, mtp, fa)
        print(f"batch {nb:4} {what:<11} decode {dec * 1000:7.1f} ms ({dec / len(toks) * 1e6:6.1f} us/token), "
              f"fill {fill * 1000:5.1f} ms")
