"""Where the prompt-processing cost of MTP goes: a 2048-token prompt decoded (A) plainly, (B) with the target
emitting hidden rows, (C) as B plus the MTP context fed those rows (what `gguf-mtp run` does), (D) the MTP
context alone. Best of 3, synchronised. Usage: python -m bench.gpu_prompt MODEL.gguf [NGL]"""

import sys
import time

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)

# isort: split

# isort: split
import numpy as np

from gguf_mtp.runtime.llama import Batch, Context, Model

path, ngl = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 99
m = Model(path, load_mtp=True, n_gpu_layers=ngl)
toks = m.tokenize("def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n" * 200)[:2048]
N, NB = len(toks), 512


def run(nextn: bool, feed: bool, mtp_only: bool = False, fa: bool | None = None) -> float:
    best = 1e9
    for _ in range(3):
        tgt = Context(m, n_ctx=4096, n_batch=NB, n_rs_seq=3 if nextn else 0, embeddings_nextn=nextn)
        mc = Context(m, n_ctx=4096, n_batch=NB, mtp=True, flash_attn=fa) if feed or mtp_only else None
        b, mb = Batch(NB), Batch(NB, m.n_embd_out)
        rows = np.zeros((NB, m.n_embd_out), np.float32)
        t = time.perf_counter()
        for i in range(0, N, NB):
            chunk = toks[i:i + NB]
            if not mtp_only:
                b.fill(chunk, i)
                tgt.decode_batch(b)
                tgt.synchronize()
                if feed:
                    rows = tgt.h_rows(len(chunk))
            if mc is not None:
                mb.fill(chunk, i, embd=rows[: len(chunk)])
                mc.decode_batch(mb)
                mc.synchronize()
        best = min(best, time.perf_counter() - t)
        tgt.close()
        if mc is not None:
            mc.close()
    return best


a, b_, c, d = run(False, False), run(True, False), run(True, True), run(False, False, mtp_only=True)
e, f = run(False, False, mtp_only=True, fa=True), run(False, False, mtp_only=True, fa=False)
from gguf_mtp.runtime import llama  # noqa: E402

print("llama.cpp log on the MTP context:",
      [s.strip() for s in llama._log if "flash" in s.lower() or "not supported" in s][-4:])
for name, t in (("A plain", a), ("B + hidden rows", b_), ("C + MTP fed (run)", c), ("D MTP context alone", d),
                ("E MTP alone, FA on", e), ("F MTP alone, FA off", f)):
    print(f"{name:22} {t * 1000:8.1f} ms  {N / t:8.0f} t/s  (+{(t / a - 1) * 100:5.1f}% vs plain)")
