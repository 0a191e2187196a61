"""Several MTP heads (mimo2-style): one head per draft step, selected with llama_set_nextn_layer_offset and fed
the previous head's hidden row; output stays identical to plain decoding."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_mtp.runtime import MTPSession
from tests.lossless import Reference

from .mimo2_fixture import build_mimo

PROMPT = "the the the t he " * 3


@pytest.fixture(scope="module")
def mimo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mimo2") / "mimo2.gguf"
    build_mimo(str(path))
    return path


def test_chained_heads_are_lossless(mimo: Path) -> None:
    ref = Reference(lambda: MTPSession(mimo, mtp=False, n_ctx=512), lambda s: s.generate(PROMPT, max_tokens=32))
    for k in (1, 2, 3, 4):
        with MTPSession(mimo, n_ctx=512, n_draft=k) as s:
            assert s.engine.chain and s.engine.n_heads == 3
            assert s.engine.n_draft_max == min(k, 3)  # at most one draft token per head
            g = s.generate(PROMPT, max_tokens=32)
            ref.check(g, f"mimo2 fixture k={k}")
            assert g.stats.drafted > 0 and len(g.stats.drafted_at) == min(k, 3)


def test_chained_heads_of_slots_stepped_together_draft_in_one_batch(mimo: Path) -> None:
    """Server slots with chained heads: each draft step runs one head over every slot's draft prefix in one MTP
    decode (not one decode per slot), and each slot's answer equals its plain decoding."""
    from gguf_mtp.runtime.multistep import MultiStep
    from gguf_mtp.runtime.sampling import Sampler

    prompts = [PROMPT, "he the t the " * 3]
    n, k = 24, 3
    with MTPSession(mimo, n_ctx=1024, n_draft=k, n_parallel=2) as s:
        toks = [s.model.tokenize(p) for p in prompts]
        for e, t in zip(s.engines, toks):
            e.reset()
            e.feed(t)
        mtp = s.engines[0].mtp
        assert mtp is not None
        outputs: list[int] = []  # per MTP decode: draft rows (slots drafting in it); 0 for a queue's feed
        decode = mtp.decode_batch
        mtp.decode_batch = lambda b: (outputs.append(b.n_outputs), decode(b))[1]  # type: ignore[method-assign]
        multi, samplers = MultiStep(s.engines), [Sampler(None) for _ in prompts]
        outs: list[list[int]] = [[], []]
        steps = 0
        while min(map(len, outs)) < n:
            for o, emitted in zip(outs, multi.step(s.engines, samplers)):
                o.extend(emitted)
            steps += 1
        assert all(e.stats.drafted > 0 for e in s.engines)
        drafting = [x for x in outputs if x]
        assert len(drafting) <= steps * k and max(drafting) == 2, (drafting, steps)  # both slots in one decode
        # as a generation: up to n tokens, ending at an end-of-generation token
        outs = [o[: next((j + 1 for j, x in enumerate(o) if s.model.is_eog(x)), n)][:n] for o in outs]
    for o, t in zip(outs, toks):
        ref = Reference(lambda: MTPSession(mimo, mtp=False, n_ctx=1024),
                        lambda p, t=t: p.generate(list(t), max_tokens=n))  # type: ignore[misc]
        ref.check(o, "mimo2 slots")
