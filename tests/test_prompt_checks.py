"""auto checks the head's first draft on the prompt before its first choice (``DraftLength.seed_prompt``, issue 24):
where a change of length is dear, the first choice is hard to leave, so it is made knowing whether the head is far
from typical. The check must count what a verify would: at each of the prompt's last ``PROMPT_ROWS`` positions,
the head's greedy draft from that position against the target's greedy pick there. Checked here on the shipped
tiny model against the same picks recomputed from the library's logits, with nothing else of the engine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert
from gguf_mtp.runtime import MTPSession, SamplerConfig
from gguf_mtp.runtime.adaptive import DraftLength, wilson
from gguf_mtp.runtime.llama import Batch, Context, Model

from .lossless import Reference

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
PROMPTS = json.loads((TINY / "reference.json").read_text())["prompts"]
#: picks whose two best logits lie closer than this may differ between a batch of one shape and another (products
#: reordered): such positions may count either way
TIE = 1e-3


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(TINY, outfile=tmp_path_factory.mktemp("checks") / "tiny.gguf", progress=False).path


def _argmax(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's argmax, and whether its top two are within ``TIE`` of each other."""
    top2 = np.sort(np.partition(rows, -2, axis=1)[:, -2:], axis=1)
    return rows.argmax(axis=1), (top2[:, 1] - top2[:, 0]) < TIE


def reference(path: Path, prompt: list[int], lo: int) -> tuple[int, int, int]:
    """(checked, right, ties) over prompt positions ``lo``.. up to the body's end (the last token is decoded with
    the first step): the target's logits at every body row, and the head's from its queue as the engine builds it
    (token p with the target's hidden row at p - 1), each decoded in one batch of its own."""
    body = prompt[:-1]
    n = len(body)
    with Model(path, load_mtp=True) as m:
        with Context(m, n_ctx=256, n_batch=256, embeddings_nextn=True, n_outputs_max=n) as t:
            b = Batch(n)
            b.fill(body, 0)
            b.logits_np[:n] = 1
            t.decode_batch(b)
            tgt = np.stack([t.logits_view(i).copy() for i in range(n)])
            h = t.h_rows(n).copy()
        with Context(m, n_ctx=256, n_batch=256, mtp=True, n_outputs_max=n) as d:
            mb = Batch(n, m.n_embd_out)
            mb.fill(body, 0, embd=np.vstack([np.zeros((1, h.shape[1]), np.float32), h[:-1]]))
            mb.logits_np[:n] = 1
            d.decode_batch(mb)
            head = np.stack([d.logits_view(i).copy() for i in range(n)])
    t_pick, t_tie = _argmax(tgt[lo:])
    h_pick, h_tie = _argmax(head[lo:])
    return n - lo, int((t_pick == h_pick).sum()), int((t_tie | h_tie).sum())


@pytest.mark.parametrize("dear", [True, False])
def test_the_prompt_checks_count_what_a_verify_would(model: Path, dear: bool) -> None:
    """Where a change of length costs more than a plain step, the answer's prompt is checked at its last
    PROMPT_ROWS positions (from position 1: position 0 has no hidden row before it), with the outcome the
    recomputed picks give; where it is cheap (a CPU), nothing is checked and the prompt's decode asks for no
    outputs. Output is the same either way (greedy)."""
    texts = {}
    for prompt_text in PROMPTS[:2]:
        with MTPSession(model, n_ctx=512, n_draft=4, adaptive=True, warmup=True) as s:
            prompt = s.model.tokenize(prompt_text)
            a = s.engine.adaptive
            assert a is not None and a.prompt_checks is None
            # a change of length dearer than a plain step (a deep model with CUDA graphs), or free; the warm-up's own
            # measure of it is noise on a CPU
            a.switch_s.clear()
            a.seed_switch(10 * max(a.times[0]) if dear else 0.0)
            assert a.wants_prompt() == dear
            out = s.generate(prompt, max_tokens=16)
            texts[prompt_text] = out
            if not dear:
                assert a.prompt_checks is None and not a.wants_prompt()
                continue
            body = len(prompt) - 1
            lo = max(body - DraftLength.PROMPT_ROWS, 1)
            assert body - lo >= 8, "the prompt is too short to check"
            checked, right, ties = reference(model, prompt, lo)
            assert a.prompt_checks is not None and a.prompt_checks[0] == checked == body - lo
            assert abs(a.prompt_checks[1] - right) <= ties, (a.prompt_checks, right, ties)
            assert not a.wants_prompt()  # once an answer: the run's own drafts take over
            # counted only where they show the head better than a typical one
            better = wilson(a.prompt_checks[1] / checked, checked, a.PROMPT_Z)[0] > a.TYPICAL_FIRST
            assert a._prompt_counted == better and a.summary()["prompt_counted"] == better
    # plain decoding's output, up to a tie where a verify's rows round apart from a plain step's (tests/lossless.py)
    for prompt_text, out in texts.items():
        Reference(lambda: MTPSession(model, n_ctx=512, n_draft=4, mtp=False),
                  lambda s, p=prompt_text: s.generate(p, max_tokens=16, sampling=SamplerConfig())).check(
                      out, f"dear={dear}: {prompt_text[:20]!r}")


def test_the_prompt_agreement_benchmark_checks_the_prompt_as_auto_does(model: Path) -> None:
    """bench/prompt_agreement.py (a head's agreement on prompts against its acceptance on answers, docs/benchmarks.md):
    the prompt's checks are auto's own, the last PROMPT_ROWS positions, and the answer's first drafts are counted at
    k=1."""
    import importlib

    pa = importlib.import_module("bench.prompt_agreement")
    checked, right = pa.prompt_checks(model, PROMPTS[0], 0, None)
    assert checked == DraftLength.PROMPT_ROWS and 0 <= right <= checked
    [(drafted, accepted)] = pa.answer_acceptance(model, [PROMPTS[0]], 48, 0, None)
    assert 0 < accepted <= drafted < 48  # a step at k=1 emits one or two tokens: fewer drafts than tokens


def test_only_a_session_warmed_up_at_load_makes_room_for_the_checks(model: Path) -> None:
    """The checks follow a warm-up (they refine its typical prior), and each row they need costs a vocabulary's
    worth of llama.cpp's host buffers in both contexts: a session not warmed up (a CPU's default) makes its contexts
    for a verify step only, and then checks nothing even where its controller would want them."""
    with MTPSession(model, n_ctx=512, n_draft=4, adaptive=True, warmup=False) as s:
        e = s.engine
        assert e.tgt.n_outputs_per_seq == 5 and e.mtp is not None and e.mtp.n_outputs_per_seq < DraftLength.PROMPT_ROWS
        a = e.adaptive
        assert a is not None
        a.seed_times({k: [1e-3 * (1 + k)] * 2 for k in range(5)})  # as a warm-up would leave it, a change dear
        a.seed_switch(1.0)
        assert a.wants_prompt()
        s.generate(PROMPTS[0], max_tokens=8)
        assert a.prompt_checks is None
    with MTPSession(model, n_ctx=512, n_draft=4, adaptive=True, warmup=True) as s:
        e = s.engine
        assert e.tgt.n_outputs_per_seq == e.mtp.n_outputs_per_seq == DraftLength.PROMPT_ROWS
    with MTPSession(model, n_ctx=512, n_draft=4, warmup=True) as s:  # a fixed length: no checks, no room for them
        assert s.engine.tgt.n_outputs_per_seq == 5
