"""What a same-call run measured: rows of one-process answers, alternating in rounds, each round with a baseline
process (llama-completion); the JSON lines the same-call scripts write (``{"row": LABEL, "tps": T/S, ...}`` a
process, in the order they ran: ``bench/reference/same-call-h200-*/ab-callN.jsonl``).

    python -m bench.same_call bench/reference/same-call-h200-9b-s32/ab-call2.jsonl
    python -m bench.same_call ab-call2.jsonl --versus k2-mmvq k2-concat

A round starts at each process of the round's first row (the first label that recurs); rows run once before it
(llama.cpp's MTP at a few k, say) join the first round. A row's ratio is compared per round with the baseline
process of its round (the drift of a machine between rounds falls on both), and the median of those ratios is given
with a bootstrap 95% interval (4000 resamples, seeded: the same file always gives the same interval), as the
README's same-call tables state it. Where the rows recorded their answers' token hashes (``"sha"``, from session 37
on), a last line says whether every such process printed the same tokens.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

RESAMPLES = 4000
SEED = 0


@dataclass(frozen=True)
class Paired:
    """Per-round ratios of one row to another: their median, its bootstrap 95% interval, and how many exceed 1."""

    n: int
    median: float
    low: float
    high: float
    above_one: int


def read_processes(path: Path) -> list[tuple[str, float]]:
    """(row label, t/s) of every process in ``path``, in order; a process that printed no speed is left out."""
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            label, tps = str(row["row"]), row["tps"]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{i}: not a same-call JSON line ({e})") from None
        if tps is not None:
            out.append((label, float(tps)))
    return out


def token_hashes(paths: Sequence[Path]) -> dict[str, set[str]]:
    """The answers' token hashes (``"sha"``: the start of ``run --stats-json``'s ``tokens_sha256``, which the
    same-call scripts record from session 37 on) in all ``paths``, by hash, each with the rows that printed it; rows
    without one (the llama.cpp tools') are left out."""
    out: dict[str, set[str]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                if isinstance(row, dict) and row.get("sha"):
                    out.setdefault(str(row["sha"]), set()).add(str(row["row"]))
    return out


def tokens_line(hashes: dict[str, set[str]]) -> str | None:
    """One line on whether every gguf-mtp process printed the same tokens (None: no row recorded a hash)."""
    if not hashes:
        return None
    if len(hashes) == 1:
        return f"tokens: the same in every row that recorded them ({', '.join(sorted(next(iter(hashes.values()))))})"
    parts = "; ".join(f"{sha}: {', '.join(sorted(rows))}" for sha, rows in sorted(hashes.items()))
    return f"tokens: {len(hashes)} different answers ({parts})"


def rounds(processes: Sequence[tuple[str, float]]) -> list[dict[str, float]]:
    """The processes grouped into rounds, each starting at the first label that recurs (a label twice in one
    round keeps its first process)."""
    labels = [label for label, _ in processes]
    start = next((lb for lb in labels if labels.count(lb) > 1), None)
    out: list[dict[str, float]] = [{}]
    for label, tps in processes:
        if label == start and start in out[-1]:
            out.append({})
        out[-1].setdefault(label, tps)
    return [r for r in out if r]


def bootstrap_median(values: Sequence[float]) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the median over ``RESAMPLES`` resamples (seeded)."""
    rng = random.Random(SEED)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(RESAMPLES))
    return meds[int(0.025 * RESAMPLES)], meds[int(0.975 * RESAMPLES) - 1]


def paired(rs: Sequence[dict[str, float]], a: str, b: str) -> Paired | None:
    """``a`` over ``b`` in every round that has both; None where none does."""
    ratios = [r[a] / r[b] for r in rs if a in r and b in r]
    if not ratios:
        return None
    low, high = bootstrap_median(ratios)
    return Paired(len(ratios), statistics.median(ratios), low, high, sum(x > 1 for x in ratios))


def summary(files: Sequence[Sequence[tuple[str, float]]], baseline: str = "lc") -> list[dict[str, object]]:
    """One entry a row over ``files`` (each file's processes, in order; rounds never span two), in order of first
    appearance: processes, median t/s, ratio of its median to the baseline's, and the per-round ratio to the
    baseline (``Paired``; None for the baseline, or a row never in a round with it)."""
    by: dict[str, list[float]] = {}
    for label, tps in (p for ps in files for p in ps):
        by.setdefault(label, []).append(tps)
    if baseline not in by:
        raise ValueError(f"no {baseline!r} process: give the baseline row with --baseline")
    base = statistics.median(by[baseline])
    rs = [r for ps in files for r in rounds(ps)]
    return [{"row": label, "processes": len(v), "median": statistics.median(v),
             "ratio": statistics.median(v) / base,
             "paired": None if label == baseline else paired(rs, label, baseline)} for label, v in by.items()]


def _fmt(p: Paired | None) -> str:
    if p is None:
        return ""
    return f"{p.median:.3f}x ({p.low:.3f}-{p.high:.3f}, {p.above_one}/{p.n} above 1)"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="ab-callN.jsonl files; rounds never span two files")
    ap.add_argument("--baseline", default="lc", help="the row every ratio is to (default lc: llama-completion)")
    ap.add_argument("--versus", nargs=2, metavar=("A", "B"), action="append", default=[],
                    help="also A over B per round (repeatable)")
    args = ap.parse_args(argv)
    try:
        files = [read_processes(f) for f in args.files]
        rows = summary(files, args.baseline)
        hashes = token_hashes(args.files)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{'row':<24} {'processes':>9} {'median t/s':>11} {'x ' + args.baseline:>9}  per round")
    for row in rows:
        p = row["paired"]
        print(f"{row['row']:<24} {row['processes']:>9} {row['median']:>11.2f} {row['ratio']:>8.3f}x  "
              f"{_fmt(p if isinstance(p, Paired) else None)}")
    rs = [r for ps in files for r in rounds(ps)]
    for a, b in args.versus:
        print(f"{a} over {b}: {_fmt(paired(rs, a, b)) or 'never in one round'}")
    line = tokens_line(hashes)
    if line:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
