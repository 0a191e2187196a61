"""`gguf-mtp run` and MTPSession: lossless speculative decoding for every pairing, draft lengths 1-4, long
prompts and multi-turn chat; acceptance with a head whose answer is known; faults and fallbacks."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf_mtp_cli.main import main

from gguf_mtp.errors import CompatibilityError, FormatError, GgufMtpError
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.ggufio.writer import copy_tensor, write_gguf
from gguf_mtp.runtime import MTPSession, SamplerConfig
from gguf_mtp.runtime.config import AUTO_DRAFT_MAX
from gguf_mtp.runtime.pairing import HeadSource
from gguf_mtp.runtime.sampling import Sampler
from gguf_mtp.runtime.session import Generation, SessionConfig
from tests.lossless import Reference, References

from .conftest import NATIVE_ROLLBACK_FAMILIES

LONG = ("Multi-token prediction heads let a model guess the next few tokens at once. A draft is checked by the "
        "full model in one batch, and every token that matches is accepted for free. ") * 2
ORACLE = {"oracle_head": True, "trunk_scale": 0.5}  # often right, often wrong: exercises every rollback path


NGL = int(os.environ.get("GGUF_MTP_TEST_NGL", "0"))  # bench/gpu.sh runs these tests on a GPU
# GPU runs: the trunk's share of the logits is 10x smaller than in ORACLE, and rejects come from a noisy head
GPU_ORACLE = {"oracle_head": True, "trunk_scale": 0.05, "head_noise": 0.5}
GPU_MIN_MARGIN = 0.001  # ~4x the 0.00026 that the flip seen at trunk_scale 0.5 (gap 0.0026) scales down to
CHAT_TURNS = ["hello there, how is the weather", "tell me more about the fox", "and the lazy dog?"]


def session(model: Path, mtp, **kw) -> MTPSession:
    kw.setdefault("n_gpu_layers", NGL)
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("n_batch", 32)  # the long prompt spans several batches
    return MTPSession(model, mtp=mtp, **kw)


def plain(model: Path, **kw) -> Callable[[], MTPSession]:
    """Plain sessions on ``model`` as ``session(model, False, **kw)``: where a test's references are decoded."""
    return lambda: session(model, False, **kw)


def completion(max_tokens: int, sampling: SamplerConfig | None = None) -> Callable[[MTPSession], Generation]:
    """The action of a reference (tests/lossless.py): complete LONG."""
    return lambda s: s.generate(LONG, max_tokens=max_tokens, sampling=sampling)


def run_cli(args: list[str]) -> tuple[int, list[tuple[SessionConfig, Generation]]]:
    """``main(args)`` (in this process), and the session options and Generation of each completion it made."""
    made: list[tuple[SessionConfig, Generation]] = []
    generate = MTPSession.generate

    def spy(self: MTPSession, *a, **kw) -> Generation:  # type: ignore[no-untyped-def]
        g = generate(self, *a, **kw)
        made.append((self.cfg, g))
        return g

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MTPSession, "generate", spy)
        rc = main(args)
    return rc, made


def check_cli_completion(model: Path, out: str, made: list[tuple[SessionConfig, Generation]], max_tokens: int,
                         label: str) -> None:
    """``gguf-mtp run MODEL -p LONG -n max_tokens`` printed ``out`` and made the completion in ``made``
    (run_cli): it printed what it generated, and that equals plain decoding with the same options (--no-mtp)
    up to a tie (tests/lossless.py). Tokens decide, not the printed text: after a tie the text rightly differs
    from plain decoding's, and a text does not give its tokens back."""
    (cfg, g), = made
    assert out == g.text + "\n"
    Reference(lambda: MTPSession(model, mtp=False, config=cfg), completion(max_tokens)).check(g, label)


def conversation(s: MTPSession, max_tokens: int = 24) -> list[list[int]]:
    msgs, outs = [{"role": "system", "content": "You are terse."}], []
    for t in CHAT_TURNS:
        msgs.append({"role": "user", "content": t})
        g = s.chat(msgs, max_tokens=max_tokens)
        outs.append(g.tokens)
        msgs.append({"role": "assistant", "content": g.text})
    return outs


def greedy_paths(s: MTPSession, family: str) -> None:
    """The greedy decodes the lossless tests compare (the longest of each)."""
    s.generate(LONG, max_tokens=64)
    if family in ("qwen35moe", "qwen3next"):  # the families whose chats are compared (test_rollback: qwen3next)
        conversation(s)


def min_greedy_margin(model: Path, run: Callable[[MTPSession], object]) -> tuple[float, int]:
    """Plain-decode ``model`` through ``run`` and return the smallest gap between the two largest logits over
    every token the sampler picked, and at which pick (0-based, counted over the whole run)."""
    margins: list[float] = []
    with session(model, False) as s:
        generate = s.engine.generate

        def recording(sampler, *a, **kw):  # type: ignore[no-untyped-def]
            def seen(logits: np.ndarray) -> None:  # every row the sampler picks from, before the pick
                top2 = np.partition(logits, -2)[-2:]
                margins.append(float(top2[1] - top2[0]))

            sampler.on_logits = seen
            return generate(sampler, *a, **kw)

        s.engine.generate = recording  # type: ignore[method-assign]
        run(s)
    i = int(np.argmin(margins))
    return margins[i], i


