"""The runtime's side of the device-draft-tokens patch: where the loaded library has it and the head drafts
greedily on the device, a step's last draft is not read back before the verify starts; the verify's row for it takes
the token id from the MTP context's sampler on the device (``Context.keep_sampled_token``, ``take_tokens_from``).
Output is plain decoding's and the drafts are the ones the host path reads; a verify that used the placeholder
instead would change the bonus token after a fully accepted step (checked: the test below with a verify that skips
the device copy fails). ``GGUF_MTP_DEVICE_TOKENS=0`` or ``--spec-draft-p-min`` keep the host path. Skipped where the
library lacks the patch (``LLAMA_CPP_LIB_PATH`` at a build with ``GGUF_MTP_PATCHES=proposed`` runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import MTPSession, llama, patches
from gguf_mtp.runtime.llama import Batch, Context
from tests.conftest import TINY_PROMPTS
from tests.lossless import Reference

pytestmark = pytest.mark.skipif("device-draft-tokens" not in patches.names(),
                                reason="the loaded libllama lacks the device-draft-tokens patch (proposed: "
                                       "LLAMA_CPP_LIB_PATH at a build with GGUF_MTP_PATCHES=proposed runs this)")


def answers(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch, on: bool, take=None, chain: bool = False,
            feed: bool = False, take_h=None, **kw):  # type: ignore[no-untyped-def]
    """Each prompt's answer, the acceptance by position, the rows each verify took on the device, and for each step
    that could, whether the head was decoded behind the verify (``feed``: GGUF_MTP_DEVICE_FEED=1). ``take`` and
    ``take_h`` stand in for the library's take_tokens_from and take_nextn_from."""
    from gguf_mtp.runtime.proposer import MtpProposer
    monkeypatch.setenv(patches.DEVICE_TOKENS_ENV, "1" if on or feed else "0")
    monkeypatch.setenv(patches.CHAIN_ENV, "1" if chain else "0")
    monkeypatch.setenv(patches.DEVICE_FEED_ENV, "1" if feed else "0")
    taken: list[int] = []
    fed: list[bool] = []
    heads: list[Context] = []  # the session's MTP context
    real, real_h, real_feed = Context.take_tokens_from, Context.take_nextn_from, MtpProposer.feed_from_device

    def counting(self, src, rows):  # type: ignore[no-untyped-def]
        ok = (take or real)(self, src, rows)
        if ok and heads and src is heads[0]:  # a verify's, from the head (not the head's, from the target)
            taken.append(len(rows))
        return ok

    monkeypatch.setattr(Context, "take_tokens_from", counting)
    monkeypatch.setattr(Context, "take_nextn_from", take_h or real_h)
    monkeypatch.setattr(MtpProposer, "feed_from_device", lambda self, *a: fed.append(real_feed(self, *a)) or fed[-1])
    try:
        with MTPSession(tiny_gguf, n_ctx=512, **kw) as s:
            assert s.device_tokens is (on or feed) and s.device_feed is feed and s.engine.mtp is not None
            heads.append(s.engine.mtp)
            gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
            st = s.stats
    finally:
        monkeypatch.setattr(Context, "take_tokens_from", real)
        monkeypatch.setattr(Context, "take_nextn_from", real_h)
        monkeypatch.setattr(MtpProposer, "feed_from_device", real_feed)
    return gens, st.drafted_at, st.accepted_at, taken, fed


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_last_draft_stays_on_the_device_and_output_is_plain_decodings(
        tiny_gguf: Path, tiny_plain: Reference, monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    on = answers(tiny_gguf, monkeypatch, True, n_draft=k)
    off = answers(tiny_gguf, monkeypatch, False, n_draft=k)
    tiny_plain.check(on[0], f"k={k}, the last draft on the device")
    tiny_plain.check(off[0], f"k={k}, every draft read back")
    assert set(on[3]) == {1} and not off[3]  # verifies took their last draft on the device
    # the same drafts: the same decodes, only read later
    assert (on[1], on[2]) == (off[1], off[2])
    assert sum(on[2]) > 0


def test_a_file_llama_cpps_converter_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on a file llama.cpp's own converter wrote (tests/data/ref, a synthetic Qwen3.5 MoE with its MTP
    layer): the drafts its random head gets right are enough to check the verify's ids (a placeholder read shows
    after a fully accepted step)."""
    ref = Path(__file__).parent / "data" / "ref" / "qwen35moe.gguf"
    prompts = ["Hello world", "The quick brown fox", "1 2 3 4 5"]
    action = lambda s: [s.generate(p, max_tokens=40) for p in prompts]  # noqa: E731
    plain = Reference(lambda: MTPSession(ref, mtp=False, n_ctx=256), action)
    runs = []
    monkeypatch.setenv(patches.DEVICE_FEED_ENV, "0")  # the verify's takes only (whatever the caller's environment)
    monkeypatch.setenv(patches.CHAIN_ENV, "0")  # one decode a draft, also where the library could chain them
    for on in (True, False):
        monkeypatch.setenv(patches.DEVICE_TOKENS_ENV, "1" if on else "0")
        taken: list[int] = []
        real = Context.take_tokens_from
        monkeypatch.setattr(Context, "take_tokens_from",
                            lambda self, src, rows: bool(taken.append(len(rows))) or real(self, src, rows))
        with MTPSession(ref, n_ctx=256, n_draft=2) as s:
            assert s.device_tokens is on
            gens = action(s)
            runs.append((gens, s.stats.drafted_at, s.stats.accepted_at, taken))
        monkeypatch.setattr(Context, "take_tokens_from", real)
    (gens_on, drafted_on, accepted_on, taken_on), (gens_off, drafted_off, accepted_off, taken_off) = runs
    assert [g.tokens for g in gens_on] == [g.tokens for g in gens_off]  # the same decodes, only read later
    plain.check(gens_on, "llama.cpp's converter's file, the last draft on the device")  # a verify's rows: tie rule
    assert (drafted_on, accepted_on) == (drafted_off, accepted_off) and accepted_on[1] > 0
    assert taken_on and set(taken_on) == {1} and not taken_off


def test_a_verify_that_reads_the_placeholder_is_caught(tiny_gguf: Path, tiny_plain: Reference,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test above guards against: a verify that claims the device copy but reads the batch's placeholder
    gets the bonus token after a fully accepted step wrong."""
    gens, _, accepted, taken, _ = answers(tiny_gguf, monkeypatch, True, take=lambda self, src, rows: True, n_draft=1)
    assert taken and sum(accepted) > 0
    with pytest.raises(AssertionError):
        tiny_plain.check(gens, "placeholder read")


