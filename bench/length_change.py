"""What a change of draft length costs, decode by decode (issue 24: `auto` pays a measured cost for every change,
13-35 ms on an H100 for the 9B and 35B-A3B shapes, and what that cost is made of was not known).

One session loaded as `gguf-mtp run` loads it (warm-up at load over every length, so every shape ran once), then
steps driven by a fixed schedule of draft lengths: blocks of ``--block`` steps at k, alternating between a base length
and the others (2,3,2,4,2,1,... by default). Every ``llama_decode`` is timed on the host (the call: graph build or
reuse, scheduling, CUDA graph capture or launch) and its synchronisation apart (the device finishing), per context
(T: the target, H: the MTP head). Printed: for the j-th step after a change, the median over the changes of the step's
wall time over a steady step of the same length, and of each context's host and sync time. Run it under
``GGML_CUDA_DISABLE_GRAPHS=1`` (no CUDA graphs: what is left is llama.cpp's graph rebuild) and
``LLAMA_GRAPH_REUSE_DISABLE=1`` (every decode rebuilds: a steady step's rebuild cost) beside the default.

    python -m bench.length_change MODEL.gguf -ngl 99 [--base 2] [--others 3,4,1] [--block 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)
from gguf_mtp.runtime import llama as L
from gguf_mtp.runtime.sampling import Sampler
from gguf_mtp.runtime.session import MTPSession

TEXT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
        "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n") * 4

_clock = time.perf_counter


class Recorder:
    """Wraps Context.decode_batch and Context.synchronize: per decode [role, rows, host s, sync s]."""

    def __init__(self) -> None:
        self.roles: dict[int, str] = {}
        self.step: list[list] = []
        self._dec, self._sync = L.Context.decode_batch, L.Context.synchronize
        rec = self

        def decode_batch(ctx: L.Context, batch: L.Batch) -> None:
            t = _clock()
            rec._dec(ctx, batch)
            rec.step.append([rec.roles.get(id(ctx), "?"), batch.n, _clock() - t, 0.0, id(ctx)])

        def synchronize(ctx: L.Context) -> None:
            t = _clock()
            rec._sync(ctx)
            dt = _clock() - t
            for r in reversed(rec.step):
                if r[4] == id(ctx):
                    r[3] += dt
                    break

        L.Context.decode_batch = decode_batch  # type: ignore[method-assign,assignment]
        L.Context.synchronize = synchronize  # type: ignore[method-assign,assignment]


def schedule(base: int, others: list[int], block: int, rounds: int) -> list[int]:
    out: list[int] = []
    for _ in range(rounds):
        for o in others:
            out += [base] * block + [o] * block
    return out + [base] * block


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--base", type=int, default=2)
    ap.add_argument("--others", default="3,4,1")
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the per-step records here")
    a = ap.parse_args()
    others = [int(x) for x in a.others.split(",")]
    k_max = max([a.base, *others])
    rec = Recorder()
    t0 = _clock()
    s = MTPSession(a.model, n_gpu_layers=a.n_gpu_layers, n_draft=k_max, adaptive=True, n_ctx=4096)
    e = s.engine
    switch = list(e.adaptive.switch_s) if e.adaptive is not None else []
    print(f"loaded and warmed up in {_clock() - t0:.1f} s; chained drafts: {s.chained}; auto's measured change of "
          f"length at load: {', '.join(f'{x * 1e3:.1f} ms' for x in switch) or '-'}; env: "
          + " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith(("GGML_", "LLAMA_GRAPH", "GGUF_MTP_"))))
    e.adaptive = None
    rec.roles = {id(e.tgt): "T"}
    if e.mtp is not None:
        rec.roles[id(e.mtp)] = "H"
    prompt = s.model.tokenize(TEXT)
    plan = schedule(a.base, others, a.block, a.rounds)
    steps: list[dict] = []
    e.reset()
    e.feed(prompt)
    e.use_sampler(Sampler(None))
    prev = None
    since = 0
    block_from = None  # the length the current block changed from (None: the first block)
    for k in plan:
        if len(e.tokens) + k + 2 >= e.n_ctx - 8:
            sys.exit("error: the context filled up: fewer --rounds or a shorter --block")
        since = since + 1 if k == prev else 0
        if since == 0:
            block_from = prev
        e.k = k
        rec.step = []
        n0 = len(e.tokens)
        t = _clock()
        em = e.step()
        wall = _clock() - t
        steps.append({"k": k, "from": block_from, "j": since, "wall": wall, "pos": n0,
                      "emitted": len(em), "decodes": [r[:4] for r in rec.step]})
        prev = k
    s.close()

    def part(st: dict, role: str, i: int) -> float:
        return sum(r[2 + i] for r in st["decodes"] if r[0] == role)

    steady = {k: [st for st in steps if st["k"] == k and st["j"] >= 4 and st["pos"] // 256 == (st["pos"] + 6) // 256]
              for k in sorted(set(plan))}
    print(f"{len(steps)} steps; {sum(st['emitted'] for st in steps)} tokens; steady steps (4th on in a block):")
    for k, sts in steady.items():
        if not sts:
            continue
        med = {f: statistics.median(v) * 1e3 for f, v in
               [("wall", [x["wall"] for x in sts]),
                ("T host", [part(x, "T", 0) for x in sts]), ("T sync", [part(x, "T", 1) for x in sts]),
                ("H host", [part(x, "H", 0) for x in sts]), ("H sync", [part(x, "H", 1) for x in sts])]}
        print(f"  k={k}: " + ", ".join(f"{f} {v:.3f}" for f, v in med.items()) + f" ms ({len(sts)} steps)")
    print("after a change (the j-th step at the new length; medians over changes, ms; extra = wall - steady wall):")
    for j in range(4):
        rows = [st for st in steps if st["j"] == j and st["from"] is not None and steady.get(st["k"])]
        if not rows:
            continue
        extra = [st["wall"] * 1e3 - statistics.median(x["wall"] for x in steady[st["k"]]) * 1e3 for st in rows]
        line = ", ".join(f"{f} {statistics.median(v) * 1e3:.3f}" for f, v in
                         [("T host", [part(x, "T", 0) for x in rows]), ("T sync", [part(x, "T", 1) for x in rows]),
                          ("H host", [part(x, "H", 0) for x in rows]), ("H sync", [part(x, "H", 1) for x in rows])])
        print(f"  j={j}: extra {statistics.median(extra):.3f} (min {min(extra):.3f}, max {max(extra):.3f}); {line} "
              f"({len(rows)} changes)")
    starts = [i for i, st in enumerate(steps) if st["j"] == 0 and st["from"] is not None and steady.get(st["k"])]
    total = [sum(st["wall"] * 1e3 - statistics.median(x["wall"] for x in steady[st["k"]]) * 1e3
                 for st in steps[i:i + 4]) for i in starts]
    if total:
        print(f"a change's whole cost (4 steps after it over steady ones): median {statistics.median(total):.2f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(steps, f)


if __name__ == "__main__":
    main()