def _rejects(model: Path, k: int) -> bool:
    with session(model, "auto", n_draft=k) as s:
        st = s.generate(LONG, max_tokens=48).stats
    return 0 < st.accepted < st.drafted


def lossless_spec(converted, family: str) -> dict:
    """The synthetic spec the lossless tests use for ``family``.

    Contract: "identical to plain decoding" as tests/lossless.py states it, on the CPU and on a GPU alike: equal
    token for token, except that at the first token where they part plain decoding's logits of the two tokens
    tie within a tolerance. llama.cpp computes a verify batch with other kernels than a single token (on some
    CPUs, and on every GPU, where it also rounds the recurrent Gated DeltaNet state of a batch differently), so
    a speculative run's logits differ from a plain run's by float noise, and a greedy pick whose two best logits
    are closer than that noise may flip without any bug. On the CPU the fixture is ORACLE, near-ties and all. On
    a GPU (GGUF_MTP_TEST_NGL set) the noise is larger; it enters through the trunk's layers, which the oracle
    fixture scales by ``trunk_scale``, while the logits' spread comes from the bigram path; so GPU runs use
    GPU_ORACLE (trunk_scale 0.05: ~10x less noise) and the first seed whose plain greedy paths
    (``greedy_paths``) keep every top-2 gap >= GPU_MIN_MARGIN, so that ties stay rare and most of each output
    is compared. Drafts are still often rejected (head_noise): seeds whose greedy path settles into a loop the
    head always gets right are skipped, so every accept and rollback path is still compared token for token."""
    if not NGL:
        return ORACLE
    seen = []
    for seed in range(16):
        spec = {**GPU_ORACLE, "seed": seed}
        model = converted(family, "bundled", **spec)
        margin, at = min_greedy_margin(model, lambda s: greedy_paths(s, family))
        seen.append(f"seed {seed}: {margin:.4f} at pick {at}")
        if margin < GPU_MIN_MARGIN:
            continue
        if all(_rejects(model, k) for k in (1, 2, 3, 4)):  # as test_greedy_and_seeded... asserts
            return spec
        seen[-1] += " (no rejects)"
    pytest.fail(f"{family}: no seed without a near-tie (< {GPU_MIN_MARGIN}) on the greedy paths: {seen}")


class _PerFamily(dict):
    """family -> {pairing: (model path, mtp argument)}, made on first use. A family whose fixture cannot be made
    (a GPU with near-ties on every seed) fails its own tests only, once, without holding up the others."""

    def __init__(self, converted) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.converted, self.failed = converted, {}

    def __missing__(self, family: str) -> dict:
        if family in self.failed:
            pytest.fail(self.failed[family])
        try:
            spec = lossless_spec(self.converted, family)
        except pytest.fail.Exception as e:
            self.failed[family] = str(e)
            raise
        c = self.converted
        self[family] = {
            "bundled": (c(family, "bundled", **spec), "auto"),
            "self-contained": (c(family, "trunk-only", **spec), c(family, "mtp-only", **spec)),
            "head-only": (c(family, "trunk-only", **spec), c(family, "head-only", **spec)),
        }
        return self[family]


@pytest.fixture(scope="module")
def pairings(converted):
    """family -> {pairing: (model path, mtp argument)} on the oracle fixture (near-tie free on a GPU)."""
    return _PerFamily(converted)


@pytest.mark.parametrize("family", NATIVE_ROLLBACK_FAMILIES)
@pytest.mark.parametrize("pairing", ["bundled", "self-contained", "head-only"])
def test_greedy_and_seeded_output_is_identical_to_plain_decoding(pairings, family: str, pairing: str) -> None:
    model, mtp = pairings[family][pairing]
    seeded = SamplerConfig(temp=0.7, seed=7)
    ref, ref_sampled = References(plain(model), [completion(48), completion(48, seeded)])
    for k in (1, 2, 3, 4):
        with session(model, mtp, n_draft=k) as s:
            assert s.pairing.source.value.startswith(pairing.split("-")[0])
            g = s.generate(LONG, max_tokens=48)
            ref.check(g, f"{family} {pairing} greedy k={k}")
            assert g.stats.drafted > 0 and 0 < g.stats.accepted < g.stats.drafted  # real accepts and rejects
            if NGL and family != "qwen35":
                # CUDA's MoE kernels (mul_mat_id) round a batch differently from a single token; at temp 0.7 a
                # token whose cumulative probability sits next to the sampler's draw can flip (seen on an
                # H200 from the first sampled token on). Greedy above stays exact on the tie-free fixture.
                continue
            ref_sampled.check(s.generate(LONG, max_tokens=48, sampling=seeded), f"{family} {pairing} seeded k={k}",
                              spec_session=lambda k=k: session(model, mtp, n_draft=k))


@pytest.mark.parametrize("pairing", ["bundled", "head-only"])
def test_multi_turn_chat_is_identical_to_plain(pairings, pairing: str) -> None:
    model, mtp = pairings["qwen35moe"][pairing]
    ref = Reference(plain(model), conversation)
    with session(model, mtp, n_draft=3) as s:
        ref.check(conversation(s), f"qwen35moe {pairing} chat")
        assert s.stats.drafted > 0


