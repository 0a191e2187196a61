"""Where a decode's GPU time goes, kernel by kernel (issue 24, item 6): a plain decode (1 row), a verify of k + 1
rows and the MTP head's draft decode, each profiled alone under Nsight Compute, next to its wall time.

Each phase runs twice, each time in its own process (bench/gpu.sh kernels does this): the model loads and the phase's
decode runs a few times so every graph is built and captured; then, on its own, it is timed (median of 30 walls),
and under ``ncu`` it runs once between cuProfilerStart and cuProfilerStop. ncu times kernels one at a time
(``gpu__time_duration``, clocks and caches left as they run), so their sum exceeds a real decode's wall: read the
families as shares of the GPU's work, and wall minus busy as a lower bound only where busy is below wall.

  python3 -m bench.gpu_kernels MODEL --phase PHASE --out DIR        # the wall time
  ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum \\
      --csv --print-units base --log-file DIR/PHASE.csv python3 -m bench.gpu_kernels MODEL --phase PHASE --profile
  python3 -m bench.gpu_kernels --summarize DIR        # the table, per phase and kernel family

Phases: ``plain`` (the target, 1 row, no hidden rows: ``run --no-mtp``), ``verify-N`` (the target, N rows, hidden
rows out, kept for a rollback of N - 1: a step of ``run`` at k = N - 1; ``verify-N:R`` keeps R, as auto keeps its
bound's), ``draft`` (the MTP head, 1 row) and
``draft-N`` (the head's decode padded to N rows, as the runtime runs an offloaded head)."""

from __future__ import annotations

import argparse
import csv
import ctypes
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy: tests/test_bench_imports.py)

# isort: split
from bench.common import exit_after

WARM_TEXT = ("The history of the printing press begins in the fifteenth century, when movable type made books "
             "cheaper. def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip()\n")


