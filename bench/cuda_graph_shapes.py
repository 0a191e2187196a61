"""What changing the batch shape costs with CUDA graphs (docs/upstream/cuda-graph-per-shape.md): the target context
decodes verify-sized batches, either always the same size or cycling through several (as ``auto`` changing the
draft length does), and the time per decode is compared. With stock ggml-cuda every change re-captures the one
graph the context has; with the withdrawn 0003-cuda-graph-per-shape patch (commit 869a1bb) each shape kept its own.
On a build with it, run this twice, GGML_CUDA_GRAPH_MAX_SHAPES=1 (stock behaviour) and unset (8); or once each on
a stock build and another (LLAMA_CPP_LIB_PATH).
Usage: python bench/cuda_graph_shapes.py MODEL.gguf [SIZES, default 2,3,4,5] [STEPS, default 400]"""

import os
import statistics
import sys
import time

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)
from gguf_mtp.runtime import patches
from gguf_mtp.runtime.llama import Batch, Context, Model


def run(path: str, m: Model, toks: list[int], pattern: list[int], steps: int) -> list[float]:
    """Per-decode wall times (synchronized) for batches of the sizes in ``pattern``, repeated; positions advance
    by one token a step as in speculative decoding with one accepted token, and the KV cache stays below 256
    cells so that its view does not change shape on its own."""
    # a hybrid model steps its recurrent state back through llama.cpp's snapshots (n_rs_seq)
    c = Context(m, n_ctx=512, n_batch=max(8, max(pattern)), n_rs_seq=max(pattern) if m.recurrent else 0)
    b = Batch(max(8, max(pattern)))
    b.fill(toks[:8], 0)
    c.decode_batch(b)
    times = []
    for i in range(steps):
        n = pattern[i % len(pattern)]
        pos = 8 + (i % 200)
        if not c.seq_rm(pos):
            sys.exit(f"error: {path}: llama.cpp cannot roll this model back (use an attention-only or qwen35 model)")
        b.fill(toks[pos:pos + n], pos, last_logits=True)
        t = time.perf_counter()
        c.decode_batch(b)
        c.synchronize()
        times.append(time.perf_counter() - t)
    c.close()
    return times[len(pattern) * 4:]  # past the warm-up of every shape


def main() -> None:
    path = sys.argv[1]
    sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "2,3,4,5").split(",")]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    m = Model(path, n_gpu_layers=99)
    toks = m.tokenize("for i in range(10):\n    print(i)\n" * 200)
    print(f"llama.cpp patches: {', '.join(patches.names()) or 'none (stock)'}; "
          f"GGML_CUDA_GRAPH_MAX_SHAPES={os.environ.get('GGML_CUDA_GRAPH_MAX_SHAPES', '(unset)')}")
    for label, pattern in [(f"fixed {n}", [n]) for n in sizes] + [("cycling " + ",".join(map(str, sizes)), sizes)]:
        t = run(path, m, toks, pattern, steps)
        print(f"{label:>20}: median {statistics.median(t) * 1e3:.3f} ms, mean {statistics.fmean(t) * 1e3:.3f} ms "
              f"per decode ({len(t)} decodes)")


if __name__ == "__main__":
    main()
