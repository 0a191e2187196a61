"""Where a step's GPU time goes and where the GPU waits, kernel by kernel, on a real timeline: one answer of a session
loaded as `gguf-mtp run` loads it (warm-up included, then a first answer), traced with PyTorch's profiler, whose
CUPTI tracing records every kernel and copy the process launches, llama.cpp's included, with its real start and end
(Nsight Compute, bench/gpu_kernels.py, runs kernels one at a time and cannot show the GPU's idle time).

Each GPU event is attributed to the runtime call that launched it (``llama_decode``, a sampler read, a slot copy)
through a profiler range around that call, then summarised per kind of call: how many, GPU time (its kernels'
durations, overlaps counted once), span on the GPU, host time of the call; the kernel families of each; and the
GPU's idle time by what ran before and what came after (``verify -> draft``: the GPU waited between the verify's
last kernel and the draft's first, for the host to read, commit and launch).

    python3 -m bench.gpu_timeline MODEL.gguf [-k 2] [-n 64] [-ngl 99] [--mtp SIDECAR] [--trace out.json.gz]
    python3 -m bench.gpu_timeline --parse out.json.gz -k 2      # the report of a saved trace
    ... --sequence 'decode[mtp] n=3'    # also one such call's GPU events in order, with their launch grids,
                                         # and the CUDA calls its host made

Needs PyTorch with CUDA (the GPU machine's python3 has it). ``GGUF_MTP_*`` switches apply as in ``run``. With a CUDA
build, load the system libstdc++ first (``LD_PRELOAD=$(ldconfig -p | grep -m1 'libstdc++.so.6 ' | sed 's/.*=> //')``,
as ``bench/gpu.sh timeline`` does): otherwise torch's libraries, loaded after llama.cpp's, abort the process
(``free(): invalid pointer``). On Hopper ggml-cuda launches kernels before their predecessor ends (programmatic
dependent launch), so the kernel families count each kernel's own time, after the one before it ended.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import os
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy and torch)

# isort: split
from bench import runtime_calls
from bench.common import exit_after
from bench.gpu_kernels import family
from bench.oneshot import PROMPT

#: the trace categories of GPU work (kineto's names)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
#: an idle gap shorter than this (us) is a kernel boundary inside a graph, not a wait
GAP_US = 1.0


class Call:
    """One annotated runtime call (host start and duration in us) and the GPU events it launched, each as
    (start us, end us, kernel name). A plain class: tests/test_bench_imports.py runs this module without a
    ``sys.modules`` entry, where a dataclass cannot be made."""

    __slots__ = ("dur", "gpu", "grids", "host", "label", "ts")

    def __init__(self, label: str, ts: float, dur: float) -> None:
        self.label, self.ts, self.dur = label, ts, dur
        self.gpu: list[tuple[float, float, str]] = []
        #: each GPU event's launch grid, as ``gpu`` orders them ("" for a copy): a mat-vec's grid counts its rows
        self.grids: list[str] = []
        #: the CUDA runtime and driver calls the host made inside this call (start us, end us, name), launching work
        #: or not (a stream synchronisation, a graph launch): where the call's host time goes before the GPU starts
        self.host: list[tuple[float, float, str]] = []


def calls_from_trace(events: Iterable[dict[str, Any]]) -> tuple[list[Call], list[tuple[float, float, str]]]:
    """The annotated calls with their GPU events, and the GPU events no annotated call launched (each as
    (start us, end us, name))."""
    ranges: dict[tuple[Any, Any], list[Call]] = defaultdict(list)
    launches: list[dict[str, Any]] = []
    gpu: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat == "user_annotation":
            ranges[(e.get("pid"), e.get("tid"))].append(Call(e["name"], float(e["ts"]), float(e.get("dur", 0))))
        elif cat in ("cuda_runtime", "cuda_driver"):
            launches.append(e)
        elif cat in GPU_CATS:
            corr = (e.get("args") or {}).get("correlation")
            gpu[int(corr) if corr is not None else -1].append(e)
    starts: dict[tuple[Any, Any], list[float]] = {}
    for key, rs in ranges.items():
        rs.sort(key=lambda c: c.ts)
        starts[key] = [c.ts for c in rs]
    every = sorted((c for rs in ranges.values() for c in rs), key=lambda c: c.ts)  # where thread ids do not match
    every_starts = [c.ts for c in every]
    stray: list[tuple[float, float, str]] = [_span(g) for g in gpu.pop(-1, [])]
    for e in launches:
        corr = (e.get("args") or {}).get("correlation")
        kernels = gpu.pop(int(corr), []) if corr is not None else []
        key = (e.get("pid"), e.get("tid"))
        owner = (_enclosing(ranges[key], starts[key], float(e["ts"])) if key in ranges
                 else _enclosing(every, every_starts, float(e["ts"])))
        if owner is not None:
            owner.host.append(_span(e))
        if not kernels:
            continue
        spans = [_span(g) for g in kernels]
        if owner is None:
            stray.extend(spans)
        else:
            owner.gpu.extend(spans)
            owner.grids.extend(_grid(g) for g in kernels)
    for rest in gpu.values():
        stray.extend(_span(g) for g in rest)
    return every, stray


def _span(e: dict[str, Any]) -> tuple[float, float, str]:
    ts = float(e["ts"])
    return ts, ts + float(e.get("dur", 0)), _gpu_name(e)


def _grid(e: dict[str, Any]) -> str:
    """A kernel's launch grid as ``x,y,z`` (kineto's ``args.grid``), or "" where the event has none."""
    g = (e.get("args") or {}).get("grid")
    return ",".join(str(int(v)) for v in g) if isinstance(g, list) else ""


def _gpu_name(e: dict[str, Any]) -> str:
    """A GPU event's name; a copy's with its memory kinds and size (``Memcpy DtoH [Device -> Pinned] 16384 B``), in
    brackets, as a kernel family ends at the first parenthesis: which copies a decode makes, and to what memory."""
    name = str(e.get("name", "?"))
    if e.get("cat") != "gpu_memcpy":
        return name
    n = (e.get("args") or {}).get("bytes")
    return name.replace("(", "[").replace(")", "]").strip() + (f" {int(n)} B" if n is not None else "")


def _enclosing(calls: list[Call], starts: list[float], t: float) -> Call | None:
    """The innermost call whose range holds host time ``t`` (the latest-starting one that has not ended)."""
    i = bisect.bisect_right(starts, t) - 1
    while i >= 0:
        c = calls[i]
        if c.ts + c.dur >= t:
            return c
        i -= 1
    return None


def _union(spans: list[tuple[float, float, str]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e, _ in sorted(spans):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _exclusive(spans: list[tuple[float, float, str, str]]) -> list[float]:
    """Each span's own time, the spans sorted by start: the part after every span that started before it has ended.
    ggml-cuda launches kernels early on Hopper (programmatic dependent launch): a kernel's recorded start can come
    before its predecessor's end, and that wait is not its work."""
    out, end = [], float("-inf")
    for s, e, _, _ in spans:
        out.append(max(0.0, e - max(s, end)))
        end = max(end, e)
    return out


