"""Benchmark extract / strip / graft on generated Qwen3.5-shaped GGUF models of two trunk sizes, against `cp`
of the same output in the same run. Prints a table, writes bench/results/surgery.json.

    python -m bench.surgery [--sizes 2.1 4.2] [--workdir /tmp/gguf-mtp-bench]

Targets (issue 3): strip and graft within 1.2x of cp; extract time flat as the trunk grows; peak RSS < 200 MB.
Each job runs 3 times (outputs removed and `sync` before each); the best time counts, "to disk" adds the
`sync` after it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import best_of, machine, run_measured, save, table


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "gguf_mtp_cli.main", *args]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[2.1, 4.2], help="checkpoint sizes in GB")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/gguf-mtp-bench"))
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "surgery.json")
    a = ap.parse_args()
    rows = []
    for size in a.sizes:
        ck = a.workdir / f"ckpt-{size}"
        if not (ck / "config.json").exists():
            gen = (f"from bench import convert as b; "
                   f"from pathlib import Path; b.write_checkpoint(Path({str(ck)!r}), b.spec_for({size}))")
            run_measured([sys.executable, "-c", gen])
        model = a.workdir / f"model-{size}.gguf"
        if not model.exists():
            run_measured(cli("convert", str(ck), "--outtype", "bf16", "-o", str(model), "--quiet"))
        side, trunk, grafted = (a.workdir / f"{n}-{size}.gguf" for n in ("side", "trunk", "grafted"))
        jobs = [
            ("extract (self-contained)", cli("extract", str(model), "-o", str(side), "-q", "-f"), side),
            ("extract --head-only", cli("extract", str(model), "--head-only", "-o", str(side), "-q", "-f"), side),
            ("strip", cli("extract", str(model), "--strip", "-o", str(trunk), "-q", "-f"), trunk),
        ]
        for name, cmd, out in jobs:
            t, d, rss = best_of(cmd, [out])
            rows.append(_row(name, size, model, out, t, d, rss, a.workdir))
        # graft needs the head-only sidecar and the trunk
        run_measured(cli("extract", str(model), "--head-only", "-o", str(side), "-q", "-f"))
        run_measured(cli("extract", str(model), "--strip", "-o", str(trunk), "-q", "-f"))
        t, d, rss = best_of(cli("extract", str(side), "--onto", str(trunk), "-o", str(grafted), "-q"), [grafted])
        rows.append(_row("graft (head-only onto trunk)", size, model, grafted, t, d, rss, a.workdir))
        for p in (side, trunk, grafted):
            p.unlink(missing_ok=True)
    cols = ["job", "model GB", "out MB", "seconds", "cp s", "x cp", "s to disk", "cp to disk", "x cp to disk",
            "peak RSS MB"]
    print(table(rows, cols))
    save(a.out, {"machine": machine(), "rows": rows})


def _row(name: str, size: float, model: Path, out: Path, t: float, d: float, rss: int, wd: Path) -> dict:
    dst = wd / "cp-of-output.bin"
    cp_t, cp_d, _ = best_of(["cp", str(out), str(dst)], [dst])
    dst.unlink(missing_ok=True)
    return {"job": name, "model GB": round(model.stat().st_size / 1e9, 2), "out MB": round(out.stat().st_size / 1e6, 1),
            "seconds": round(t, 3), "cp s": round(cp_t, 3), "x cp": round(t / cp_t, 2), "s to disk": round(d, 3),
            "cp to disk": round(cp_d, 3), "x cp to disk": round(d / cp_d, 2), "peak RSS MB": round(rss / 1e6)}


if __name__ == "__main__":
    main()
