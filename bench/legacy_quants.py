"""How fast gguf-mtp encodes the legacy block types (a draft LM head re-encoded by ``--draft-head-type``, an MTP
block by ``--mtp-type``), against gguf-py's numpy encoders in the same run on the same rows: a Q8_0 LM head's rows
decoded and encoded again, as ``draft_head.reencode`` does, one chunk at a time on one thread. Both encoders' bytes
are compared first; the seconds a 248,320 x 4096 head would take are projected from the rate.

    python -m bench.legacy_quants [--rows 2048] [--width 4096] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from gguf_mtp.ggml_types import dequantize, encode
from gguf_mtp.legacy_quants import ENCODERS

HEAD = 248_320 * 4096  # the Qwen3.5/3.6 LM head's weights


def best_rate(fn: Callable[[], object], n: int, repeat: int) -> float:
    """Weights a second, the best of ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def main() -> None:
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2048, help="rows of the LM head's chunk (default 2048)")
    ap.add_argument("--width", type=int, default=4096, help="n_embd, a multiple of 32 (default 4096)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    if a.rows < 1 or a.width < 32 or a.width % 32 or a.repeat < 1:
        ap.error("--rows and --repeat at least 1, --width a multiple of 32")
    rng = np.random.default_rng(0)
    src = encode(rng.standard_normal(a.rows * a.width).astype(np.float32) * 0.02, T.Q8_0)
    n = a.rows * a.width
    print(f"{a.rows} x {a.width} rows of a Q8_0 LM head, decoded and encoded (best of {a.repeat}; one thread)")
    print("| type | gguf-mtp M weights/s | gguf-py M weights/s | x gguf-py | 248,320 x 4096 head, s |")
    print("|---|---|---|---|---|")
    for t in ENCODERS:
        ours = lambda t=t: encode(dequantize(src, T.Q8_0, (a.width, a.rows)).reshape(-1), t)  # noqa: E731
        theirs = lambda t=t: quantize(dequantize(src, T.Q8_0, (a.width, a.rows)).reshape(-1, 32), t)  # noqa: E731
        if not np.array_equal(ours(), np.asarray(theirs()).reshape(-1)):
            raise SystemExit(f"error: {t.name}: gguf-mtp's bytes differ from gguf-py's")
        r_ours, r_theirs = best_rate(ours, n, a.repeat), best_rate(theirs, n, a.repeat)
        print(f"| {t.name} | {r_ours / 1e6:.1f} | {r_theirs / 1e6:.1f} | {r_ours / r_theirs:.2f} | "
              f"{HEAD / r_ours:.1f} |")


if __name__ == "__main__":
    main()
