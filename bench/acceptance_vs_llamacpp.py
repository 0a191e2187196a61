"""Acceptance of llama.cpp's MTP driver (llama-speculative-simple --spec-type draft-mtp) against `gguf-mtp run`,
same GGUF, same prompts, same token count, same llama.cpp build (point LLAMA_CPP_LIB_PATH at the tools'
libraries). The reproduction for docs/upstream/mtp-acceptance.md.

    LLAMA_CPP_LIB_PATH=build/bin python -m bench.acceptance_vs_llamacpp --bin build/bin            # tiny model
    LLAMA_CPP_LIB_PATH=build/bin python -m bench.acceptance_vs_llamacpp --bin build/bin --model M.gguf

Default model: the shipped trained tiny Qwen3.5 (examples/tiny-qwen35-mtp), converted here, with its 16
reference prompts (64 tokens each). Each configuration runs greedy (``--temp 0``, what gguf-mtp's figures are)
and with llama.cpp's default sampling (``--temp 0.8`` etc.: what llama-speculative-simple does when no
``--temp`` is given); gguf-mtp is greedy. Acceptance by position is the share of steps whose first i+1 drafts
were all accepted (both tools count it so).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp's libraries before numpy)

# isort: split

# isort: split
from bench import llamacpp
from bench.common import ROOT, exit_after, machine, save, table, tiny_gguf, tiny_reference


def tiny_model(work: Path) -> tuple[Path, list[str], int]:
    ref = tiny_reference()
    return tiny_gguf(work), ref["prompts"], int(ref["new_tokens"])


def ours(model: Path, prompts: list[str], n: int, k: int, threads: int | None) -> dict:
    from gguf_mtp.runtime import MTPSession

    texts = []
    with MTPSession(model, mtp="auto", n_draft=k, n_ctx=1024, n_threads=threads) as s:
        for p in prompts:
            texts.append(s.generate(p, max_tokens=n).text)
        st = s.stats
    return {"drafted": st.drafted, "accepted": st.accepted, "acceptance": st.acceptance,
            "acceptance_at": st.acceptance_at, "steps": st.steps, "texts": texts}


def theirs(tool: Path, model: Path, prompts: list[str], n: int, k: int, temp: float,
           threads: int | None, work: Path) -> dict:
    drafted = accepted = 0
    per_pos: list[float] = []
    steps = 0
    for i, p in enumerate(prompts):
        f = llamacpp.write_prompt(work / f"prompt-{i}.txt", p)
        r = llamacpp.speculative(tool, model, f, n, k, threads=threads, ctx=1024, temp=temp)
        drafted += r.drafted
        accepted += r.accepted
        # the statistics line gives per-position rates over its steps; weight them back into counts
        n_steps = round(r.drafted / k)
        if r.acceptance_at and n_steps:
            while len(per_pos) < len(r.acceptance_at):
                per_pos.append(0.0)
            for j, x in enumerate(r.acceptance_at):
                per_pos[j] += x * n_steps
            steps += n_steps
    return {"drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else 0.0,
            "acceptance_at": [x / steps for x in per_pos] if steps else [], "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", help="folder with llama-speculative-simple (default: $LLAMA_CPP_BIN, PATH)")
    ap.add_argument("--model", type=Path, help="a bundled GGUF (default: the shipped tiny model)")
    ap.add_argument("--prompt", action="append", help="prompt text (repeatable; default: the tiny model's 16)")
    ap.add_argument("-n", "--n-predict", type=int, help="tokens per prompt (default: the tiny model's 64)")
    ap.add_argument("--drafts", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--temps", type=float, nargs="+", default=[0.0, 0.8],
                    help="llama.cpp's target sampling temperatures to run (0: greedy)")
    ap.add_argument("--tie-period", type=int, help="run on a copy whose LM head rows repeat every N tokens "
                    "(exact logit ties: how each driver breaks them)")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "acceptance-vs-llamacpp.json")
    a = ap.parse_args()
    tool = llamacpp.find_tool("llama-speculative-simple", a.bin)
    if tool is None:
        raise SystemExit("llama-speculative-simple not found: build it (see docs/upstream/mtp-acceptance.md) and "
                         "pass --bin")
    if not os.environ.get("LLAMA_CPP_LIB_PATH"):
        print("note: LLAMA_CPP_LIB_PATH is not set: gguf-mtp uses its own llama.cpp build, not the tool's")
    work = Path(tempfile.mkdtemp(prefix="acc-vs-llamacpp-"))
    if a.model:
        model, prompts, n = a.model, a.prompt or ["def fibonacci(n):\n    a, b = 0, 1\n"], a.n_predict or 128
    else:
        model, prompts, n = tiny_model(work)
        prompts, n = a.prompt or prompts, a.n_predict or n
    if a.tie_period:
        from bench.models import tie_rows

        model = tie_rows(model, work / f"{model.stem}-tied{a.tie_period}.gguf", a.tie_period)
    rows = []
    for k in a.drafts:
        o = ours(model, prompts, n, k, a.threads)
        rows.append({"driver": "gguf-mtp run (greedy)", "k": k, **{x: o[x] for x in ("drafted", "accepted", "steps")},
                     "acceptance %": round(100 * o["acceptance"], 1),
                     "by position %": "/".join(f"{100 * x:.0f}" for x in o["acceptance_at"])})
        for temp in a.temps:
            t = theirs(tool, model, prompts, n, k, temp, a.threads, work)
            rows.append({"driver": f"llama-speculative-simple (--temp {temp:g})", "k": k,
                         **{x: t[x] for x in ("drafted", "accepted", "steps")},
                         "acceptance %": round(100 * t["acceptance"], 1),
                         "by position %": "/".join(f"{100 * x:.0f}" for x in t["acceptance_at"])})
    print(f"model {model.name}, {len(prompts)} prompts x {n} tokens, {tool}")
    print(table(rows, ["driver", "k", "drafted", "accepted", "steps", "acceptance %", "by position %"]))
    save(a.out, {"machine": machine(), "model": str(model), "tool": str(tool), "n_predict": n,
                 "n_prompts": len(prompts), "lib": os.environ.get("LLAMA_CPP_LIB_PATH"), "rows": rows})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    exit_after(main)
