"""How a head's agreement with its target on a prompt compares with its acceptance on the answer: what ``auto``
(gguf_mtp/runtime/adaptive.py, ``seed_prompt``) may read off a prompt before its first choice. For each prompt,
the head's first draft is checked against the target's greedy pick at the prompt's last ``PROMPT_ROWS``
positions, as ``auto`` checks it; then the same prompt is answered at k=1 (greedy) and the share of first drafts
accepted is counted. A prompt is the user's text and the answer the model's own, so the two need not agree: auto
counts the checks only where they show a head better than typical.

    python -m bench.prompt_agreement                        # the shipped tiny model, its reference prompts
    python -m bench.prompt_agreement --model M.gguf --prompts prompts.json -n 256 -ngl 99
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp's libraries before numpy)

# isort: split
from bench.common import ROOT, exit_after, machine, prompts_from, save, table, tiny_gguf


def prompt_checks(model: Path, prompt: str, ngl: int, threads: int | None) -> tuple[int, int]:
    """(checked, right): auto's checks of the head on ``prompt``, made as where a change of length is dear."""
    from gguf_mtp.runtime import MTPSession

    with MTPSession(model, n_draft=4, adaptive=True, warmup=True, n_ctx=1024, n_gpu_layers=ngl,
                    n_threads=threads) as s:
        a = s.engine.adaptive
        assert a is not None
        a.switch_s.clear()
        a.seed_switch(10 * max(a.times[0]))  # dearer than a plain step: the checks are made
        s.generate(prompt, max_tokens=1)
        return a.prompt_checks or (0, 0)


def answer_acceptance(model: Path, prompts: Sequence[str], n: int, ngl: int,
                      threads: int | None) -> list[tuple[int, int]]:
    """(drafted, accepted) of each prompt's answer of ``n`` tokens at k=1, greedy."""
    from gguf_mtp.runtime import MTPSession

    out = []
    with MTPSession(model, n_draft=1, n_ctx=max(1024, 4 * n), n_gpu_layers=ngl, n_threads=threads) as s:
        for p in prompts:
            st = s.generate(p, max_tokens=n).stats
            out.append((st.drafted_at[0] if st.drafted_at else 0, st.accepted_at[0] if st.accepted_at else 0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="GGUF with an MTP head (default: the shipped tiny model, converted)")
    ap.add_argument("--prompts", type=Path, help="JSON list of prompts (default: the tiny model's reference ones)")
    ap.add_argument("-n", type=int, default=160, help="tokens per answer")
    ap.add_argument("-ngl", "--ngl", type=int, default=0)
    ap.add_argument("-t", "--threads", type=int)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "prompt_agreement.json")
    a = ap.parse_args()
    prompts = prompts_from(a.prompts)
    if a.n < 1:
        raise SystemExit("error: -n: give 1 or more tokens")
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model or tiny_gguf(Path(tmp))
        checks = [prompt_checks(model, p, a.ngl, a.threads) for p in prompts]
        answers = answer_acceptance(model, prompts, a.n, a.ngl, a.threads)
    rows: list[dict[str, object]] = []
    for p, (c, r), (d, acc) in zip(prompts, checks, answers):
        rows.append({"prompt": repr(p[:32]), "prompt right": f"{r}/{c}", "prompt share": round(r / c, 3) if c else "",
                     "answer share": round(acc / d, 3) if d else "", "lower on the prompt": bool(c and d
                                                                                              and r / c < acc / d)})
    total = {"prompt share": sum(r for _, r in checks) / max(1, sum(c for c, _ in checks)),
             "answer share": sum(acc for _, acc in answers) / max(1, sum(d for d, _ in answers))}
    print(f"the head's first draft against the target's pick: the prompts' last positions and {a.n}-token answers "
          f"at k=1, greedy; {len(prompts)} prompts")
    print(table(rows, ["prompt", "prompt right", "prompt share", "answer share", "lower on the prompt"]))
    print(f"all: prompt {total['prompt share']:.3f}, answer {total['answer share']:.3f}; lower on the prompt in "
          f"{sum(1 for r in rows if r['lower on the prompt'])} of {len(rows)}")
    save(a.out, {"machine": machine(), "model": str(a.model or "tiny"), "n": a.n, "rows": rows, "total": total})


if __name__ == "__main__":
    exit_after(main)