def test_where_the_target_cannot_take_it_the_id_is_read_first(tiny_gguf: Path, tiny_plain: Reference,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    gens, _, accepted, taken, _ = answers(tiny_gguf, monkeypatch, True, take=lambda self, src, rows: False, n_draft=2)
    assert not taken and sum(accepted) > 0
    tiny_plain.check(gens, "target could not take it")


@pytest.mark.skipif("mtp-draft-chain" not in patches.names(),
                    reason="the loaded libllama lacks the mtp-draft-chain patch (proposed)")
@pytest.mark.parametrize("k", [2, 3])
def test_chained_drafts_all_stay_on_the_device(tiny_gguf: Path, tiny_plain: Reference, monkeypatch: pytest.MonkeyPatch,
                                               k: int) -> None:
    """With the proposed mtp-draft-chain patch a step's k drafts are one decode: the verify takes all k ids on the
    device, and the host waits once a step, for the verify."""
    on = answers(tiny_gguf, monkeypatch, True, chain=True, n_draft=k)
    off = answers(tiny_gguf, monkeypatch, False, chain=True, n_draft=k)
    tiny_plain.check(on[0], f"k={k}, chained drafts on the device")
    assert set(on[3]) == {k} and not off[3]
    assert (on[1], on[2]) == (off[1], off[2]) and sum(on[2]) > 0


def test_a_shadow_step_keeps_the_verify_on_the_device(tiny_gguf: Path, tiny_plain: Reference,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """auto's shadow step drafts one token more than it verifies. Its verify still takes its last verified draft on
    the device, as every other step's does: a verify that read it from the host instead is another graph, built
    (and on a GPU captured) again on the shadow step and again on the step after it, which cost the 35B-A3B shape
    6% at one fixed length under auto. Every third step a shadow step at k=2 (bound 4): the verify takes one row
    on the device on every step, the target builds no more graphs than at a fixed k=2, the shadow drafts are the
    host path's, and the output is plain decoding's."""
    from gguf_mtp.runtime.adaptive import DraftLength

    def shadowing(self: DraftLength, stats: object) -> int:
        self.shadow = self.n % 3 == 2
        self.k = 2
        return 2

    def run(on: bool, **kw: object) -> tuple[list, int, list[int], tuple[list[int], list[int]] | None]:
        monkeypatch.setenv(patches.DEVICE_TOKENS_ENV, "1" if on else "0")
        monkeypatch.setenv(patches.DEVICE_FEED_ENV, "0")
        monkeypatch.setenv(patches.CHAIN_ENV, "0")
        taken: list[int] = []
        real = Context.take_tokens_from
        monkeypatch.setattr(Context, "take_tokens_from",
                            lambda self, src, rows: bool(taken.append(len(rows))) or real(self, src, rows))
        try:
            with MTPSession(tiny_gguf, n_ctx=512, **kw) as s:  # type: ignore[arg-type]
                gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
                a = s.engine.adaptive
                shadows = (list(a._shadow_d), list(a._shadow_a)) if a is not None else None
                return gens, s.engine.tgt.graphs_reused(), taken, shadows
        finally:
            monkeypatch.setattr(Context, "take_tokens_from", real)

    fixed = run(True, n_draft=2)
    monkeypatch.setattr(DraftLength, "next", shadowing)
    on, off = run(True, n_draft=4, adaptive=True), run(False, n_draft=4, adaptive=True)
    tiny_plain.check(on[0], "shadow steps, the last verified draft on the device")
    tiny_plain.check(off[0], "shadow steps, every draft read back")
    assert on[3] is not None and on[3][0][2] > 0 and on[3] == off[3]  # shadow drafts at position 3, the same ones
    assert set(on[2]) == {1} and len(on[2]) == len(fixed[2]) and not off[2]
    assert on[1] == fixed[1], (on[1], fixed[1])  # target graphs reused as often as without shadows

def test_p_min_and_the_switch_keep_the_host_path(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=2, p_min=0.1) as s:
        assert not s.engine.head.defers  # p_min reads each draft's probability on the host
    monkeypatch.setenv(patches.DEVICE_TOKENS_ENV, "0")
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=2) as s:
        assert not s.device_tokens and not s.engine.head.defers


def test_a_refused_decode_clears_the_request(tiny_gguf: Path, tiny_plain: Reference) -> None:
    """``take_tokens_from`` applies to the next decode whatever it returns: a decode llama.cpp refuses at its first
    checks (a token id outside the vocabulary) must not leave the request for the decode after it, which would then
    read a prompt's first token from the device."""
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=2) as s:
        s.generate(TINY_PROMPTS[0], max_tokens=8)  # the MTP context keeps drafts: its slots exist
        tgt, mtp = s.engine.tgt, s.engine.mtp
        assert mtp is not None and tgt.take_tokens_from(mtp, [0])
        bad = Batch(4)
        bad.add(tgt.model.n_vocab + 5, 0, logits=True)
        with pytest.raises(GgufMtpError, match="llama_decode failed"):
            tgt.decode_batch(bad)
        gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
    tiny_plain.check(gens, "after a refused decode")


