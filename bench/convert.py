"""Benchmark `gguf-mtp convert` on a generated Qwen3.5-shaped checkpoint against `cp` of the same input bytes.

Prints a table and writes bench/results/convert.json. Usage:
    python -m bench.convert [--size-gb 2.1] [--workdir /tmp/gguf-mtp-bench] [--keep]
Each contender runs 3 times (outputs removed and `sync` before each); the best time counts. Targets (issue 2):
bf16 within 1.5x of cp; q8_0 >= 0.5 GB/s of input; peak RSS < 1 GB.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bench.common import best_of, machine, run_measured, save, table
from tests.synthetic import SyntheticSpec


def spec_for(size_gb: float) -> SyntheticSpec:
    # ~66 M params (133 MB bf16) per layer at these widths, plus embeddings and LM head
    layers = max(4, round((size_gb * 1e9 / 2 - 2 * 32768 * 2048) / 66e6 / 4) * 4)
    return SyntheticSpec("qwen35", layers=layers, hidden=2048, heads=16, kv_heads=4, head_dim=128,
                         intermediate=8192, lin_k_heads=8, lin_v_heads=16, lin_head_dim=128,
                         vocab_size=32768, n_shards=max(1, round(size_gb / 1.0)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=2.1)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/gguf-mtp-bench"))
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "convert.json")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    ck = a.workdir / f"ckpt-{a.size_gb}"
    if not (ck / "config.json").exists():
        print(f"generating a {a.size_gb} GB checkpoint in {ck} ...", file=sys.stderr)
        # in a child process: peak RSS is inherited across fork/exec, so the parent must stay small
        gen = (f"from bench import convert as b; "
               f"from pathlib import Path; b.write_checkpoint(Path({str(ck)!r}), b.spec_for({a.size_gb}))")
        run_measured([sys.executable, "-c", gen])
    shards = sorted(ck.glob("*.safetensors"))
    in_bytes = sum(p.stat().st_size for p in shards)
    for p in shards:  # warm the page cache so every contender reads from memory
        with open(p, "rb") as fh:
            while fh.read(64 << 20):
                pass
    py = sys.executable
    rows = []
    cp_dst = a.workdir / "cp-dst"
    cp_dst.mkdir(exist_ok=True)
    cp_t, cp_d, cp_rss = best_of(["cp", *map(str, shards), str(cp_dst)], [cp_dst])
    rows.append({"job": "cp (the input shards)", "seconds": round(cp_t, 2), "x cp": 1.0,
                 "s to disk": round(cp_d, 2), "x cp to disk": 1.0, "GB/s in": round(in_bytes / cp_d / 1e9, 2),
                 "peak RSS MB": round(cp_rss / 1e6)})
    for outtype in ("bf16", "q8_0"):
        out = a.workdir / f"out-{outtype}.gguf"
        t, d, rss = best_of([py, "-m", "gguf_mtp_cli.main", "convert", str(ck), "--outtype", outtype,
                             "-o", str(out), "--quiet"], [out])
        rows.append({"job": f"convert --outtype {outtype}", "seconds": round(t, 2), "x cp": round(t / cp_t, 2),
                     "s to disk": round(d, 2), "x cp to disk": round(d / cp_d, 2),
                     "GB/s in": round(in_bytes / d / 1e9, 2),
                     "peak RSS MB": round(rss / 1e6), "out GB": round(out.stat().st_size / 1e9, 2)})
        out.unlink()
    shutil.rmtree(cp_dst)
    print(f"input: {in_bytes / 1e9:.2f} GB in {len(shards)} shards ({ck})")
    print(table(rows, ["job", "seconds", "x cp", "s to disk", "x cp to disk", "GB/s in", "peak RSS MB", "out GB"]))
    print("seconds: the process alone (output may still sit in the page cache); s to disk: until `sync` returns")
    save(a.out, {"input_bytes": in_bytes, "machine": machine(), "rows": rows})
    if not a.keep:
        shutil.rmtree(ck)


if __name__ == "__main__":
    main()
