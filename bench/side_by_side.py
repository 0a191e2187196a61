"""`gguf-mtp run` side by side with llama.cpp's own tools on the same GGUF files, prompt and token count.

Per model: llama-completion (plain), llama-speculative-simple --spec-type draft-mtp at each draft length (llama.cpp's
MTP driver), and gguf-mtp in-process: plain (--no-mtp), each draft length, and --spec-draft-n-max auto (its
first run, which explores, and its best). For gguf-mtp every step is timed by phase (verify, each draft, feed,
host reads, Python; ``Stats.breakdown``) and set against the bytes the step must read from memory (``roofline.py``).
Writes a table, JSON and (with matplotlib) a plot next to the JSON.

    python -m bench.side_by_side --model "perfect=M.gguf" --model "noisy=N.gguf" --bin build/bin --ngl 99 \\
        --out results/side-by-side.json

Greedy, best of --repeats. Tools are found in --bin, $LLAMA_CPP_BIN or PATH; a missing tool is skipped with a
note. For one build serving both, point llama-cpp-python at the tools' libraries (LLAMA_CPP_LIB_PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp's libraries before numpy: see README, CUDA pitfall)

# isort: split

# isort: split
from bench import llamacpp
from bench.common import exit_after, machine, table
from bench.roofline import gpu_name, peak_gbs, roofline, step_bytes

PROMPT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
          "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n") * 4


Run = TypeVar("Run")  # a tool's run or a session's statistics


def _best(runs: list[Run], key: Callable[[Run], float]) -> Run:
    return max(runs, key=key)


def run_tools(model: Path, prompt_file: Path, a: argparse.Namespace, notes: list[str]) -> list[dict]:
    rows: list[dict] = []
    comp = llamacpp.find_tool("llama-completion", a.bin)
    spec = llamacpp.find_tool("llama-speculative-simple", a.bin)
    common = dict(ngl=a.ngl, threads=a.threads, ctx=a.ctx)
    if comp is None:
        notes.append("llama-completion not found: skipped")
    else:
        r = _best([llamacpp.completion(comp, model, prompt_file, a.n_predict, **common) for _ in range(a.tool_repeats)],
                  lambda x: x.tps)
        rows.append({"mode": "llama-completion", "who": "llama.cpp", "k": 0, "t/s": round(r.tps, 1), "tok/step": 1.0,
                     "graphs_reused": r.graphs_reused})
    if spec is None:
        notes.append("llama-speculative-simple not found: skipped")
        return rows
    for k in a.drafts:
        try:
            runs = [llamacpp.speculative(spec, model, prompt_file, a.n_predict, k, **common)
                    for _ in range(a.tool_repeats)]
        except RuntimeError as e:
            notes.append(f"llama-speculative-simple k={k}: {e}".splitlines()[0])
            continue
        r = _best(runs, lambda x: x.tps)
        rows.append({"mode": f"llama.cpp MTP k={k}", "who": "llama.cpp", "k": k, "t/s": round(r.tps, 1),
                     "tok/step": round(r.mean_len, 2) if r.mean_len else None,
                     "acceptance": round(r.acceptance, 4), "acceptance_at": [round(x, 4) for x in r.acceptance_at]})
    return rows


def _row(mode: str, k: object, st, sb, gbs: float | None) -> dict:  # type: ignore[no-untyped-def]
    bd = st.to_dict()["breakdown"] or {}
    if not bd.get("decodes"):  # timer off: a step is one verify and k MTP decodes (the feed rides with the first)
        bd = {}
    n_mtp = (bd["decodes"] - 1.0 if bd else float(k if isinstance(k, int) else 0)) if k else 0.0  # per step
    per_step = st.decode_seconds / max(1, st.steps)
    row = {"mode": mode, "who": "gguf-mtp", "k": k, "t/s": round(st.decode_tps, 1),
           "tok/step": round(st.mean_accepted_length, 2), "acceptance": round(st.acceptance, 4),
           "acceptance_at": [round(x, 4) for x in st.acceptance_at], "breakdown": bd,
           "mtp_decodes_per_step": round(n_mtp, 2), "python_overhead": round(st.python_overhead, 4),
           "chosen_k": dict(sorted(st.draft_lengths.items())) if k == "auto" else None}
    if sb is not None:
        row.update(roofline(sb.step(n_mtp) if k else sb.plain, per_step, gbs))
    return row


def run_ours(model: Path, a: argparse.Namespace, sb, gbs: float | None) -> tuple[list[dict], dict]:  # type: ignore[no-untyped-def]
    from gguf_mtp.runtime import MTPSession, draft_profile

    rows: list[dict] = []
    kmax = max(a.drafts)
    kw = dict(n_ctx=a.ctx, n_gpu_layers=a.ngl, n_threads=a.threads, timings=True)
    with MTPSession(model, mtp=False, **kw) as plain:
        plain.generate(PROMPT, max_tokens=8)  # warm-up
        gens = [plain.generate(PROMPT, max_tokens=a.n_predict) for _ in range(a.repeats)]
        ref = gens[0].tokens
        rows.append(_row("run --no-mtp", 0, _best([g.stats for g in gens], lambda s: s.decode_tps), sb, gbs))
        # what a user gets: the breakdown's timer waits for the device after every decode, which costs a little
        plain.cfg.timings = False
        plain.set_draft(1)  # a new engine, built without the timer
        plain.generate(PROMPT, max_tokens=8)
        st = _best([plain.generate(PROMPT, max_tokens=a.n_predict).stats for _ in range(a.repeats)],
                   lambda s: s.decode_tps)
        rows.append(_row("run --no-mtp, timings off", 0, st, sb, gbs))
    checks: dict[str, Any] = {"identical_to_plain": True, "differs": []}
    with MTPSession(model, mtp="auto", n_draft=kmax, **kw) as s:
        if not s.mtp_enabled:
            raise SystemExit(f"{model}: no MTP head ({s.notices})")
        s.generate(PROMPT, max_tokens=8)
        for k in [*a.drafts, "auto"]:
            s.set_draft(kmax if k == "auto" else int(k), adaptive=k == "auto")
            gens = [s.generate(PROMPT, max_tokens=a.n_predict) for _ in range(a.repeats)]
            for g in gens:
                if g.tokens != ref:
                    checks["identical_to_plain"] = False
                    checks["differs"].append(str(k))
            if k == "auto":
                rows.append(_row("run auto, first", "auto", gens[0].stats, sb, gbs))
            rows.append(_row(f"run k={k}" if k != "auto" else "run auto, best", k,
                             _best([g.stats for g in gens], lambda x: x.decode_tps), sb, gbs))
            if k == "auto" and s.engine.adaptive is not None:  # what the controller measured: why it chose as it did
                times = sorted(s.engine.adaptive.times.items())
                ms = {str(j): round(statistics.median(v) * 1e3, 3) for j, v in times if v}
                acc = [round(x, 4) for x in s.engine.stats.acceptance_at]
                rows[-1].update(auto_step_ms=ms, auto_acceptance_at=acc)
                print(f"auto: median step ms by k {ms}, acceptance {acc}", file=sys.stderr)
                # what a later run gets from --spec-draft-profile: a new controller seeded with what this one
                # measured, one answer (no exploration)
                prof = a.out.parent / f"draft-profile-{model.stem}.json"
                draft_profile.save(s, prof, force=True)
                s.set_draft(kmax, adaptive=True)
                note = draft_profile.use(s, prof)
                if note:
                    raise SystemExit(note)
                g = s.generate(PROMPT, max_tokens=a.n_predict)
                if g.tokens != ref:
                    checks["identical_to_plain"] = False
                    checks["differs"].append("auto, from its profile")
                rows.append(_row("run auto, from its profile", "auto", g.stats, sb, gbs))
        best = max((r for r in rows if isinstance(r["k"], int) and r["k"] > 0), key=lambda r: r["t/s"])
        # the best k again without the timer (what it costs), with host sampling and with the head's decodes
        # in the shapes they come (what the device sampler and stable shapes bring)
        for label, key, val in (("timings off", "timings", False), ("host sampling", "device_sampling", False),
                                ("shapes as they come", "stable_shapes", False)):
            old = getattr(s.cfg, key)
            setattr(s.cfg, key, val)
            s.set_draft(best["k"])
            s.generate(PROMPT, max_tokens=8)
            st = _best([s.generate(PROMPT, max_tokens=a.n_predict).stats for _ in range(a.repeats)],
                       lambda x: x.decode_tps)
            rows.append(_row(f"run k={best['k']}, {label}", best["k"], st, sb, gbs))
            setattr(s.cfg, key, old)
    return rows, checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", required=True, help="LABEL=PATH (or PATH); repeatable")
    ap.add_argument("--bin", help="folder with llama-completion and llama-speculative-simple")
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int)
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("-c", "--ctx", type=int, default=2048)
    ap.add_argument("--drafts", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tool-repeats", type=int,
                    help="runs of each llama.cpp tool (each loads the model; default --repeats)")
    ap.add_argument("--hbm-gbs", type=float, help="peak memory bandwidth (default: from the GPU's name)")
    ap.add_argument("--no-tools", action="store_true", help="gguf-mtp only")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "side-by-side.json")
    a = ap.parse_args()
    a.tool_repeats = a.tool_repeats or a.repeats
    a.out.parent.mkdir(parents=True, exist_ok=True)
    prompt_file = a.out.parent / "side-by-side-prompt.txt"
    llamacpp.write_prompt(prompt_file, PROMPT)
    gpu = gpu_name() if a.ngl else None
    gbs = a.hbm_gbs or peak_gbs(gpu)
    device = f"{gpu or 'GPU'} (-ngl {a.ngl})" if a.ngl else f"CPU ({a.threads or os.cpu_count()} threads)"
    payload: dict = {"machine": machine(), "device": device, "peak_gbs": gbs, "n_predict": a.n_predict,
                     "repeats": a.repeats, "prompt": PROMPT, "lib": os.environ.get("LLAMA_CPP_LIB_PATH"), "models": []}
    cols = ["mode", "t/s", "x completion", "tok/step", "acceptance_at", "roofline_share", "step ms", "verify",
            "drafts", "read", "python"]
    for spec in a.model:
        label, _, path = spec.rpartition("=")
        model = Path(path)
        label = label or model.stem
        t0 = time.perf_counter()
        notes: list[str] = []
        sb = step_bytes(model)
        rows = [] if a.no_tools else run_tools(model, prompt_file, a, notes)
        ours, checks = run_ours(model, a, sb, gbs)
        rows += ours
        base = next((r["t/s"] for r in rows if r["mode"] == "llama-completion"), None)
        for r in rows:
            r["x completion"] = round(r["t/s"] / base, 2) if base else None
            bd = r.get("breakdown") or {}
            if bd:
                r["step ms"], r["verify"], r["read"], r["python"] = (bd["step_ms"], bd["verify_ms"], bd["read_ms"],
                                                                      bd["python_ms"])
                r["drafts"] = "/".join(f"{x:.2f}" for x in bd["draft_ms"])
        shown = [{**r, "acceptance_at": "/".join(f"{x * 100:.0f}" for x in r.get("acceptance_at") or [])} for r in rows]
        print(f"\n## {label}: {model.name} ({model.stat().st_size / 1e9:.2f} GB), {device}, {a.n_predict} tokens, "
              f"best of {a.repeats}; bytes/token plain {sb.plain / 1e9:.3f} GB, per MTP decode "
              f"{(sb.mtp_block + sb.mtp_lm_head) / 1e9:.3f} GB" + (f", peak {gbs:.0f} GB/s" if gbs else ""))
        print(table(shown, cols))
        print(f"output identical to plain decoding: {checks['identical_to_plain']}"
              + (f" (differs: {', '.join(checks['differs'])})" if checks["differs"] else ""))
        for n in notes:
            print(f"note: {n}")
        payload["models"].append({"label": label, "path": str(model), "bytes": vars(sb), "rows": rows,
                                  "checks": checks, "notes": notes, "seconds": round(time.perf_counter() - t0, 1)})
        a.out.write_text(json.dumps(payload, indent=2))  # after every model: a cut-off run keeps what it did
    print(f"\nwrote {a.out}")
    try:
        from bench.plot import plot_side_by_side

        print(f"wrote {plot_side_by_side(a.out)}")
    except ImportError as e:
        print(f"no plot ({e}); pip install matplotlib (gguf-mtp's 'plot' extra)")


if __name__ == "__main__":
    exit_after(main)