def _profiler() -> tuple[Callable[[], object], Callable[[], object]]:
    """cuProfilerStart/Stop of the driver API (present wherever a CUDA build runs); no-ops elsewhere."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return (lambda: 0), (lambda: 0)
    return cuda.cuProfilerStart, cuda.cuProfilerStop


def run_phase(model_path: str, phase: str, ngl: int, out: Path, reps: int = 30, profile: bool = False) -> None:
    """The phase's decode, warm: ``profile`` once between cuProfilerStart/Stop (under ncu, whose interception
    slows every call, so no wall time), otherwise timed ``reps`` times into OUT/PHASE.json."""
    import numpy as np

    from gguf_mtp.runtime.llama import Batch, Context, Model

    kind, _, n = phase.partition("-")
    n, _, rs = n.partition(":")
    if not (n or "1").isdigit() or not (rs or "0").isdigit():
        sys.exit(f"error: --phase {phase}: use plain, verify-N[:R] or draft[-N]")
    rows = int(n or 1)
    # a run at k = rows - 1 keeps k snapshots (auto keeps its bound's: verify-3:6)
    n_rs_seq = int(rs) if rs else rows - 1
    if kind not in ("plain", "verify", "draft") or rows < 1 or (kind == "plain" and rows != 1) or (
            rs and kind != "verify"):
        sys.exit(f"error: --phase {phase}: use plain, verify-N[:R] or draft[-N]")
    model = Model(model_path, load_mtp=kind != "plain", n_gpu_layers=ngl)
    toks = model.tokenize(WARM_TEXT * 4)[:96]
    n_batch = max(len(toks), 8)
    if kind == "draft":
        ctx = Context(model, n_ctx=512, n_batch=n_batch, mtp=True, n_outputs_max=rows, n_outputs_per_seq=rows)
        embd = np.random.default_rng(0).standard_normal((len(toks), model.n_embd_out)).astype(np.float32) * 0.1
    else:
        ctx = Context(model, n_ctx=512, n_batch=n_batch, n_rs_seq=n_rs_seq if kind == "verify" else 0,
                      embeddings_nextn=kind == "verify", n_outputs_max=rows, n_outputs_per_seq=rows)
        embd = None
    b = Batch(n_batch, model.n_embd_out if embd is not None else 0)
    p0 = len(toks) - rows
    b.fill(toks[:p0], 0, last_logits=True, embd=None if embd is None else embd[:p0])
    ctx.decode_batch(b)

    pos = [p0]

    def once() -> None:
        if kind == "plain":  # a recurrent state cannot step back without snapshots: plain decoding moves on
            b.clear()
            b.add(toks[pos[0] % len(toks)], pos[0], logits=True)
            pos[0] += 1
        else:  # a step that accepted none of its drafts: the previous decode's rows after its first roll back
            p = pos[0]
            ctx.seq_rm(p)
            b.clear()
            for i in range(rows):
                j = (p + i) % len(toks)
                b.add(toks[j], p + i, logits=True, embd=None if embd is None else embd[j])
            pos[0] = p + 1
        ctx.decode_batch(b)
        ctx.synchronize()

    for _ in range(5):
        once()
    if profile:
        start, stop = _profiler()
        start()
        once()
        stop()
    else:
        walls = []
        for _ in range(reps):
            t = time.perf_counter()
            once()
            walls.append(time.perf_counter() - t)
        (out / f"{phase}.json").write_text(json.dumps({"phase": phase, "wall_ms": statistics.median(walls) * 1e3,
                                                       "model": Path(model_path).name,
                                                       "n_rs_seq": ctx.n_rs_seq()}))
    ctx.close()
    model.close()


#: ncu's time units in milliseconds (--print-units base gives nanoseconds; without it ncu picks a unit a row)
MS_PER = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def family(name: str) -> str:
    """A kernel's family: its name with template arguments kept (they carry the type and column count), without
    the parameter list."""
    name = re.sub(r"^void\s+", "", name.strip())
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    return name[:cut][:90]


def read_ncu(path: Path) -> list[tuple[str, float]]:
    """(kernel name, duration in ms) for every profiled kernel of an ncu --csv log."""
    if not path.is_file():
        return []
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    out = []
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        out.append((r["Kernel Name"], v * MS_PER.get(unit, 1e-6)))
    return out


def summarize(folder: Path, top: int = 8) -> str:
    lines = []
    for meta in sorted(folder.glob("*.json"), key=lambda p: (p.stem.split("-")[0], p.stem)):
        info = json.loads(meta.read_text())
        kernels = read_ncu(folder / f"{meta.stem}.csv")
        if not kernels:
            lines.append(f"{meta.stem}: no kernels profiled")
            continue
        busy = sum(d for _, d in kernels)
        fam: dict[str, list[float]] = defaultdict(list)
        for name, d in kernels:
            fam[family(name)].append(d)
        lines.append(f"{meta.stem}: wall {info['wall_ms']:.3f} ms, kernels {len(kernels)}, GPU busy {busy:.3f} ms "
                     f"({busy / info['wall_ms']:.0%} of wall), gaps {info['wall_ms'] - busy:.3f} ms "
                     f"({(info['wall_ms'] - busy) / len(kernels) * 1e3:.1f} us a kernel)")
        for f, ds in sorted(fam.items(), key=lambda kv: -sum(kv[1]))[:top]:
            lines.append(f"    {sum(ds):7.3f} ms {sum(ds) / busy:5.1%}  x{len(ds):<4d} {f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--phase", default="plain")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--profile", action="store_true", help="profile one decode (run under ncu); without it: "
                    "time the decode, no profiling")
    ap.add_argument("--summarize", type=Path, metavar="DIR", help="print the table of a folder of phases")
    a = ap.parse_args()
    if a.summarize:
        print(summarize(a.summarize))
        return
    if not a.model:
        sys.exit("error: give a MODEL.gguf (or --summarize DIR)")
    a.out.mkdir(parents=True, exist_ok=True)
    run_phase(a.model, a.phase, a.n_gpu_layers, a.out, profile=a.profile)


if __name__ == "__main__":
    exit_after(main)
