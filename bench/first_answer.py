"""Is a first answer as fast as the later ones? (issue 24: the warm-up at load must bring the first answer within 2%
of later ones.) One session per row, loaded as `gguf-mtp run` loads it, answers the same prompt ``--answers`` times
from a fresh context each time (``MTPSession.generate``); the row prints each answer's decode t/s and the first
over the median of the later ones. Each row is its own process (``--row``, run by the parent), so that the first
answer meets the back-end as a new process does: kernels not loaded, no graph captured.

    python -m bench.first_answer MODEL.gguf -ngl 99 [-n 256] [--answers 3] [--rows plain,2,auto] [--no-warmup-rows]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)

PROMPT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
          "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n") * 4


def one_row(model: str, ngl: int, n: int, answers: int, row: str, warmup: bool) -> dict:
    """In this process: the session, then ``answers`` answers; t/s of each."""
    from gguf_mtp.runtime.session import MTPSession

    kw: dict = {"n_gpu_layers": ngl, "warmup": warmup, "n_ctx": 4096}
    if row == "plain":
        s = MTPSession(model, mtp=False, **kw)
    elif row == "auto":
        s = MTPSession(model, n_draft=4, adaptive=True, **kw)
    else:
        s = MTPSession(model, n_draft=int(row), **kw)
    tps, texts = [], set()
    with s:
        for _ in range(answers):
            g = s.generate(PROMPT, max_tokens=n)
            tps.append(round(g.stats.decode_tps, 2))
            texts.add(g.text)
    later = statistics.median(tps[1:]) if len(tps) > 1 else tps[0]
    return {"row": row + ("" if warmup else " --no-warmup"), "t/s each answer": tps,
            "first / later (median)": round(tps[0] / later, 3), "same text every answer": len(texts) == 1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("-n", "--n-predict", type=int, default=256)
    ap.add_argument("--answers", type=int, default=3)
    ap.add_argument("--rows", default="plain,2,auto", help="plain, a draft length, auto; comma-separated")
    ap.add_argument("--no-warmup-rows", action="store_true", help="each row again with the warm-up at load off")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # one row in this process (the parent's child)
    ap.add_argument("--warmup", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.answers < 1:
        sys.exit("error: --answers must be at least 1")
    if a.row is not None:
        print(json.dumps(one_row(a.model, a.n_gpu_layers, a.n_predict, a.answers, a.row, bool(a.warmup))))
        return
    rows = [r.strip() for r in a.rows.split(",")]
    for row in rows:  # every row checked before the first process starts
        if row not in ("plain", "auto") and not row.isdigit():
            sys.exit(f"error: --rows {row!r}: use plain, auto or a draft length")
    for warmup in ([1, 0] if a.no_warmup_rows else [1]):
        for row in rows:
            p = subprocess.run([sys.executable, "-m", "bench.first_answer", a.model, "-ngl", str(a.n_gpu_layers),
                                "-n", str(a.n_predict), "--answers", str(a.answers), "--row", row,
                                "--warmup", str(warmup)], capture_output=True, text=True, timeout=900)
            line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            print(line if p.returncode == 0 and line.startswith("{")
                  else f"{row}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:] }", flush=True)


if __name__ == "__main__":
    main()