def test_min_greedy_margin_reports_the_smallest_top2_gap(pairings) -> None:
    model, _ = pairings["qwen35"]["bundled"]
    margin, at = min_greedy_margin(model, lambda s: s.generate(LONG, max_tokens=8))
    assert 0.0 <= margin and 0 <= at < 8
    first, _ = min_greedy_margin(model, lambda s: s.generate(LONG, max_tokens=at + 1))
    assert first == margin  # the same pick, reached again, has the same gap: it is the minimum of the prefix


@pytest.mark.parametrize("family", ["qwen35", "glm4moe"])  # M-RoPE and plain RoPE position rules
def test_prompt_window_is_lossless_and_feeds_only_the_window(pairings, family: str) -> None:
    model, mtp = pairings[family]["bundled"]
    ref, ref_chat = References(plain(model), [completion(32), conversation])
    for window in (1, 40):  # inside the last batch, and across a batch boundary (n_batch 32)
        with session(model, mtp, n_draft=3, prompt_window=window) as s:
            fed: list[tuple[int, int]] = []
            feed_mtp = s.engine.head.feed  # type: ignore[attr-defined]

            def spy(toks, pos0, rows, h_before, fed=fed, feed_mtp=feed_mtp):  # type: ignore[no-untyped-def]
                fed.append((pos0, len(toks)))
                return feed_mtp(toks, pos0, rows, h_before)

            s.engine.head.feed = spy  # type: ignore[attr-defined]
            g = s.generate(LONG, max_tokens=32)
            ref.check(g, f"{family} window={window}")
            n_prompt = g.stats.prompt_tokens
            prompt_feeds = [f for f in fed if f[0] < n_prompt - 1]
            assert prompt_feeds[0][0] == n_prompt - 1 - window  # the last prompt token is fed with the first step
            assert sum(n for _, n in prompt_feeds) == window
            assert g.stats.drafted > 0 and g.stats.accepted > 0
            # later turns: the cache is dropped before a gap
            ref_chat.check(conversation(s), f"{family} window={window} chat")


@pytest.mark.parametrize("family", NATIVE_ROLLBACK_FAMILIES)
@pytest.mark.parametrize("layout", ["bundled", "head-only"])
def test_a_head_that_is_always_right_is_always_accepted(converted, family: str, layout: str) -> None:
    """With a trunk that is a bigram model and a head computing the same function, every draft must be
    accepted: this fails if the converter maps the head wrongly (concat order, norms, layer index)."""
    kw = {"oracle_head": True, "trunk_scale": 0.0}
    model = converted(family, "bundled" if layout == "bundled" else "trunk-only", **kw)
    mtp = "auto" if layout == "bundled" else converted(family, "head-only", **kw)
    with session(model, mtp, n_draft=4) as s:
        g = s.generate("The quick brown fox", max_tokens=40)
        assert g.stats.acceptance_at == [1.0, 1.0, 1.0, 1.0]
        assert g.stats.mean_accepted_length > 4.0 * 0.9


def test_adaptive_draft_length(pairings) -> None:
    model, mtp = pairings["qwen35"]["bundled"]
    seeded = SamplerConfig(temp=0.7, seed=7)
    ref, ref_sampled = References(plain(model), [completion(64), completion(64, seeded)])
    with session(model, mtp, n_draft=4, adaptive=True) as s:
        g = s.generate(LONG, max_tokens=64)
        ref.check(g, "adaptive greedy")
        st = g.stats
        assert st.steps >= 9  # the exploration blocks: 4, 1, then 0 (plain steps)
        assert st.plain_steps >= 3 and sum(st.draft_lengths.values()) + st.plain_steps == st.steps
        assert st.draft_lengths.get(4, 0) >= 3 and st.draft_lengths.get(1, 0) >= 3
        n = st.steps - st.plain_steps  # tokens per drafting step (the last step's may be cut at max_tokens)
        assert 1 + (st.accepted - 4) / n <= st.mean_accepted_length <= 1 + st.accepted / n
        ref_sampled.check(s.generate(LONG, max_tokens=64, sampling=seeded), "adaptive seeded")


class Pattern:
    """A stand-in for DraftLength that gives the engine a fixed sequence of draft lengths (0: a plain step)."""

    shadow = False  # DraftLength's shadow drafts: off unless a test turns them on

    def __init__(self, ks: list[int]) -> None:
        self.ks, self.i, self.given = ks, 0, []  # type: ignore[var-annotated]

    def next(self, stats) -> int:  # type: ignore[no-untyped-def]
        k = self.ks[self.i % len(self.ks)]
        self.i += 1
        self.given.append(k)
        return k

    @property
    def k(self) -> int:  # DraftLength's current choice (the head's decodes are padded to it): the last given
        return self.given[-1] if self.given else 0

    def observe(self, k: int, seconds: float) -> None:
        assert k == self.given[-1]  # the length it was given, not the number drafted

    def wants_prompt(self) -> bool:  # no checks of the head on the prompt
        return False