def _kind(label: str) -> str:
    """A decode's kind for the idle table: the verify (target, several rows), a plain target decode, a head's."""
    if label.startswith("decode[tgt]"):
        return "verify" if not label.endswith(" n=1") else "target n=1"
    if label.startswith("decode[mtp]"):
        return "draft"
    return label.split("[")[0]


def report(calls: list[Call], stray: list[tuple[float, float, str]], steps: int, top: int = 6) -> str:
    """The per-call table, each decode kind's kernel families, and the GPU's idle time by transition."""
    steps = max(1, steps)
    timed = [(s, e, n, c.label) for c in calls for s, e, n in c.gpu] + [(s, e, n, "(other)") for s, e, n in stray]
    if not timed:
        return "no GPU events in the trace (a CPU-only run, or the profiler saw no CUDA activity)"
    timed.sort()
    t0, t1 = timed[0][0], max(e for _, e, _, _ in timed)
    busy = _union([(s, e, n) for s, e, n, _ in timed])
    lines = [f"window {(t1 - t0) / 1e3:.3f} ms over {steps} steps: GPU busy {busy / 1e3:.3f} ms "
             f"({busy / (t1 - t0):.1%}), idle {(t1 - t0 - busy) / steps / 1e3:.3f} ms a step"]
    by: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        by[c.label].append(c)
    lines.append(f"{'call':28s} {'calls/step':>10s} {'host us':>8s} {'GPU us':>8s} {'span us':>8s} {'kernels':>8s}")
    for label, cs in sorted(by.items(), key=lambda kv: -sum(_union(c.gpu) for c in kv[1])):
        gpu_us = sum(_union(c.gpu) for c in cs) / len(cs)
        span = [max(e for _, e, _ in c.gpu) - min(s for s, _, _ in c.gpu) for c in cs if c.gpu]
        lines.append(f"{label:28s} {len(cs) / steps:10.2f} {sum(c.dur for c in cs) / len(cs):8.1f} {gpu_us:8.1f} "
                     f"{(sum(span) / len(span) if span else 0):8.1f} {sum(len(c.gpu) for c in cs) / len(cs):8.1f}")
    if stray:
        lines.append(f"{'(launched outside a range)':28s} {len(stray) / steps:10.2f} {'':8s} "
                     f"{_union(stray) / steps:8.1f} (per step)")
    own: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    count: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (_, _, n, label), us in zip(timed, _exclusive(timed)):
        own[label][family(n)] += us
        count[label][family(n)] += 1
    for label, cs in sorted(by.items()):
        if not label.startswith("decode") or not any(c.gpu for c in cs):
            continue
        fam = own[label]
        lines.append(f"{label}: kernel families, own us a call (a kernel's wait for the one before it left out)")
        for f, us in sorted(fam.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"    {us / len(cs):8.1f}  x{count[label][f] / len(cs):<6.1f} {f}")
        gaps = _inner_gaps(cs)
        if gaps:
            lines.append(f"{label}: idle inside the span, us a call, by the GPU event after the gap")
            for name, (us, n_gaps) in sorted(gaps.items(), key=lambda kv: -kv[1][0])[:top]:
                lines.append(f"    {us / len(cs):8.1f}  x{n_gaps / len(cs):<6.1f} {name}")
    idle: dict[str, float] = defaultdict(float)
    end, before = timed[0][1], _kind(timed[0][3])
    for s, e, _, label in timed[1:]:
        if s - end > GAP_US:
            idle[f"{before} -> {_kind(label)}"] += s - end
        if e > end:
            end, before = e, _kind(label)
    lines.append("GPU idle by transition (what ran last -> what ran next), us a step")
    for k, us in sorted(idle.items(), key=lambda kv: -kv[1]):
        lines.append(f"    {us / steps:8.1f}  {k}")
    return "\n".join(lines)


