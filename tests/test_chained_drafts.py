"""The runtime's side of the proposed mtp-draft-chain patch: where the loaded library has it (and the head is one
qwen35 / qwen35moe head drafting greedily), a step's k drafts are one decode of the MTP context instead of k. Output
is plain decoding's, the drafts are the same as one decode per draft (up to near-ties of float reordering), and
``GGUF_MTP_DRAFT_CHAIN=0`` or ``--spec-draft-p-min`` keep one decode per draft. Skipped where the library lacks the
patch (a proposed one: ``LLAMA_CPP_LIB_PATH`` at a build with ``GGUF_MTP_PATCHES=proposed`` runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_mtp.runtime import MTPSession, patches
from gguf_mtp.runtime.llama import Context
from tests.conftest import TINY_PROMPTS
from tests.lossless import Reference

pytestmark = pytest.mark.skipif("mtp-draft-chain" not in patches.names(),
                                reason="the loaded libllama lacks the mtp-draft-chain patch (proposed: "
                                       "LLAMA_CPP_LIB_PATH at a build with GGUF_MTP_PATCHES=proposed runs this)")


def answers(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch, chain: bool, **kw) -> tuple[list, list[int], list[int]]:
    """Each prompt's answer, and the MTP decodes with outputs per step, with drafts chained or not."""
    monkeypatch.setenv(patches.CHAIN_ENV, "1" if chain else "0")
    per_step: list[int] = []
    real = Context.decode_batch

    def recording(self, batch):  # type: ignore[no-untyped-def]
        if batch.embd is not None and batch.n_outputs:
            per_step[-1] += 1
        elif batch.embd is None and batch.n_outputs == batch.n:  # a verify: every row sampled
            per_step.append(0)
        return real(self, batch)

    with MTPSession(tiny_gguf, n_ctx=512, **kw) as s:
        assert s.chained is chain
        monkeypatch.setattr(Context, "decode_batch", recording)
        per_step.append(0)
        gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
        monkeypatch.setattr(Context, "decode_batch", real)
        st = s.stats
    return gens, st.drafted_at, st.accepted_at, per_step


@pytest.mark.parametrize("k", [2, 3, 4])
def test_chained_drafts_are_lossless_and_one_decode_a_step(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch,
                                                           k: int) -> None:
    ref = Reference(lambda: MTPSession(tiny_gguf, mtp=False, n_ctx=512),
                    lambda s: [s.generate(p, max_tokens=40) for p in TINY_PROMPTS])
    on = answers(tiny_gguf, monkeypatch, True, n_draft=k)
    off = answers(tiny_gguf, monkeypatch, False, n_draft=k)
    for gens, name in ((on[0], "chained"), (off[0], "one decode per draft")):
        ref.check(gens, f"k={k} {name}")
    # the same drafts: a chained row computes what a decode of its own would, up to float reordering, which can
    # break a near-tie in the head's argmax the other way (tests/lossless.py): a few drafts a position at most
    for a, b in ((on[1], off[1]), (on[2], off[2])):
        assert len(a) == len(b) and all(abs(x - y) <= 2 for x, y in zip(a, b)), (on[1:3], off[1:3])
    assert sum(on[1]) > 0
    drafting = [n for n in on[3] if n]
    assert drafting and set(drafting) == {1}, on[3]  # one MTP decode with outputs a drafting step
    assert max(off[3]) == k  # one per draft without the chain


def test_p_min_and_the_switch_keep_one_decode_per_draft(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=3, p_min=0.1) as s:
        assert not s.chained  # p_min reads each draft's probability before the next is drafted
    monkeypatch.setenv(patches.CHAIN_ENV, "0")
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=3) as s:
        assert not s.chained


def test_auto_and_server_slots_with_chained_drafts(tiny_gguf: Path) -> None:
    """auto changes k (and drafts shadow tokens) between chained decodes; two server slots draft in a shared
    batch (not chained) or, one alone, chained: every answer is plain decoding's."""
    ref = Reference(lambda: MTPSession(tiny_gguf, mtp=False, n_ctx=1024),
                    lambda s: s.generate(TINY_PROMPTS[0], max_tokens=48))
    with MTPSession(tiny_gguf, n_ctx=1024, n_draft=4, adaptive=True) as s:
        assert s.chained
        ref.check(s.generate(TINY_PROMPTS[0], max_tokens=48), "auto, chained")
    with MTPSession(tiny_gguf, n_ctx=1024, n_draft=3, n_parallel=2) as s:
        assert s.chained
        ref.check(s.generate(TINY_PROMPTS[0], max_tokens=48), "two slots, one in use, chained")


@pytest.mark.parametrize("k", [2, 3, 4])
def test_chained_decodes_keep_one_shape_with_stable_shapes(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch,
                                                           k: int) -> None:
    """An offloaded head pads every chained decode to 2k rows (k + 1 and the k - 1 chained ones) from the cache's
    tail, so llama.cpp reuses one graph whatever a step accepted. The tail must hold the k + 1 real rows before the
    chained ones: at k >= 3 a decode's earlier rows were once forgotten, and after a rejected step (few rows queued)
    the padding fell short, so about half the chained decodes of a 27B-shaped run on an H100 built their graph
    again."""
    monkeypatch.setenv(patches.CHAIN_ENV, "1")
    ref = Reference(lambda: MTPSession(tiny_gguf, mtp=False, n_ctx=1024),
                    lambda s: s.generate(TINY_PROMPTS[1], max_tokens=64))
    rows: list[int] = []
    real = Context.decode_batch

    def recording(self, batch):  # type: ignore[no-untyped-def]
        if batch.embd is not None and batch.n_outputs:
            rows.append(batch.n)
        return real(self, batch)

    with MTPSession(tiny_gguf, n_ctx=1024, n_draft=k, stable_shapes=True) as s:
        assert s.chained
        monkeypatch.setattr(Context, "decode_batch", recording)
        g = s.generate(TINY_PROMPTS[1], max_tokens=64)
        monkeypatch.setattr(Context, "decode_batch", real)
    ref.check(g, f"k={k}, chained, stable shapes")
    assert 0 < g.stats.accepted_at[0] < g.stats.drafted_at[0], "needs rejected drafts to test the padding after them"
    # the first decodes may find the cache too short to pad from (the prompt's rows are there)
    assert len(rows) >= 8 and set(rows[2:]) == {2 * k}, rows