def close(a: list[int], b: list[int]) -> bool:
    """The same drafts up to rounding: the decode behind the verify has k + 1 rows where the host path's has as many
    as the step accepted, and a batch of other rows may take other kernels on some CPUs and break a near-tie in the
    head's argmax the other way (as tests/test_runtime.py's stable shapes allow): at most 2 apart at every position.
    A head cache or input left wrong moves these by far more."""
    return len(a) == len(b) and all(abs(x - y) <= 2 for x, y in zip(a, b))


needs_feed = pytest.mark.skipif(not llama.has_device_feed(),
                                reason="the loaded libllama lacks llama_keep_nextn_rows / llama_set_nextn_from")


@needs_feed
@pytest.mark.parametrize("kw", [{"n_draft": 1}, {"n_draft": 2}, {"n_draft": 3}, {"n_draft": 3, "adaptive": True}],
                         ids=["k=1", "k=2", "k=3", "auto"])
def test_the_first_draft_decoded_behind_the_verify(tiny_gguf: Path, tiny_plain: Reference,
                                                   monkeypatch: pytest.MonkeyPatch, kw: dict) -> None:
    """GGUF_MTP_DEVICE_FEED=1: the head's next decode goes right behind the verify, over every verify row with the
    target's pick and hidden row taken on the device; the drafts are the host path's (the same acceptance, which
    a decode over the placeholders would not give), the output plain decoding's, over several prompts in one
    session (a first draft no step takes leaves the head's cache as the host path leaves it)."""
    on = answers(tiny_gguf, monkeypatch, True, feed=True, **kw)
    off = answers(tiny_gguf, monkeypatch, True, **kw)
    tiny_plain.check(on[0], f"{kw}, the head fed on the device")
    if not kw.get("adaptive"):  # auto's lengths follow the steps' wall time, so only fixed lengths compare
        assert close(on[1], off[1]) and close(on[2], off[2]), (on[1:3], off[1:3])
    assert sum(on[2]) > 0
    assert sum(on[4]) >= len(on[4]) // 2 and not off[4]  # most steps fed the head behind the verify


