"""The sampling options llama.cpp users set every day (--min-p, the repetition penalties, --ignore-eos) work, and
speculative decoding stays lossless with them (on the shipped trained model, examples/tiny-qwen35-mtp)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_mtp import convert
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import MTPSession, SamplerConfig
from gguf_mtp.runtime.options import check_sampling
from tests.lossless import Reference

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
#: a prompt the tiny model (trained on Python source) continues with repeats
PROMPT = "def __init__(self, name):\n"
N = 48


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(TINY, outfile=tmp_path_factory.mktemp("tiny") / "tiny.gguf", progress=False).path


def _session(model: Path, mtp: bool, k: int = 3) -> MTPSession:
    return MTPSession(model, mtp="auto" if mtp else False, n_draft=k, n_ctx=512)


def _gen(cfg: SamplerConfig, n: int = N):  # type: ignore[no-untyped-def]
    return lambda s: s.generate(PROMPT, max_tokens=n, sampling=cfg)


def test_greedy_is_unchanged_by_min_p(model: Path) -> None:
    with _session(model, False) as s:
        base = s.generate(PROMPT, max_tokens=N).tokens
        assert s.generate(PROMPT, max_tokens=N, sampling=SamplerConfig(min_p=0.5)).tokens == base


def test_repeat_penalty_changes_greedy_output(model: Path) -> None:
    """Applied, not ignored: a strong penalty on a model that repeats itself changes what greedy picks."""
    with _session(model, False) as s:
        base = s.generate(PROMPT, max_tokens=N).tokens
        assert len(set(base)) < len(base), "the reference output must repeat a token for this test to mean anything"
        pen = s.generate(PROMPT, max_tokens=N, sampling=SamplerConfig(repeat_penalty=1.8)).tokens
        assert pen != base


def test_penalties_count_the_prompt(model: Path) -> None:
    """As llama-completion and llama-server do, the prompt's tokens are in the penalties' history: the first
    pick, before any token was emitted, already avoids a token the prompt repeats."""
    prompt = "import os\nimport sys\nimport"
    with _session(model, False) as s:
        first = s.generate(prompt, max_tokens=1).tokens
        pen = s.generate(prompt, max_tokens=1, sampling=SamplerConfig(repeat_penalty=5.0)).tokens
    assert pen != first


def test_a_window_longer_than_the_context_is_the_whole_context(model: Path) -> None:
    """--repeat-last-n above the context (up to 2^31-1, as a request may ask) means the whole context, as -1."""
    with _session(model, False) as s:
        whole = s.generate(PROMPT, max_tokens=N, sampling=SamplerConfig(repeat_penalty=1.3, repeat_last_n=-1))
        huge = s.generate(PROMPT, max_tokens=N, sampling=SamplerConfig(repeat_penalty=1.3, repeat_last_n=2**31 - 1))
    assert huge.tokens == whole.tokens


def test_min_p_changes_seeded_sampling(model: Path) -> None:
    hot = SamplerConfig(temp=1.5, top_k=0, top_p=1.0, seed=7)
    with _session(model, False) as s:
        free = s.generate(PROMPT, max_tokens=N, sampling=hot).tokens
        cut = s.generate(PROMPT, max_tokens=N, sampling=SamplerConfig(temp=1.5, top_k=0, top_p=1.0, seed=7,
                                                                      min_p=0.3)).tokens
    assert free != cut
    with _session(model, False) as s:
        typ = s.generate(PROMPT, max_tokens=N, sampling=SamplerConfig(temp=1.5, top_k=0, top_p=1.0, seed=7,
                                                                      typical_p=0.3)).tokens
    assert typ != free


CONFIGS: dict[str, dict] = {
    "min_p": dict(temp=0.9, top_k=0, top_p=1.0, min_p=0.1, seed=3),
    "repeat_penalty": dict(temp=0.8, seed=11, repeat_penalty=1.3, repeat_last_n=16),
    "all": dict(temp=1.1, seed=5, min_p=0.05, repeat_penalty=1.2, presence_penalty=0.3, frequency_penalty=0.2,
                repeat_last_n=-1),
    "greedy+penalties": dict(repeat_penalty=1.5, frequency_penalty=0.5),
    "typical": dict(temp=1.0, seed=9, typical_p=0.6, min_p=0.02),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_speculative_equals_plain(model: Path, name: str) -> None:
    """Seeded sampling with min-p and the penalties: speculative output equals plain decoding at k = 1..3."""
    cfg = SamplerConfig(**CONFIGS[name])
    ref = Reference(lambda: _session(model, False), _gen(cfg))
    for k in (1, 2, 3):
        with _session(model, True, k) as s:
            assert s.mtp_enabled
            ref.check(_gen(cfg)(s), f"{name} k={k}", spec_session=lambda k=k: _session(model, True, k))


def test_speculative_chat_with_penalties_equals_plain(model: Path) -> None:
    """Two chat turns (the second reuses the first's context): the history is the whole conversation."""
    cfg = SamplerConfig(temp=0.7, seed=2, repeat_penalty=1.4, presence_penalty=0.2)

    def talk(s: MTPSession) -> list:
        msgs = [{"role": "user", "content": "def f(x):"}]
        a = s.chat(msgs, max_tokens=24, sampling=cfg)
        msgs += [{"role": "assistant", "content": a.text}, {"role": "user", "content": "class A:"}]
        return [a, s.chat(msgs, max_tokens=24, sampling=cfg)]

    ref = Reference(lambda: _session(model, False), talk)
    with _session(model, True, 2) as s:
        ref.check(talk(s), "chat k=2")


def test_ignore_eos_biases_every_eog_token(model: Path) -> None:
    """--ignore-eos puts llama.cpp's logit bias (-inf on each end-of-generation token) in the target's chain."""
    from gguf_mtp.runtime.sampling import chain_names

    with _session(model, True, 2) as s:
        g = s.generate(PROMPT, max_tokens=N, sampling=SamplerConfig(ignore_eos=True))
        names = chain_names(s.engine.tsampler.chain)
    assert g.stopped == "length" and len(g.tokens) == N
    assert names == ["logit-bias", "greedy"], names


@pytest.mark.parametrize("field,value", [("min_p", 1.5), ("min_p", -0.1), ("typical_p", 1.1), ("repeat_penalty", 0.0),
                                         ("repeat_penalty", float("nan")), ("repeat_last_n", -2),
                                         ("presence_penalty", float("inf")), ("frequency_penalty", "x")])
def test_bad_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(GgufMtpError, match="--" + field.replace("_", "-").replace("typical-p", "typical")):
        check_sampling(SamplerConfig(**{field: value}))  # type: ignore[arg-type]


def test_server_slots_stepped_together_with_penalties_equal_plain(model: Path) -> None:
    """The server's path (MultiStep: every slot's verify rows in one batch): each slot's chain keeps its own
    history, and each answer equals its plain decoding."""
    from gguf_mtp.runtime.multistep import MultiStep
    from gguf_mtp.runtime.sampling import Sampler

    cfgs = [SamplerConfig(temp=0.8, seed=4, repeat_penalty=1.3, min_p=0.05),
            SamplerConfig(repeat_penalty=1.6, presence_penalty=0.4)]
    prompts = [PROMPT, "import os\nimport sys\n"]
    with MTPSession(model, n_draft=3, n_parallel=2, n_ctx=1024) as s:
        toks = [s.model.tokenize(p) for p in prompts]
        for e, t in zip(s.engines, toks):
            e.reset()
            e.feed(t)
        multi, samplers = MultiStep(s.engines), [Sampler(c) for c in cfgs]
        outs: list[list[int]] = [[], []]
        while min(map(len, outs)) < 32:
            for o, emitted in zip(outs, multi.step(s.engines, samplers)):
                o.extend(emitted)
        # as a generation: up to 32 tokens, ending at an end-of-generation token
        outs = [o[: next((j + 1 for j, x in enumerate(o) if s.model.is_eog(x)), 32)][:32] for o in outs]
    for t, c, o, i in zip(toks, cfgs, outs, range(2)):
        ref = Reference(lambda: _session(model, False), lambda p, t=t, c=c: p.generate(list(t), max_tokens=32,
                                                                                         sampling=c))
        ref.check(o, f"slot {i}")


@pytest.mark.parametrize("extra", [dict(repeat_penalty=1e-46), dict(repeat_penalty=3e38),
                                   dict(temp=0.5, repeat_penalty=1e-30, min_p=1.0),
                                   dict(frequency_penalty=-3e38), dict(temp=2.0, presence_penalty=3e38),
                                   dict(temp=1.0, min_p=1.0, ignore_eos=True, repeat_last_n=1),
                                   dict(presence_penalty=5e-80), dict(repeat_penalty=1 + 1e-12, temp=0.5)])
def test_extreme_values_never_end_the_process(model: Path, extra: dict) -> None:
    """Values at the edges of what check_sampling lets through (infinite logits after a penalty, min-p 1):
    llama.cpp's chain still picks a token, in plain and speculative decoding (an abort would end the test run)."""
    cfg = SamplerConfig(**extra)
    for mtp in (False, True):
        with _session(model, mtp, 2) as s:
            g = s.generate("import os\nimport sys\nimport", max_tokens=12, sampling=cfg)
            assert g.tokens and all(0 <= t < s.model.n_vocab for t in g.tokens)


def test_a_greedy_chain_in_the_graph_is_read_as_llama_sampler_sample_picks(model: Path) -> None:
    """``ContextSampler.read_only``: a greedy chain that runs in the decode graph is read with
    llama_get_sampled_token_ith, without llama_sampler_sample's extra synchronisations, debug line and accept; every
    row's token must be the one llama_sampler_sample returns (and the argmax of that row's logits where the chain is
    not attached). A chain that is not greedy, or runs on the host, keeps llama_sampler_sample."""
    import llama_cpp as ll

    from gguf_mtp.runtime.llama import Batch, Context, Model
    from gguf_mtp.runtime.sampling import ContextSampler

    m = Model(model)
    try:
        toks = m.tokenize("def fibonacci(n):\n    a, b = 0, 1\n", add_special=True)
        ctx = Context(m, n_ctx=256, n_batch=64, n_outputs_max=64)
        host = Context(m, n_ctx=256, n_batch=64, n_outputs_max=64)
        smp, ref = ContextSampler(ctx), ContextSampler(host)
        try:
            smp.use(None)
            ref.use(None, device=False)
            assert ref.read_only is False
            if not smp.on_device:
                pytest.skip("this build cannot run the sampler inside the graph")
            assert smp.read_only is True
            picks = []
            for c in (ctx, host):
                b = Batch(64)
                b.fill(toks, 0)
                b.logits_np[:len(toks)] = 1
                c.decode_batch(b)
            for i in range(len(toks)):
                fast = smp.sample(i)
                slow = int(ll.llama_sampler_sample(smp.chain, ctx.ptr, i))
                picks.append(fast)
                assert fast == slow, i
            # the host context's logits: the same argmax (a tie within float noise allowed to differ)
            for i, tok in enumerate(picks):
                row = host.logits_view(i)
                assert row[tok] >= row.max() - 1e-3 * max(1.0, abs(float(row.max()))), i
            assert len(set(picks)) > 1  # the rows differ: a test on one repeated token proves little
            smp.use(SamplerConfig(temp=0.8, seed=1))
            assert smp.read_only is False  # a sampled chain accepts its tokens through llama_sampler_sample
        finally:
            smp.close()
            ref.close()
            ctx.close()
            host.close()
    finally:
        m.close()
