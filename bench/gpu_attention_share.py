"""Is the MTP context's prompt cost one full-attention layer's? 16-layer trunks of the same widths with 1, 4
and 8 full-attention layers (the rest Gated DeltaNet; llama.cpp's qwen35 needs at least one recurrent
layer), each with its MTP block: time 2048 prompt tokens through the trunk alone and the MTP context alone,
and fit trunk = n_attn * attention layer + (16 - n_attn) * DeltaNet layer. If attention layers dominate on
this back-end, the MTP context (one attention block plus eh_proj) costs about one attention layer.
Usage: python -m bench.gpu_attention_share [WORKDIR] [NGL]"""

import sys
import time
from pathlib import Path
from typing import Any

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)

# isort: split

# isort: split
import numpy as np

from gguf_mtp.convert import convert
from gguf_mtp.runtime.llama import Batch, Context, Model
from tests.synthetic import SyntheticSpec, write_checkpoint

work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/gguf-mtp-attn")
ngl = int(sys.argv[2]) if len(sys.argv) > 2 else 99
NB, N = 512, 2048
widths: dict[str, Any] = dict(hidden=2048, heads=16, kv_heads=4, head_dim=128, intermediate=8192, lin_k_heads=8,
                              lin_v_heads=16, lin_head_dim=128, vocab_size=32768)


def timed(m: Model, mtp: bool) -> float:
    toks = list(np.random.default_rng(0).integers(100, 30000, N))
    rows = np.random.default_rng(1).standard_normal((NB, m.n_embd_out), dtype=np.float32)
    best = 1e9
    for _ in range(3):
        c = Context(m, n_ctx=4096, n_batch=NB, mtp=mtp)
        b = Batch(NB, m.n_embd_out if mtp else 0)
        t = time.perf_counter()
        for i in range(0, N, NB):
            b.fill(toks[i:i + NB], i, embd=rows if mtp else None)
            c.decode_batch(b)
        c.synchronize()
        best = min(best, time.perf_counter() - t)
        c.close()
    return best


rows = []
for interval in (16, 4, 2):
    ck = work / f"ck-{interval}"
    if not (ck / "config.json").exists():
        write_checkpoint(ck, SyntheticSpec("qwen35", layers=16, attention_interval=interval, **widths))
    f = convert(ck, outfile=work / f"m-{interval}.gguf", outtype="q8_0", force=True, progress=False).path
    with Model(f, load_mtp=True, n_gpu_layers=ngl) as m:
        trunk, mtp = timed(m, False), timed(m, True)
    rows.append((16 // interval, trunk, mtp))
    print(f"{16 // interval:2d} attention + {16 - 16 // interval:2d} DeltaNet layers: trunk {trunk * 1000:7.1f} ms, "
          f"MTP context {mtp * 1000:6.1f} ms")
A = np.array([[n, 16 - n] for n, _, _ in rows], float)
(att, gdn), *_ = np.linalg.lstsq(A, np.array([t for _, t, _ in rows]), rcond=None)
mtp = float(np.mean([m for _, _, m in rows]))
print(f"fit: attention layer {att * 1000:.2f} ms, DeltaNet layer {gdn * 1000:.2f} ms; MTP context {mtp * 1000:.2f} ms "
      f"= {mtp / att:.2f} attention layers = {mtp / gdn:.2f} DeltaNet layers")
