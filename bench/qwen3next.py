"""Speculative decoding on Qwen3-Next (`qwen3next`), whose recurrent state llama.cpp keeps no rollback snapshots of:
plain vs MTP tokens/s for each way of undoing rejected drafts (gguf_mtp/runtime/rollback.py), at each draft
length, with a perfect head and a ~70% head, on the same models in the same run. Prints tables, writes JSON.

    python bench/qwen3next.py --make 6 --ngl 99            # GPU: Qwen3-Next widths and vocabulary (151936)
    python bench/qwen3next.py --make cpu --threads 2        # CPU: small widths, same structure

Rollback candidates (``--rollback``, several): ``replay`` (a: save the recurrent state before each verify in a
second sequence, restore it and re-decode the accepted tokens after a rejection), ``replay:store=state`` /
``state-device`` (a, through llama_state_seq_get/set_data_ext PARTIAL_ONLY [| ON_DEVICE]), ``replay:every=4,...``
(b: save every 4th step, re-decode back to the save), ``replay:merge=16`` (c: re-decode the accepted tokens
ahead of the next verify batch instead of in a decode of their own); ``native`` where llama.cpp keeps snapshots
(a patched build: docs/upstream/qwen3next-rs-rollback.md); ``auto`` (the default: (c), merging up to 8). Per
row: t/s, x plain, tokens per step, acceptance
by draft position, the rollback's own time per step (restore + separate re-decode; merged tokens ride in the
verify batch and show in the step time instead), tokens decoded again per step, and the step time.

The model is a bigram trunk with an "oracle" head (tests.synthetic) that is always right; the imperfect head
is the same head with each draft token replaced by a wrong one with probability --spoil (default 0.3: 70% at the
first position, 49% at the second, ...), from a seeded generator, so every strategy sees the same drafts and the
acceptance does not depend on the model's widths. Speed, not text, is measured. Target (issue 16): >= 1.4x plain
with the perfect head on a GPU. On a 2-core CPU decode is compute-bound and MTP cannot beat plain decoding;
there the table ranks the rollback strategies against each other.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import gguf_mtp.runtime  # noqa: F401  llama.cpp's libraries before numpy (CUDA builds; README "CUDA")

# isort: split

# isort: split
from bench.common import exit_after, machine, save, table

PROMPT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
          "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n") * 4
# auto: what gguf-mtp picks (native where llama.cpp keeps snapshots, else (c) with the second-sequence store)
ROLLBACKS = ["auto", "replay", "replay:store=state-device", "replay:store=state-device,every=4"]


def spec_for(size: str):  # type: ignore[no-untyped-def]
    from tests.synthetic import SyntheticSpec

    if size == "cpu":  # small widths; the structure of Qwen3-Next (3 DeltaNet : 1 attention, MoE + shared expert)
        w: dict[str, Any] = dict(layers=8, hidden=512, heads=8, kv_heads=2, head_dim=64, lin_k_heads=4, lin_v_heads=8,
                 lin_head_dim=64, experts=16, experts_used=4, moe_intermediate=256, shared_intermediate=256,
                 intermediate=1024, vocab_size=32768)
    else:  # Qwen3-Next-80B-A3B widths and vocabulary; fewer layers and experts to fit SIZE_GB (Q8_0)
        per_layer, emb = 250e6, 2 * 151936 * 2048 * 1.0625  # 64 experts of 3 x 2048 x 512
        layers = max(4, round((float(size) * 1e9 - emb) / per_layer / 4) * 4)
        w = dict(layers=layers, hidden=2048, heads=16, kv_heads=2, head_dim=256, lin_k_heads=16, lin_v_heads=32,
                 lin_head_dim=128, experts=64, experts_used=10, moe_intermediate=512, shared_intermediate=512,
                 intermediate=5120, vocab_size=151936)
    return SyntheticSpec("qwen3next", **w, oracle_head=True, trunk_scale=0.0, n_shards=4)


def make_model(work: Path, size: str, threads: int) -> Path:
    from gguf_mtp.convert import convert
    from tests.synthetic import write_checkpoint

    out = work / f"q3n-{size}.gguf"
    if not out.exists():
        ck = work / f"q3n-ckpt-{size}"
        if not (ck / "config.json").exists():
            write_checkpoint(ck, spec_for(size))
        convert(ck, outfile=out, outtype="q8_0", layout="bundled", progress=False, threads=threads)
    return out


def spoil(engine, rate: float, seed: int, n_vocab: int) -> None:  # type: ignore[no-untyped-def]
    """Make each draft token wrong with probability ``rate`` (the oracle's token + 1, never the target's pick)."""
    import random

    if not rate:
        return
    rng, draft = random.Random(seed), engine._draft

    def spoiled(k: int) -> tuple[list[int], bool]:
        out, kept = draft(k)
        return [(d + 1) % n_vocab if rng.random() < rate else d for d in out], kept

    engine._draft = spoiled


def bench_model(model: Path, heads: dict[str, float], a: argparse.Namespace) -> tuple[list[dict], bool]:
    from gguf_mtp.runtime import MTPSession

    kw = dict(n_ctx=2048, n_gpu_layers=a.ngl, n_threads=a.threads)
    with MTPSession(model, mtp=False, **kw) as plain:
        toks = plain.model.tokenize(PROMPT)
        plain.generate(toks[:16], max_tokens=8)  # warm-up
        runs = [timed(plain, toks, a.n_predict) for _ in range(a.repeats)]
        base, base_cpu = max(runs, key=lambda r: r[0].stats.decode_tps)[0].stats, min(r[1] for r in runs)
        ref = runs[0][0].tokens
    rows = [{"head": "", "rollback": "plain", "k": "", "t/s": round(base.decode_tps, 1), "x plain": 1.0,
             "tok/step": 1.0, "step ms": round(1e3 / base.decode_tps, 2), "cpu ms/tok": round(1e3 * base_cpu, 2),
             "x plain (cpu)": 1.0}]
    lossless = True
    kmax = max(d for d in a.drafts if d != "auto")
    for rb in a.rollback:
        try:
            s = MTPSession(model, mtp="auto", n_draft=kmax, rollback=rb, require_mtp=True, **kw)
        except Exception as e:  # noqa: BLE001 - e.g. native without snapshots: report, go on
            rows.append({"head": "", "rollback": rb, "k": "-", "t/s": f"n/a: {str(e)[:60]}"})
            continue
        with s:
            name = s.engine.rollback.name
            s.generate(toks[:16], max_tokens=8)
            for head, rate in heads.items():
                for k in a.drafts:
                    runs = []
                    auto = k == "auto"
                    for r in range(a.repeats):
                        if not auto or r == 0:  # auto keeps its engine: later runs start from what it measured
                            s.set_draft(kmax if auto else int(k), adaptive=auto)
                            # a fresh engine; the same seed: the same spoiled drafts every time
                            spoil(s.engine, rate, seed=0 if auto else int(k), n_vocab=s.model.n_vocab)
                        g, cpu = timed(s, toks, a.n_predict)
                        lossless &= g.tokens == ref
                        runs.append((g.stats, cpu))
                    st = max(runs, key=lambda r: r[0].decode_tps)[0]
                    cpu = min(r[1] for r in runs)
                    rows.append(_row(head, name, k, st, base.decode_tps) | {
                        "cpu ms/tok": round(1e3 * cpu, 2), "x plain (cpu)": round(base_cpu / cpu, 2)})
    return rows, lossless


def timed(session, toks: list[int], n: int):  # type: ignore[no-untyped-def]
    """A generation and the process CPU seconds it took per emitted token: with one thread on a busy machine
    the CPU time measures the work, where wall time also counts the time other processes had the cores."""
    eng, spent = session.engine, [0.0]
    generate = eng.generate

    def measured(*args, **kw):  # type: ignore[no-untyped-def]
        c0 = time.process_time()
        try:
            yield from generate(*args, **kw)
        finally:
            spent[0] = time.process_time() - c0

    eng.generate = measured  # decode only: the prompt is the same work for every strategy
    g = session.generate(toks, max_tokens=n)
    return g, spent[0] / max(1, len(g.tokens))


def _row(head: str, name: str, k: int, st, base_tps: float) -> dict:  # type: ignore[no-untyped-def]
    return {"head": head, "rollback": name, "k": k, "t/s": round(st.decode_tps, 1),
            "x plain": round(st.decode_tps / base_tps, 2), "tok/step": round(st.mean_accepted_length, 2),
            "accept by position %": "/".join(f"{x * 100:.0f}" for x in st.acceptance_at),
            "rollback ms/step": round(1e3 * st.rollback_seconds / max(1, st.steps), 3),
            "replayed/step": round(st.replayed_tokens / max(1, st.steps), 2),
            "step ms": round(1e3 * st.decode_seconds / max(1, st.steps), 2),
            "plain steps %": round(100 * st.plain_steps / max(1, st.steps))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make", default="cpu",
                    help="'cpu' (small widths) or a size in GB (Qwen3-Next widths, vocab 151936)")
    ap.add_argument("--spoil", type=float, default=0.3, help="the imperfect head: share of draft tokens made wrong")
    ap.add_argument("--no-perfect", action="store_true", help="only the imperfect head")
    ap.add_argument("--rollback", nargs="+", default=ROLLBACKS)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/gguf-mtp-bench"))
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("--drafts", type=lambda v: v if v == "auto" else int(v), nargs="+", default=[1, 2, 3, 4, "auto"],
                    help="draft lengths, and 'auto' (--spec-draft-n-max auto: may choose plain decoding)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "qwen3next.json")
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    threads = a.threads or os.cpu_count() or 2
    t0 = time.perf_counter()
    model = make_model(a.workdir, a.make, threads)
    made = time.perf_counter() - t0
    heads = {"perfect": 0.0, f"{100 - 100 * a.spoil:.0f}%": a.spoil}
    if a.no_perfect:
        del heads["perfect"]
    rows, lossless = bench_model(model, heads, a)
    best: dict[str, dict[str, Any]] = {}
    by = "x plain" if a.ngl else "x plain (cpu)"  # a shared CPU: rank by the work, not the wall time
    for r in rows:
        if r["rollback"] != "plain" and isinstance(r.get(by), float):
            key = r["head"]
            if key not in best or r[by] > best[key][by]:
                best[key] = r
    dev = f"GPU (-ngl {a.ngl})" if a.ngl else f"CPU ({threads} threads)"
    print(f"model: {model} ({model.stat().st_size / 1e9:.2f} GB, made in {made:.0f} s), {dev}, {a.n_predict} tokens, "
          f"best of {a.repeats}")
    print(table(rows, ["head", "rollback", "k", "t/s", "x plain", "tok/step", "accept by position %",
                       "rollback ms/step", "replayed/step", "step ms", "plain steps %", "cpu ms/tok", "x plain (cpu)"]))
    print(f"\noutput identical to plain decoding in every MTP run: {lossless}")
    for head, r in best.items():
        print(f"best with the {head} head: {r['rollback']} k={r['k']}: {r['t/s']} t/s = {r['x plain']}x plain"
              f" (CPU time per token: {r['x plain (cpu)']}x plain)")
    save(a.out, {"machine": machine(), "device": dev, "model": str(model), "spoil": a.spoil, "rows": rows,
                 "lossless": lossless, "best": best})


if __name__ == "__main__":
    exit_after(main)
