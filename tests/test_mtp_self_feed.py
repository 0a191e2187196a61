"""The proposed mtp-self-feed patch: an MTP context's second draft decoded from its first on the device. After the
first draft's decode (not waited for), its token (``keep_sampled_token``) and its masked hidden row
(``keep_output_h_row``) stay in the head context's own slots, and the next decode takes both from there
(``take_tokens_from`` / ``take_nextn_from`` with the context itself as the source), its batch holding placeholders.
That draft must be the one the host path decodes from the same first draft read back (the same token; the same
hidden row within :data:`H_TOL`), and ``kept_tokens`` must read the first draft's id back. The check can fail: the
placeholders alone (no feed) give another hidden row. Skipped where the library lacks the patch (every build but
``GGUF_MTP_PATCHES=proposed``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gguf_mtp.runtime import MTPSession, patches
from gguf_mtp.runtime.llama import Batch, Context, Model, _ll  # the runtime first: it loads llama.cpp (or says why not)
from gguf_mtp.runtime.sampling import context_sampler
from tests.conftest import TINY_PROMPTS
from tests.lossless import Reference

pytestmark = pytest.mark.skipif("mtp-self-feed" not in patches.names(),
                                reason="the loaded libllama lacks the proposed mtp-self-feed patch")

#: the largest difference allowed between the two paths' hidden rows, as a share of the row's largest magnitude: the
#: same inputs reach the same kernels, so only summation order could part them
H_TOL = 1e-5


def test_the_second_draft_from_the_first_on_the_device(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(patches.CHAIN_ENV, "0")  # one decode a draft (a chained head keeps every row's hidden row)
    m = Model(tiny_gguf, load_mtp=True)  # the head's tensors too (a bundled file)
    toks = m.tokenize("def add(a, b):\n    return a + b\n")[:4]
    tgt = Context(m, n_ctx=64, n_batch=8, embeddings_nextn=True)
    head = Context(m, n_ctx=64, n_batch=8, mtp=True, n_outputs_max=4)
    try:
        assert head.output_rows, "the head's hidden rows must be masked (one an output row): patch mtp-output-rows"
        smp = context_sampler(head)
        smp.use(None)  # greedy, in the graph: its ids can stay on the device
        assert smp.on_device
        b = Batch(len(toks))
        for i, t in enumerate(toks):
            b.add(t, i, logits=True)
        tgt.decode_batch(b)
        tgt.synchronize()
        hs = tgt.h_rows(len(toks)).copy()

        def first_draft() -> None:
            """The head over positions 0-2 (the prompt's tokens 1-3, each with the target's row before it), its last
            row the output: the first draft, queued and not waited for."""
            head.seq_rm(0)
            b1 = Batch(3, m.n_embd)
            for i in range(3):
                b1.add(toks[i + 1], i, logits=i == 2, embd=hs[i])
            head.decode_batch(b1)

        def second_draft(tok: int, h: np.ndarray) -> tuple[int, np.ndarray]:
            b2 = Batch(1, m.n_embd)
            b2.add(tok, 3, logits=True, embd=h)
            head.decode_batch(b2)
            head.synchronize()
            return _ll.llama_get_sampled_token_ith(head.ptr, 0), head.h_row(0).copy()

        # the host path: the first draft and its hidden row read back, then the second decoded from them
        first_draft()
        head.synchronize()
        d1 = _ll.llama_get_sampled_token_ith(head.ptr, 2)
        h1 = head.h_row(2).copy()
        d2, h2 = second_draft(d1, h1)

        # the device path: both kept in the head's own slots, the second draft's batch holds placeholders
        first_draft()
        assert head.keep_sampled_token(2, 0) and head.keep_output_h_row(2, 0)
        assert not head.keep_output_h_row(1, 1)  # not an output row: nothing kept
        assert head.take_tokens_from(head, [0]) and head.take_nextn_from(head, [0])
        d2_dev, h2_dev = second_draft(0, np.zeros(m.n_embd, dtype=np.float32))
        assert head.kept_tokens(1) == [d1]
        assert d2_dev == d2
        scale = float(np.abs(h2).max())
        assert float(np.abs(h2_dev - h2).max()) <= H_TOL * scale, "the fed draft's hidden row parts from the host's"

        # the placeholders alone (no feed): another hidden row, so the comparison above can fail
        first_draft()
        _, h2_none = second_draft(0, np.zeros(m.n_embd, dtype=np.float32))
        assert float(np.abs(h2_none - h2).max()) > 100 * H_TOL * scale
    finally:
        head.close()
        tgt.close()


@pytest.mark.parametrize("k", [2, 3])
def test_the_proposer_drafts_from_the_device_and_output_is_plain_decodings(
        tiny_gguf: Path, tiny_plain: Reference, monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    """With GGUF_MTP_SELF_FEED=1 each draft after a step's first is decoded from the one before on the device (the
    head's decodes take a row from its own slots) and every id is read back after the verify: the output is plain
    decoding's, and the drafts are the host path's (the same decodes, their inputs only taken on the device)."""
    real = Context.take_nextn_from
    runs = {}
    for on in (True, False):
        monkeypatch.setenv(patches.SELF_FEED_ENV, "1" if on else "0")
        monkeypatch.setenv(patches.CHAIN_ENV, "0")  # one decode a draft
        fed: list[int] = []

        def counting(self, src, rows, fed=fed):  # type: ignore[no-untyped-def]
            ok = real(self, src, rows)
            if ok and src is self and list(rows) != [-1]:  # a draft fed from the one before
                fed.append(len(rows))
            return ok

        monkeypatch.setattr(Context, "take_nextn_from", counting)
        try:
            with MTPSession(tiny_gguf, n_ctx=512, n_draft=k, stable_shapes=True) as s:
                assert s.engine.head.self_feeds is on
                assert ("drafts fed from the one before on the device" in s.describe_mtp()) is on  # run's MTP: line
                gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
                st = s.stats
        finally:
            monkeypatch.setattr(Context, "take_nextn_from", real)
        runs[on] = gens, st.drafted_at, st.accepted_at, len(fed)
    tiny_plain.check(runs[True][0], f"k={k}, drafts fed on the device")
    assert runs[True][1:3] == runs[False][1:3]
    assert runs[True][3] > 0 and runs[False][3] == 0 and sum(runs[True][2]) > 0


def test_a_keep_that_fails_goes_on_the_hosts_way(tiny_gguf: Path, tiny_plain: Reference,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the head cannot keep a draft's hidden row (every other step here), the drafts kept so far are read back
    and the rest drafted the host's way: the output is still plain decoding's and the drafts the host path's."""
    monkeypatch.setenv(patches.CHAIN_ENV, "0")
    real = Context.keep_output_h_row
    calls = [0]

    def flaky(self, i, slot=0):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return calls[0] % 2 == 0 and real(self, i, slot)

    runs = {}
    for on in (True, False):
        monkeypatch.setenv(patches.SELF_FEED_ENV, "1" if on else "0")
        monkeypatch.setattr(Context, "keep_output_h_row", flaky)
        try:
            with MTPSession(tiny_gguf, n_ctx=512, n_draft=3, stable_shapes=True) as s:
                gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
                st = s.stats
        finally:
            monkeypatch.setattr(Context, "keep_output_h_row", real)
        runs[on] = gens, st.drafted_at, st.accepted_at
    assert calls[0] > 4  # the fed path ran, and failed half the time
    tiny_plain.check(runs[True][0], "k=3, drafts fed on the device, every other keep refused")
    assert runs[True][1:] == runs[False][1:]
