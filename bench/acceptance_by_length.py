"""How well acceptance measured at one draft length predicts the tokens a step emits at another: what ``auto``
(gguf_mtp/runtime/adaptive.py) assumes when it reads E(k') = 1 + a_0 + ... + a_(k'-1) off the prefix shares a_i it
counted while drafting k. Every fixed length runs the same prompts (greedy), each step's outcome is kept, and the
tokens a step emitted at each length k' are set against the prediction from each longer length's shares.

Where the head's misses cluster, a step that starts where the last one was rejected starts at a harder place, and
a longer length ends fewer steps with every draft accepted: more of its steps start at hard places than k''s
would, so its shares predict k' too low, and ``auto`` holding the longer length sees no reason to leave it.

    python -m bench.acceptance_by_length                        # the shipped tiny model, its 16 prompts
    python -m bench.acceptance_by_length --model M.gguf --prompts prompts.json -n 256 -ngl 99
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp's libraries before numpy)

# isort: split
from bench.common import ROOT, exit_after, machine, prompts_from, save, table, tiny_gguf, tiny_reference


def shares(answers: Sequence[Sequence[int]], k: int) -> list[float]:
    """Prefix shares by position of steps that drafted ``k`` (each answer a list of accepted counts): the share of
    steps whose first i+1 drafts were all accepted."""
    steps = [j for s in answers for j in s]
    return [sum(1 for j in steps if j > i) / len(steps) if steps else 0.0 for i in range(k)]


def predict(answers: Sequence[Sequence[int]], k: int, k_to: int) -> float:
    """Tokens a step would emit at ``k_to`` <= ``k``, read off steps that drafted ``k`` as ``auto`` reads them."""
    if not 0 <= k_to <= k:
        raise ValueError(f"a prediction for k={k_to} needs steps of at least that length (have {k})")
    return 1.0 + sum(shares(answers, k)[:k_to])


def measured(answers: Sequence[Sequence[int]]) -> float:
    """Tokens a step emitted: one plus its accepted drafts, over every step."""
    n = sum(len(s) for s in answers)
    return (sum(sum(s) for s in answers) + n) / n if n else 0.0


def outcomes(model: Path, prompts: Sequence[str], n: int, k: int, ngl: int, threads: int | None) -> list[list[int]]:
    """Each prompt's steps at fixed length ``k`` (greedy): the drafts each accepted."""
    from gguf_mtp.runtime import MTPSession

    out: list[list[int]] = []
    with MTPSession(model, mtp="auto", n_draft=k, n_ctx=max(1024, 4 * n), n_gpu_layers=ngl, n_threads=threads) as s:
        e = s.engine
        step = e.step
        steps: list[int] = []

        def counted(*a: object) -> list[int]:  # the engine's own step, its accepted drafts kept
            emitted = step(*a)  # type: ignore[arg-type]
            steps.append(len(emitted) - 1)
            return emitted

        e.step = counted  # type: ignore[method-assign,assignment]
        for p in prompts:
            steps = []
            s.generate(p, max_tokens=n)
            out.append(steps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="GGUF with an MTP head (default: the shipped tiny model, converted)")
    ap.add_argument("--prompts", type=Path, help="JSON list of prompts (default: the tiny model's 16)")
    ap.add_argument("-n", type=int, default=0, help="tokens per answer (default: the tiny model's reference count)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("-ngl", "--ngl", type=int, default=0)
    ap.add_argument("-t", "--threads", type=int)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "acceptance_by_length.json")
    a = ap.parse_args()
    if not a.lengths or min(a.lengths) < 1:
        raise SystemExit("error: --lengths: give draft lengths of 1 or more")
    prompts = prompts_from(a.prompts)
    n = a.n or int(tiny_reference()["new_tokens"])
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model or tiny_gguf(Path(tmp))
        runs = {k: outcomes(model, prompts, n, k, a.ngl, a.threads) for k in sorted(set(a.lengths))}
    rows: list[dict[str, object]] = []
    for k_to in sorted(runs):
        row: dict[str, object] = {"k": k_to, "measured": round(measured(runs[k_to]), 4)}
        for k in sorted(runs):
            if k > k_to:
                row[f"from k={k}"] = round(predict(runs[k], k, k_to), 4)
        rows.append(row)
    cols = ["k", "measured", *[f"from k={k}" for k in sorted(runs)]]
    print(f"tokens a step emits, measured at each length and predicted from each longer one's shares; "
          f"{len(prompts)} prompts x {n} tokens, greedy")
    print(table(rows, cols))
    save(a.out, {"machine": machine(), "model": str(a.model or "tiny"), "n": n, "rows": rows,
                 "shares": {k: shares(v, k) for k, v in runs.items()}})


if __name__ == "__main__":
    exit_after(main)
