"""The sampled-ids-only patch: where the loaded library has it and its switch (GGUF_MTP_SAMPLED_IDS_ONLY, read at every
decode) is on, a row whose token the backend sampler picked copies that id alone to the host: its sampled logits stay
on the device (their getter gives NULL), where stock llama.cpp copies the whole vocabulary row (the greedy sampler
passes its input on as the row's sampled logits). The ids must be the same both ways, and each must be one of the maxima
of the logits row the stock path copies, which ties the check to the real numbers. Rows sampled on the host keep
their raw logits, and speculative decoding stays lossless with the switch on. Skipped where the library lacks the
patch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gguf_mtp.runtime import MTPSession, patches
from gguf_mtp.runtime.llama import Batch, Context, Model, _ll  # the runtime first: it loads llama.cpp (or says why not)
from gguf_mtp.runtime.sampling import context_sampler
from tests.conftest import TINY_PROMPTS
from tests.lossless import Reference

SWITCH = "GGUF_MTP_SAMPLED_IDS_ONLY"

pytestmark = pytest.mark.skipif("sampled-ids-only" not in patches.names(),
                                reason="the loaded libllama lacks the sampled-ids-only patch (a stock wheel)")


def decode_rows(ctx: Context, toks: list[int]) -> None:
    """``toks`` from position 0, every row an output (the cache emptied first)."""
    ctx.seq_rm(0)
    b = Batch(len(toks))
    for i, t in enumerate(toks):
        b.add(t, i, logits=True)
    ctx.decode_batch(b)
    ctx.synchronize()


def test_a_device_sampled_row_copies_its_id_alone(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = Model(tiny_gguf)
    toks = m.tokenize("def add(a, b):\n    return a + b\n")[:6]
    ctx = Context(m, n_ctx=64, n_batch=8, n_outputs_max=8)  # a device sampler's rows a decode: all of them
    try:
        smp = context_sampler(ctx)
        smp.use(None)  # greedy, in the graph
        assert smp.on_device
        monkeypatch.setenv(SWITCH, "0")  # the stock path first: its counts must not outlive the switch
        decode_rows(ctx, toks)
        ids0 = [_ll.llama_get_sampled_token_ith(ctx.ptr, i) for i in range(len(toks))]
        rows = []
        for i in range(len(toks)):
            ptr = _ll.llama_get_sampled_logits_ith(ctx.ptr, i)
            assert ptr, f"row {i}: the stock path copies the sampled logits"
            rows.append(np.ctypeslib.as_array(ptr, shape=(m.n_vocab,)).copy())
        # each id is one of its row's maxima (greedy; a tie may go to any of them)
        for i, (t, r) in enumerate(zip(ids0, rows)):
            top = np.flatnonzero(r == r.max())
            assert t in top, (i, t, top[:4])
        monkeypatch.setenv(SWITCH, "1")
        decode_rows(ctx, toks)
        ids1 = [_ll.llama_get_sampled_token_ith(ctx.ptr, i) for i in range(len(toks))]
        assert ids1 == ids0
        assert all(not _ll.llama_get_sampled_logits_ith(ctx.ptr, i) for i in range(len(toks)))
        assert all(not _ll.llama_get_sampled_probs_ith(ctx.ptr, i) for i in range(len(toks)))
        monkeypatch.setenv(SWITCH, "0")  # and back: read at every decode
        decode_rows(ctx, toks)
        assert all(_ll.llama_get_sampled_logits_ith(ctx.ptr, i) for i in range(len(toks)))
    finally:
        ctx.close()


def test_rows_sampled_on_the_host_keep_their_logits(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = Model(tiny_gguf)
    toks = m.tokenize("The quick brown fox")[:4]
    monkeypatch.setenv(SWITCH, "1")
    ctx = Context(m, n_ctx=64, n_batch=8)
    try:
        decode_rows(ctx, toks)  # no sampler attached: llama.cpp copies the raw logits
        for i in range(len(toks)):
            assert np.isfinite(ctx.logits_view(i)).all()
    finally:
        ctx.close()


def test_the_runtime_switches_it_on_and_stays_lossless(tiny_gguf: Path, tiny_plain: Reference,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # enable_switches sets every loaded patch's switch the caller did not name, this one included
    monkeypatch.delenv(SWITCH, raising=False)
    assert SWITCH in patches.enable_switches()
    assert patches.switch_value(SWITCH) == 1
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=2) as s:
        gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
        assert s.stats.drafted_at and sum(s.stats.accepted_at) > 0  # the drafts ran, on ids alone
    tiny_plain.check(gens, "sampled ids only, k=2")
