"""What chaining an MTP step's drafts in one decode saves (docs/upstream/mtp-draft-chain.md): the k drafts of a
step made the way the proposer makes them today (a decode of the step's rows, then one decode per further draft,
each draft's token read back to the host in between) against one decode with ``llama_set_mtp_chain(ctx, k - 1)``
(patches/llama.cpp/proposed/0016-mtp-draft-chain.patch, numbered 0004 before session 38). The MTP context is fed
the target's own hidden rows of a text, so the drafts are real ones; both ways must draft the same tokens (the
share that agree is printed: a GPU may flip near-ties). Times are wall times per step, synchronized, median over
the steps after a warm-up.
Rows: "sequential" (1-row draft decodes), "sequential, padded" (every decode padded to k + 1 rows with the cache's
tail, as the runtime's stable shapes do), "chained".
Usage: python bench/mtp_chain.py MODEL.gguf [-k 3] [-ngl 99] [--steps 200] [--rows M] [-fa on|off|auto] [-t N]
(the model needs its MTP head; LLAMA_CPP_LIB_PATH at a build with the patch)"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)

# isort: split
import numpy as np

from gguf_mtp.runtime import patches
from gguf_mtp.runtime.llama import Batch, Context, Model

TEXT = ("The history of the printing press begins in the fifteenth century, when movable type made books cheaper. "
        "def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()\n")


def hidden_rows(m: Model, toks: list[int], n_batch: int) -> np.ndarray:
    """The target's hidden row of every token of ``toks``."""
    with Context(m, n_ctx=len(toks) + 16, n_batch=n_batch, embeddings_nextn=True) as tgt:
        b, rows = Batch(n_batch), []
        for p in range(0, len(toks), n_batch):
            chunk = toks[p:p + n_batch]
            b.fill(chunk, p, last_logits=True)
            tgt.decode_batch(b)
            rows.append(tgt.h_rows(len(chunk)).copy())
    return np.concatenate(rows)


class Feed:
    """Token ``t`` at position ``p`` goes into the MTP context with the target's hidden row of ``p - 1``."""

    def __init__(self, toks: list[int], h: np.ndarray) -> None:
        self.toks = toks
        self.rows = np.vstack([np.zeros((1, h.shape[1]), np.float32), h[:-1]])

    def put(self, b: Batch, p0: int, n: int) -> None:
        b.fill(self.toks[p0:p0 + n], p0, embd=self.rows[p0:p0 + n])


def step_sequential(ctx: Context, b: Batch, feed: Feed, pos: int, m: int, k: int, pad: bool) -> list[int]:
    """The step's m rows ending at ``pos`` (logits on the last), then a decode per further draft."""
    p0 = pos - m + 1
    ctx.seq_rm(p0)
    feed.put(b, p0, m)
    b.logits_np[m - 1] = 1
    ctx.decode_batch(b)
    logits, row = ctx.logits_view(m - 1), m - 1
    drafts = [int(np.argmax(logits))]
    toks, hs = {pos: feed.toks[pos]}, {pos: feed.rows[pos]}
    for j in range(1, k):
        h, p = ctx.h_row(row).copy(), pos + j
        toks[p], hs[p] = drafts[-1], h
        if pad:  # k + 1 rows: the cache's tail decoded again from the same inputs (the runtime's stable shapes)
            q0 = p - k
            ctx.seq_rm(q0)
            b.clear()
            for q in range(q0, p + 1):
                b.add(toks.get(q, feed.toks[q]), q, logits=q == p, embd=hs.get(q, feed.rows[q]))
            row = b.n - 1
        else:
            b.clear()
            b.add(drafts[-1], p, logits=True, embd=h)
            row = 0
        ctx.decode_batch(b)
        drafts.append(int(np.argmax(ctx.logits_view(row))))
    return drafts


def step_chained(ctx: Context, b: Batch, feed: Feed, pos: int, m: int, k: int) -> list[int]:
    """The step's m rows and k - 1 chained rows in one decode."""
    p0 = pos - m + 1
    ctx.seq_rm(p0)
    feed.put(b, p0, m + k - 1)  # the chained rows' own tokens and rows are not read
    b.logits_np[m - 1:m + k - 1] = 1
    ctx.decode_batch(b)
    return [int(np.argmax(ctx.logits_view(m - 1 + j))) for j in range(k)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("-k", type=int, default=3, help="drafts a step (default 3)")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rows", type=int, default=0, help="rows of a step's first decode (default k + 1)")
    ap.add_argument("-fa", "--flash-attn", choices=["on", "off", "auto"], default="auto")
    ap.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (default: llama.cpp's)")
    a = ap.parse_args()
    k, m = a.k, a.rows or a.k + 1
    if k < 2 or m < 1:
        sys.exit("error: -k must be at least 2 and --rows at least 1")
    if "mtp-draft-chain" not in patches.names():
        sys.exit("error: the loaded libllama lacks the mtp-draft-chain patch: point LLAMA_CPP_LIB_PATH at a build "
                 "with patches/llama.cpp/proposed/0016-mtp-draft-chain.patch")
    fa = {"on": True, "off": False, "auto": None}[a.flash_attn]
    model = Model(a.model, load_mtp=True, n_gpu_layers=a.n_gpu_layers)
    toks = model.tokenize(TEXT * 64)
    warm = 20
    need = m + k + warm + a.steps + 8
    if len(toks) < need:
        sys.exit(f"error: the text gives {len(toks)} tokens, {need} needed: fewer --steps")
    toks = toks[:need]
    feed = Feed(toks, hidden_rows(model, toks, 256))
    print(f"llama.cpp patches: {', '.join(patches.names())}; k={k}, first decode {m} rows, -fa {a.flash_attn}, "
          f"-ngl {a.n_gpu_layers}")
    n_batch = max(m + k, 2 * k + 2)
    results: dict[str, tuple[list[float], list[list[int]], int]] = {}
    for label in ("sequential", "sequential, padded", "chained"):
        with Context(model, n_ctx=len(toks) + 64, n_batch=n_batch, mtp=True, flash_attn=fa,
                     n_threads=a.threads or None) as ctx:
            b = Batch(n_batch, model.n_embd_out)
            feed.put(b, 0, m)  # the cache holds every position before a step's rows
            ctx.decode_batch(b)
            ctx.set_mtp_chain(k - 1 if label == "chained" else 0)
            times, drafts = [], []
            for s in range(warm + a.steps):
                pos = m + s
                t = time.perf_counter()
                if label == "chained":
                    d = step_chained(ctx, b, feed, pos, m, k)
                else:
                    d = step_sequential(ctx, b, feed, pos, m, k, pad=label.endswith("padded"))
                ctx.synchronize()
                if s >= warm:
                    times.append(time.perf_counter() - t)
                    drafts.append(d)
            results[label] = times, drafts, ctx.graphs_reused()
    base = results["sequential"][1]
    for label, (times, drafts, reused) in results.items():
        same = sum(x == y for x, y in zip(drafts, base)) / len(base)
        print(f"{label:>20}: median {statistics.median(times) * 1e3:.3f} ms a step of {k} drafts "
              f"({statistics.median(times) * 1e3 / k:.3f} ms a draft), mean {statistics.fmean(times) * 1e3:.3f} ms; "
              f"drafts as sequential: {same:.0%} of {len(base)} steps; graphs reused: {reused}")


if __name__ == "__main__":
    main()