def sequence(calls: list[Call], label: str) -> str:
    """Every GPU event of one call labelled ``label``, in the order it ran: its start after the call's first event,
    its own time, its launch grid (which tells apart the mat-vecs of one family: a grid's blocks count the rows of the
    weight it reads) and its name; then the CUDA API calls the host made inside it, from the call's start (what the
    host did before the GPU began: copies, a synchronisation, the graph's launch). The call shown is the one of median
    GPU time among those with GPU events."""
    cs = sorted((c for c in calls if c.label == label and c.gpu), key=lambda c: _union(c.gpu))
    if not cs:
        return f"{label}: no such call with GPU events"
    c = cs[len(cs) // 2]
    order = sorted(range(len(c.gpu)), key=lambda i: c.gpu[i][0])
    timed = [(*c.gpu[i], c.grids[i]) for i in order]
    own = _exclusive(timed)
    t0 = timed[0][0]
    lines = [f"{label}: one call's GPU events in order (of {len(cs)}; median GPU time {_union(c.gpu):.1f} us)",
             f"    {'at us':>8s} {'own us':>7s} {'grid':>14s}  name"]
    for (s, _, n, grid), us in zip(timed, own):
        lines.append(f"    {s - t0:8.1f} {us:7.1f} {grid:>14s}  {family(n)}")
    if c.host:
        lines += [f"{label}: the same call's CUDA API calls on the host, us after the call began (host time "
                  f"{c.dur:.1f} us; its first GPU event began at {t0 - c.ts:.1f} us)",
                  f"    {'at us':>8s} {'own us':>7s}  name"]
        lines += [f"    {s - c.ts:8.1f} {e - s:7.1f}  {n}" for s, e, n in sorted(c.host)]
    return "\n".join(lines)


def _inner_gaps(calls: list[Call]) -> dict[str, tuple[float, int]]:
    """The GPU's idle time inside each call's span (from its first event's start to its last one's end), summed over
    ``calls`` per family of the event that ended each gap (us, gaps): a decode whose span is longer than its GPU time
    waited there for the host (a split's inputs, a read-back it queued late) or for another stream."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for c in calls:
        spans = sorted(c.gpu)
        if not spans:
            continue
        end = spans[0][1]
        for s, e, n in spans[1:]:
            if s - end > GAP_US:
                acc = out[family(n)]
                acc[0] += s - end
                acc[1] += 1
            end = max(end, e)
    return {f: (us, int(n)) for f, (us, n) in out.items()}


def load_trace(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise SystemExit(f"error: {path} has no trace events (a chrome trace from torch.profiler, please)")
    return events


def profile_answer(model: str, k: int, n: int, ngl: int, trace_out: Path | None,
                   mtp: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """One answer of ``n`` tokens at draft length ``k`` (0: plain decoding), traced after a warm answer; the trace's
    events and the answer's steps. ``mtp``: a sidecar in place of the model's own head (``run --mtp``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from gguf_mtp.runtime.session import MTPSession

    if not torch.cuda.is_available():
        raise SystemExit("error: torch sees no CUDA device: run this on the GPU machine")
    runtime_calls.wrap_runtime_calls(record_function)
    with MTPSession(model, mtp=(mtp or True) if k > 0 else False, n_draft=max(k, 1), n_gpu_layers=ngl, n_ctx=4096) as s:
        s.generate(PROMPT, max_tokens=32)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            st = s.generate(PROMPT, max_tokens=n).stats
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "trace.json"
        prof.export_chrome_trace(str(raw))
        if trace_out is not None:
            tmp = trace_out.with_name(trace_out.name + ".part")
            with open(raw, "rb") as src, gzip.open(tmp, "wb") as dst:
                dst.write(src.read())
            os.replace(tmp, trace_out)
        events = load_trace(raw)
    print(f"k={k}: {st.emitted} tokens in {st.steps} steps, {st.decode_tps:.2f} t/s (traced: slower than untraced)")
    return events, st.steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("-k", type=int, default=2, help="draft length; 0: plain decoding")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-ngl", type=int, default=99)
    ap.add_argument("--mtp", help="a sidecar in place of the model's own head, as in `gguf-mtp run --mtp`")
    ap.add_argument("--trace", type=Path, help="also write the trace here (gzip, chrome trace format)")
    ap.add_argument("--parse", type=Path, help="report on a saved trace instead of running")
    ap.add_argument("--steps", type=int, help="with --parse: the answer's steps (default: the verifies counted)")
    ap.add_argument("--top", type=int, default=6, help="kernel families (and gaps) shown a decode kind")
    ap.add_argument("--sequence", metavar="LABEL", action="append", default=[],
                    help="also list every GPU event of one call so labelled, in order, with launch grids, and "
                         "the CUDA calls its host made (as 'decode[mtp] n=3'; repeatable)")
    a = ap.parse_args()
    if a.parse:
        events, steps = load_trace(a.parse), a.steps or 0
    elif a.model:
        events, steps = profile_answer(a.model, a.k, a.n, a.ngl, a.trace, a.mtp)
    else:
        sys.exit("error: give a MODEL.gguf (or --parse TRACE)")
    calls, stray = calls_from_trace(events)
    if not steps:
        steps = sum(1 for c in calls if c.label.startswith("decode[tgt]"))
    print(report(calls, stray, steps, top=a.top))
    for label in a.sequence:
        print(sequence(calls, label))


if __name__ == "__main__":
    exit_after(main)