# a run of plain steps longer than the MTP queue (n_batch 32), then plain steps between drafts of every length
PLAIN_THEN_MIXED = [0] * 36 + [3, 0, 2, 2, 0, 0, 1, 4, 0, 1, 0, 0, 0, 2]


def check_plain_steps(g, given: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Stats of a generation whose engine was given the draft lengths ``given``: plain steps counted as such."""
    st = g.stats
    assert st.steps == len(given) and st.plain_steps == given.count(0)
    assert sum(st.draft_lengths.values()) == len(given) - given.count(0)
    assert (st.drafted_at or [0])[0] == len(given) - given.count(0)  # a plain step is no rejected first draft
    cut = st.plain_steps + sum(st.draft_lengths.values()) + st.accepted - st.emitted  # tokens past max_tokens
    assert 0 <= cut < 4 and (cut == 0 or given[-1] > 0)
    if st.plain_steps < st.steps:  # tokens per drafting step
        assert st.mean_accepted_length == pytest.approx(1 + (st.accepted - cut) / (st.steps - st.plain_steps))
    d = st.to_dict()
    assert d["plain_steps"] == st.plain_steps and d["mean_accepted_length"] == round(st.mean_accepted_length, 3)


@pytest.mark.parametrize("family", ["qwen35", "glm4moe"])
def test_plain_steps_are_lossless(pairings, family: str) -> None:
    """Steps with no drafts (what ``auto`` runs when plain decoding is fastest), alone and between drafting
    steps: output identical to plain decoding, greedy and seeded; the head is fed every position meanwhile, so
    the drafts after them are as good as ever."""
    model, mtp = pairings[family]["bundled"]
    seeded = SamplerConfig(temp=0.7, seed=7)
    ref, ref_sampled, ref_chat = References(plain(model), [completion(80), completion(80, seeded), conversation])
    with session(model, mtp, n_draft=4) as s:
        s.engine.k = 0  # a fixed length of 0: every step plain
        g = s.generate(LONG, max_tokens=80)
        ref.check(g, f"{family} every step plain")
        assert g.stats.drafted == 0 and g.stats.plain_steps == g.stats.steps == len(g.tokens)
        assert g.stats.mean_accepted_length == 1.0
    with session(model, mtp, n_draft=4) as s:
        for sampling, want in ((None, ref), (seeded, ref_sampled)):
            s.engine.adaptive = pat = Pattern(PLAIN_THEN_MIXED)  # type: ignore[assignment]
            g = s.generate(LONG, max_tokens=80, sampling=sampling)
            want.check(g, f"{family} plain steps between drafts, {'seeded' if sampling else 'greedy'}")
            check_plain_steps(g, pat.given)
        s.engine.adaptive = Pattern([0, 0, 3, 0, 1])  # type: ignore[assignment]
        ref_chat.check(conversation(s), f"{family} plain steps between drafts, chat")
        assert 0 < s.stats.accepted < s.stats.drafted and s.stats.plain_steps > 36  # real accepts and rejects
    # a head that is always right stays always right after plain steps: it was fed every position meanwhile
    with session(pairings.converted(family, "bundled", oracle_head=True, trunk_scale=0.0), "auto", n_draft=4) as s:
        s.engine.adaptive = pat = Pattern([0, 0, 0, 4, 0, 1, 0, 0, 2, 3])  # type: ignore[assignment]
        g = s.generate(LONG, max_tokens=80)
        check_plain_steps(g, pat.given)
        assert g.stats.acceptance_at == [1.0, 1.0, 1.0, 1.0] and g.stats.drafted_at[0] >= 3


class ShadowPattern(Pattern):
    """Pattern, with a shadow draft (one more than verified, adaptive.py) on the steps listed."""

    def __init__(self, ks: list[int], shadows: list[bool]) -> None:
        super().__init__(ks)
        self.shadows, self.results = shadows, []  # type: ignore[var-annotated]

    def next(self, stats) -> int:  # type: ignore[no-untyped-def]
        self.shadow = self.shadows[self.i % len(self.shadows)]
        return super().next(stats)

    def shadow_result(self, pos: int, accepted: bool) -> None:
        self.results.append((pos, accepted))


@pytest.mark.parametrize("family", ["qwen35", "glm4moe"])
def test_shadow_drafts_are_lossless_and_measure_one_position_deeper(pairings, family: str) -> None:
    """auto's shadow drafts: k+1 drafted, k verified. Output stays identical to plain decoding (greedy and
    seeded), the verified counts are those of k, and the extra draft's result is exact: with a head that is
    always right it is always accepted; with a poor one, only after k accepted drafts, as a verify would say."""
    model, mtp = pairings[family]["bundled"]
    seeded = SamplerConfig(temp=0.7, seed=7)
    ref, ref_sampled = References(plain(model), [completion(60), completion(60, seeded)])
    ks, sh = [0, 1, 2, 0, 3, 1], [True, True, False, False, True, True]
    with session(model, mtp, n_draft=4) as s:
        for sampling, want in ((None, ref), (seeded, ref_sampled)):
            s.engine.adaptive = pat = ShadowPattern(ks, sh)  # type: ignore[assignment]
            s.engine.stats = st = type(s.engine.stats)(n_draft_max=4)
            verified: list[tuple[int, int]] = []  # (k, accepted) of each step that verified drafts
            st.record = lambda k, j, rec=st.record, verified=verified: (  # type: ignore[method-assign]
                verified.append((k, j)), rec(k, j))[1]
            g = s.generate(LONG, max_tokens=60, sampling=sampling)
            want.check(g, f"{family} shadow drafts, {'seeded' if sampling else 'greedy'}")
            check_plain_steps(g, pat.given)
            n_shadow = sum(sh[i % len(sh)] for i in range(len(pat.given)))
            assert len(pat.results) == n_shadow and [p for p, _ in pat.results] == [
                k for i, k in enumerate(pat.given) if sh[i % len(sh)]]
            # exact: a shadow draft counts as accepted only where every verified draft of its step was
            shadow_steps = [i for i, k in enumerate(pat.given) if k and sh[i % len(sh)]]
            by_step = dict(zip([i for i, k in enumerate(pat.given) if k], verified))
            res = iter(r for (p, r) in pat.results if p)
            for i in shadow_steps:
                k, j = by_step[i]
                assert not next(res) or j == k, (i, k, j)
            if sampling is None:  # real accepts and rejects (sampled at 0.7, this head is rarely right)
                assert 0 < sum(a for _, a in pat.results) < len(pat.results)
            assert g.stats.drafted == sum(pat.given)  # shadow drafts are not counted as drafted
    with session(pairings.converted(family, "bundled", oracle_head=True, trunk_scale=0.0), "auto", n_draft=4) as s:
        s.engine.adaptive = pat = ShadowPattern(ks, sh)  # type: ignore[assignment]
        g = s.generate(LONG, max_tokens=60)
        assert pat.results and all(a for _, a in pat.results)
        assert g.stats.acceptance_at == [1.0, 1.0, 1.0]


def test_p_min_stops_drafts(pairings) -> None:
    model, mtp = pairings["qwen35"]["bundled"]
    with session(model, mtp, n_draft=4, p_min=0.999) as s:
        g = s.generate(LONG, max_tokens=24)
        assert g.stats.drafted < 4 * g.stats.steps


def test_sidecar_found_beside_the_model(converted, tmp_path: Path) -> None:
    trunk = tmp_path / "m-Q8_0.gguf"
    trunk.write_bytes(converted("qwen35", "trunk-only", **ORACLE).read_bytes())
    with session(trunk, "auto") as s:
        assert s.pairing.source == HeadSource.NONE and "no MTP head" in s.notices[0]
        assert s.describe_mtp() == "none"
    (tmp_path / "m-Q8_0-MTP.gguf").write_bytes(converted("qwen35", "head-only", **ORACLE).read_bytes())
    with session(trunk, "auto") as s:
        assert s.pairing.source == HeadSource.HEAD_ONLY and s.mtp_enabled


def test_faults(converted, tmp_path: Path) -> None:
    trunk = converted("qwen35", "trunk-only", **ORACLE)
    with pytest.raises(FormatError, match="no such file"):
        session(trunk, tmp_path / "missing-MTP.gguf")
    bad = tmp_path / "bad-MTP.gguf"
    bad.write_bytes(converted("qwen35", "mtp-only", **ORACLE).read_bytes()[:-64])
    with pytest.raises(FormatError, match="truncated"):
        session(trunk, bad)
    with pytest.raises(CompatibilityError, match="does not fit"):
        session(trunk, converted("qwen35", "mtp-only", hidden=128))
    alone = tmp_path / "alone" / "m.gguf"
    alone.parent.mkdir()
    alone.write_bytes(trunk.read_bytes())
    with pytest.raises(GgufMtpError, match="require-mtp: m.gguf has no MTP head"):
        session(alone, "auto", require_mtp=True)
    with session(trunk, False, n_ctx=64) as s, pytest.raises(GgufMtpError, match="context is full"):
        s.generate(LONG * 3, max_tokens=8)


def test_a_head_that_fails_to_load_falls_back(converted, tmp_path: Path) -> None:
    """A sidecar that passes the checks but that llama.cpp rejects (a tensor missing) -> plain decoding."""
    side = GGUFModel(converted("qwen35", "mtp-only", **ORACLE))
    broken = tmp_path / "broken-MTP.gguf"
    tensors = [copy_tensor(t) for n, t in side.tensors.items() if n != "blk.4.attn_k_norm.weight"]
    write_gguf(broken, side.model_kvs(), tensors)
    with session(converted("qwen35", "trunk-only", **ORACLE), broken) as s:
        assert not s.mtp_enabled and "failed to load" in s.notices[0]
        assert s.generate("hello", max_tokens=4).tokens
    with pytest.raises(GgufMtpError, match="attn_k_norm"):
        session(converted("qwen35", "trunk-only", **ORACLE), broken, require_mtp=True)


def test_interrupt_keeps_statistics(pairings) -> None:
    model, mtp = pairings["qwen35"]["bundled"]
    with session(model, mtp) as s:
        seen = []

        def on_text(t: str) -> None:
            seen.append(t)
            if len(seen) == 5:
                raise KeyboardInterrupt

        g = s.generate(LONG, max_tokens=40, on_text=on_text)
        assert g.stopped == "interrupted" and g.stats.emitted >= 5
        assert s.generate(LONG, max_tokens=8).tokens  # the session still works


def test_cli_completion_chat_and_stats(pairings, tmp_path: Path, capsys, monkeypatch) -> None:
    model, mtp = pairings["qwen35"]["head-only"]
    stats = tmp_path / "s.json"
    rc = main(["run", str(model), "--mtp", str(mtp), "-p", "The quick", "-n", "12", "--spec-draft-n-max", "2",
               "--stats-json", str(stats), "-c", "512", "--spec-draft-prompt-window", "2"])
    assert rc == 0
    import json

    d = json.loads(stats.read_text())
    assert d["mtp"] == "head-only sidecar" and d["n_draft_max"] == 2 and len(d["acceptance_at"]) == 2
    err = capsys.readouterr().err
    # the sidecar's name and the draft length, as MTPSession.describe_mtp gives them to run and serve
    assert f"MTP: head-only sidecar {mtp.name}, draft 2" in err and "tok/step" in err
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n/reset\nagain\n"))  # then EOF
    assert main(["run", str(model), "--mtp", str(mtp), "-n", "6", "-c", "512"]) == 0
    err = capsys.readouterr().err
    assert err.count("tok/step") >= 2 and "session:" in err
    assert main(["run", str(model), "--no-mtp", "--require-mtp", "-p", "x"]) == 2
    assert main(["run", str(model), "--spec-draft-n-max", "0", "-p", "x"]) == 2


def test_cli_auto_counts_plain_steps_apart(pairings, tmp_path: Path, capsys) -> None:
    """`run --spec-draft-n-max auto --stats-json`: the plain steps auto explores (and on this 2-core CPU, where a
    tiny model's drafting steps cost more than they bring, settles on) are counted apart from drafting steps."""
    import json

    model, mtp = pairings["qwen35"]["bundled"]
    stats = tmp_path / "s.json"
    rc, made = run_cli(["run", str(model), "-p", LONG, "-n", "40", "--spec-draft-n-max", "auto", "--stats-json",
                        str(stats), "-c", "512", "-t", "1"])
    assert rc == 0
    out, err = capsys.readouterr()
    check_cli_completion(model, out, made, 40, "run --spec-draft-n-max auto")
    d = json.loads(stats.read_text())
    assert d["n_draft_max"] == AUTO_DRAFT_MAX and len(d["acceptance_at"]) == AUTO_DRAFT_MAX  # k_max explored first
    assert d["plain_steps"] >= 3 and d["plain_steps"] + sum(d["draft_lengths"].values()) == d["steps"]
    assert "0" not in d["draft_lengths"] and d["drafted_at"][0] == sum(d["draft_lengths"].values())
    assert f"{d['plain_steps']} of {d['steps']} steps plain" in err and "tok/step" in err
    # the answer's token ids hashed, to compare runs token for token (little-endian int32, as documented)
    (_, g), = made
    import hashlib
    assert d["tokens_sha256"] == g.tokens_sha256() == hashlib.sha256(
        b"".join(t.to_bytes(4, "little", signed=True) for t in g.tokens)).hexdigest()
    assert len(g.tokens) == 40 and g.tokens_sha256() != g.__class__(g.text, g.tokens[:-1], g.stats,
                                                                      g.stopped).tokens_sha256()


@pytest.mark.parametrize("k", [1, 3])
def test_the_feed_rides_with_the_first_draft(converted, k: int) -> None:
    """One step = one verify + k MTP decodes (one, where the library chains a step's drafts: the proposed
    mtp-draft-chain patch): the verified tokens go to the MTP context in the same batch as the next first draft
    (no decode of their own), and the step's phases add up."""
    kw = {"oracle_head": True, "trunk_scale": 0.0}  # always right: every step drafts k
    with session(converted("qwen35", "bundled", **kw), "auto", n_draft=k, timings=True) as s:
        g = s.generate("The quick brown fox", max_tokens=40)
        mtp_decodes = 1 if s.chained else k
    bd = g.stats.breakdown
    assert bd is not None and g.stats.steps > 5
    assert bd.decodes == g.stats.steps * (1 + mtp_decodes)
    assert len(bd.draft) == mtp_decodes and all(x > 0 for x in bd.draft) and bd.verify > 0
    assert bd.python >= 0 and bd.verify + sum(bd.draft) + bd.read <= bd.steps
    per = g.stats.to_dict()["breakdown"]
    assert per["decodes"] == 1 + mtp_decodes and len(per["draft_ms"]) == mtp_decodes


def test_sampling_runs_in_the_decode_graph_and_the_host_path_agrees(pairings) -> None:
    """Device (backend) sampling for the target and the drafts; the host fallback gives the same greedy
    tokens, and with either path seeded speculative decoding equals plain decoding."""
    model, mtp = pairings["qwen35"]["bundled"]
    seeded = SamplerConfig(temp=0.9, seed=3)
    out = {}
    for device in (True, False):
        # (a Reference decodes again with an observer on the logits, on the host, only where a comparison differs)
        actions = [completion(32), completion(32, seeded)]
        with session(model, False, device_sampling=device) as p:
            outs = [a(p) for a in actions]
            assert p.engine.tsampler.on_device is device
        ref, ref_sampled = References(plain(model, device_sampling=device), actions, outs)
        with session(model, mtp, n_draft=3, device_sampling=device, timings=True) as s:
            g = s.generate(LONG, max_tokens=32)
            assert s.engine.tsampler.on_device is device and s.engine.msampler.on_device is device
            ref.check(g, f"device_sampling={device} greedy")
            assert 0 < g.stats.accepted < g.stats.drafted
            ref_sampled.check(s.generate(LONG, max_tokens=32, sampling=seeded), f"device_sampling={device} seeded",
                              spec_session=lambda d=device: session(model, mtp, n_draft=3, device_sampling=d))
            n_vocab = s.model.n_vocab
            per_step = g.stats.to_dict()["breakdown"]["d2h_bytes"]
        out[device] = (ref.tokens, per_step)
    assert out[True][0] == out[False][0]
    assert out[False][1] - out[True][1] > 2 * n_vocab * 4  # no vocabulary-sized rows come back from the device
    with session(model, mtp, n_draft=2) as s:  # an observer of the logits forces the host path
        seen: list[int] = []
        sampler = Sampler(SamplerConfig(), on_logits=lambda x: seen.append(int(np.argmax(x))))
        s.engine.reset()
        s.engine.feed(s.model.tokenize(LONG))
        toks = list(s.engine.generate(sampler, 8, s.model.is_eog))
        assert not s.engine.tsampler.on_device and len(toks) == 8 and seen[:8] == toks


@pytest.mark.parametrize("family", ["qwen35", "glm4moe"])
def test_stable_shapes_are_lossless_and_let_llama_cpp_reuse_graphs(pairings, family: str) -> None:
    """Every MTP decode padded to n_draft + 1 tokens (re-decoding the cache's tail from the same inputs):
    output unchanged, acceptance unchanged on the CPU (bit-exact there), and llama.cpp reuses the compute
    graph of nearly every decode of a step instead of rebuilding it."""
    model, mtp = pairings[family]["bundled"]
    ref, ref_chat = References(plain(model), [completion(48), conversation])
    runs = {}
    for stable in (False, True):
        with session(model, mtp, n_draft=3, stable_shapes=stable, timings=True) as s:
            g = s.generate(LONG, max_tokens=48)
            ref.check(g, f"{family} stable_shapes={stable}")
            ref_chat.check(conversation(s), f"{family} stable_shapes={stable} chat")
            runs[stable] = g.stats
    off, on = runs[False], runs[True]
    # The padding re-decodes the same inputs, so the drafts are the same up to rounding: a batch of more rows may
    # take other kernels on some CPUs and break a near-tie in the head's argmax the other way (tests/lossless.py).
    # A cache the padding left wrong would move these by far more than the two drafts a position allowed here.
    assert len(on.accepted_at) == len(off.accepted_at)
    for a, b in ((on.accepted_at, off.accepted_at), (on.drafted_at, off.drafted_at)):
        assert all(abs(x - y) <= 2 for x, y in zip(a, b)), (on, off)
    assert off.breakdown is not None and on.breakdown is not None and on.steps >= 3
    assert on.breakdown.decodes == off.breakdown.decodes
    # graph builds over the whole answer: with one shape only the first verify and the first head decode build
    # theirs; in the shapes they come, the merged batch and the first single draft rebuild the head's graph
    builds_on, builds_off = (st.breakdown.decodes - st.breakdown.reused for st in (on, off))
    assert builds_on <= 2 < builds_off


def test_stable_shapes_follow_the_draft_length_auto_chose(pairings) -> None:
    """Under auto (n_draft 4) the head's decodes are padded to the current choice + 1, not to 5: a choice of
    k=1 decodes 2-row batches (5 rows cost 0.3 ms a step at k=1 on an H100). One shape per choice, so llama.cpp
    still reuses its graphs; output unchanged."""
    model, mtp = pairings["qwen35"]["bundled"]
    ref = Reference(plain(model), completion(48))
    rows: list[int] = []
    with session(model, mtp, n_draft=4, stable_shapes=True, timings=True, adaptive=True) as s:
        s.engine.adaptive = pat = Pattern([1])  # type: ignore[assignment]
        e, in_step = s.engine, [False]
        decode, step = e.mtp.decode_batch, e.step
        e.mtp.decode_batch = lambda b: (in_step[0] and rows.append(b.n), decode(b))[1]  # type: ignore[method-assign]

        def stepping(*a, **kw):  # type: ignore[no-untyped-def]
            in_step[0] = True
            try:
                return step(*a, **kw)
            finally:
                in_step[0] = False

        e.step = stepping  # type: ignore[method-assign]
        g = s.generate(LONG, max_tokens=48)
        ref.check(g, "stable shapes under auto")
        assert set(pat.given) == {1}
        assert g.stats.breakdown is not None
        builds = g.stats.breakdown.decodes - g.stats.breakdown.reused
    # every head decode of a step has 2 rows: (id_last, accepted draft), or padding to them
    assert len(rows) >= 10 and set(rows) == {2}, rows
    assert builds <= 2


def test_a_model_closed_before_its_context_is_freed_after_it(converted) -> None:
    """Issue 23: objects collected together (a cycle, the interpreter's exit) are finalised in no set order; a
    model freed before its context left the context's free reading freed memory (bench processes crashed at exit on
    CUDA). The model now waits for its last context."""
    from gguf_mtp.runtime import llama

    m = llama.Model(converted("qwen35", "bundled"))
    a, b = llama.Context(m, n_ctx=256), llama.Context(m, n_ctx=256)
    m.close()
    assert m.ptr  # still there: two contexts use it
    a.close()
    assert m.ptr
    b.close()
    assert not m.ptr  # freed with the last one
    m2 = llama.Model(converted("qwen35", "bundled"))
    m2.close()
    assert not m2.ptr  # no context: freed at once


LOG_AT_EXIT = """
import ctypes
from pathlib import Path
import gguf_mtp.runtime.llama as L
L._init()
libc = ctypes.CDLL(None)
libc.strdup.restype = ctypes.c_void_p
line = libc.strdup(b"a log line after the interpreter is gone\\n")  # C memory: outlives the interpreter
base = ctypes.CDLL(str(Path(L._ll.llama_cpp._lib._name).with_name("libggml-base.so.0")))
# ggml logs once the interpreter has finished, as a back-end's teardown does (CUDA's, at the process's exit)
libc.on_exit(ctypes.cast(base.ggml_log_internal, ctypes.c_void_p), ctypes.c_void_p(line))
print("results written", flush=True)
"""


def test_a_llama_cpp_log_line_at_exit_does_not_crash_the_process() -> None:
    """Issue 23 (bench processes died by SIGSEGV on CUDA after writing their results): a line ggml logs after the
    interpreter has gone went to our Python log callback, freed by then. At exit the log goes back to llama.cpp's
    own (stderr)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", LOG_AT_EXIT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout == "results written\n" and "a log line after the interpreter is gone" in r.stderr, r.stderr


def test_set_draft_changes_the_length_for_the_next_turn(converted) -> None:
    """MTPSession.set_draft (bench compares draft lengths on one load): the new length is used, clamped to the
    session's own, output stays plain decoding's, and the session's totals carry on."""
    model = converted("qwen35", "bundled", **ORACLE)
    ref = Reference(plain(model), completion(24))  # the verifies of 4, 2 and 1-3 rows round apart: a tie rule
    with session(model, "auto", n_draft=3) as s:
        base = s.generate(LONG, max_tokens=24)
        assert max(base.stats.draft_lengths) == 3
        s.set_draft(1)
        one = s.generate(LONG, max_tokens=24)
        assert s.engine.n_draft_max == 1 and set(one.stats.draft_lengths) == {1}
        s.set_draft(99)  # above the session's length: clamped to it
        assert s.engine.n_draft_max == 3
        s.set_draft(2, adaptive=True)
        auto = s.generate(LONG, max_tokens=24)
        assert s.engine.adaptive is not None
        assert max(auto.stats.draft_lengths, default=0) <= 2
        assert s.stats.emitted == len(base.tokens) + len(one.tokens) + len(auto.tokens)
    for g, label in ((base, "k=3"), (one, "set_draft(1)"), (auto, "set_draft(2, adaptive)")):
        ref.check(g, label)


@pytest.mark.parametrize("stable", [False, True])
def test_a_slot_stepping_alone_decodes_as_a_conversation(pairings, stable: bool) -> None:
    """One step, written once: the server's batched step (MultiStep) of one sequence is Engine.step, the same tokens
    from the same target and MTP decodes, batch for batch (its queue rides with the first draft, no feed decode of
    its own; stable shapes pad the head's decodes as a conversation's)."""
    from gguf_mtp.runtime.multistep import MultiStep

    model, mtp = pairings["qwen35"]["bundled"]
    runs = []
    for batched in (False, True):
        with session(model, mtp, n_draft=3, n_parallel=2, n_ctx=2048, stable_shapes=stable) as s:
            e = s.engines[1]  # a slot other than sequence 0
            e.reset()
            e.feed(s.model.tokenize(LONG))
            sizes: list[tuple[str, int]] = []
            for ctx, name in ((e.tgt, "target"), (e.mtp, "mtp")):
                assert ctx is not None
                decode = ctx.decode_batch
                ctx.decode_batch = (  # type: ignore[method-assign]
                    lambda b, decode=decode, name=name, sizes=sizes: (sizes.append((name, b.n)), decode(b))[1])
            multi, sampler = MultiStep(s.engines), Sampler(SamplerConfig())
            out: list[int] = []
            while len(out) < 32:
                out += multi.step([e], [sampler])[0] if batched else e.step(sampler)
            assert e.stats.drafted > e.stats.accepted > 0
            runs.append((out, sizes))
            per_step = 1 if s.chained else 3  # MTP decodes a step: one where the library chains the drafts
    assert runs[0] == runs[1]
    assert (sum(1 for name, _ in runs[0][1] if name == "mtp")
            == per_step * sum(1 for name, _ in runs[0][1] if name == "target"))