@needs_feed
def test_a_head_fed_placeholders_is_caught(tiny_gguf: Path, tiny_plain: Reference,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """What the acceptance comparison above guards against: hidden rows not taken from the target (the batch's
    placeholders) give other drafts."""
    on = answers(tiny_gguf, monkeypatch, True, feed=True, take_h=lambda self, src, rows: True, n_draft=2)
    off = answers(tiny_gguf, monkeypatch, True, n_draft=2)
    tiny_plain.check(on[0], "placeholders fed")  # still lossless: the target verifies every draft
    assert not close(on[2], off[2]), (on[2], off[2])  # 37/17 against 55/32 accepted on the CPU this was written on


@needs_feed
def test_with_stable_shapes_the_fed_and_the_drafting_decodes_share_a_graph(tiny_gguf: Path, tiny_plain: Reference,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """At k=3 a step makes the fed decode (device inputs, k + 1 outputs) and two drafting decodes: padded to its
    shape, with an output a row and the target's slots read into no row, they are one graph for llama.cpp, which
    then builds as few as on the host path (8 here; without that, 142 in 280 decodes)."""
    monkeypatch.setenv(patches.DEVICE_TOKENS_ENV, "1")
    monkeypatch.setenv(patches.DEVICE_FEED_ENV, "1")
    monkeypatch.setenv(patches.CHAIN_ENV, "0")  # the feed is for one decode a draft
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=3, stable_shapes=True, timings=True) as s:
        assert s.device_feed
        gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
        bd = s.stats.breakdown
    tiny_plain.check(gens, "stable shapes, the head fed on the device")
    assert bd is not None and bd.decodes > 40
    assert bd.decodes - bd.reused <= 3 * len(TINY_PROMPTS), bd  # each prompt's, its first verify's and head decode's


@needs_feed
def test_an_answer_stopped_after_the_head_was_fed_leaves_the_next_one_lossless(
        tiny_gguf: Path, tiny_plain: Reference, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer stopped in a step that fed the head behind its verify and never committed (Ctrl-C, a client gone):
    the next answers are plain decoding's and draft exactly as a fresh session's (a head cache left with the fed
    rows would move the drafts, not the output, so the acceptance is what is compared)."""
    from gguf_mtp.runtime.speculative import Engine
    monkeypatch.setenv(patches.DEVICE_TOKENS_ENV, "1")
    monkeypatch.setenv(patches.DEVICE_FEED_ENV, "1")
    monkeypatch.setenv(patches.CHAIN_ENV, "0")  # the feed is for one decode a draft

    class Stop(Exception):
        pass

    real, calls = Engine.accept, []

    def stopping(self, row, drafts):  # type: ignore[no-untyped-def]
        calls.append(row)
        if len(calls) == 5:
            raise Stop
        return real(self, row, drafts)

    with MTPSession(tiny_gguf, n_ctx=512, n_draft=2) as s:
        assert s.device_feed
        monkeypatch.setattr(Engine, "accept", stopping)
        with pytest.raises(Stop):
            s.generate(TINY_PROMPTS[0], max_tokens=40)
        assert s.engine.head._fed is not None  # type: ignore[attr-defined]  # what the stop left
        monkeypatch.setattr(Engine, "accept", real)
        gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=2) as s:
        fresh = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
    tiny_plain.check(gens, "after an answer stopped with the head fed")
    assert [g.stats.accepted_at for g in gens] == [g.stats.accepted_at for g in fresh]
    assert sum(sum(g.stats.accepted_at) for g in gens) > 0
