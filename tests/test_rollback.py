"""Speculative decoding on qwen3next, whose recurrent state llama.cpp keeps no rollback snapshots of: rejected drafts
are undone from a saved copy of the state (runtime/rollback.py). Output must equal plain decoding token for token
for every pairing and draft length, every replay variant, a multi-turn chat and an edited chat history; the
choice of strategy follows what the context llama.cpp made reports, not the fact table alone.

Run against a libllama that does keep qwen3next snapshots (scripts/upstream-qwen3next-rollback.sh builds one),
the same tests expect native rollback wherever ``auto`` chooses."""

from __future__ import annotations

import pytest

import gguf_mtp.archs as arch_table
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import SamplerConfig
from gguf_mtp.runtime.config import DEFAULT_DRAFT
from gguf_mtp.runtime.arch_facts import ArchFacts
from gguf_mtp.runtime.llama import Context, Model, _ll
from tests.lossless import Reference, References

from .test_runtime import (
    CHAT_TURNS,
    LONG,
    NGL,
    ORACLE,
    PLAIN_THEN_MIXED,
    Pattern,
    check_plain_steps,
    completion,
    conversation,
    lossless_spec,
)
from .test_runtime import session as _session

SEEDED = SamplerConfig(temp=0.7, seed=7)


def session(model, mtp, **kw):  # type: ignore[no-untyped-def]
    """One thread: on a shared 2-core machine llama.cpp's spinning threads make a tiny model 10x slower."""
    kw.setdefault("n_threads", 1)
    return _session(model, mtp, **kw)


def plain(model, **kw):  # type: ignore[no-untyped-def]
    """Plain sessions as ``session(model, False, **kw)``: where a test's references are decoded."""
    return lambda: session(model, False, **kw)


@pytest.fixture(scope="module")
def q3n(converted) -> dict:
    """qwen3next pairings on the often-right, often-wrong oracle fixture (near-tie free on a GPU: see
    test_runtime.lossless_spec)."""
    spec = lossless_spec(converted, "qwen3next")
    return {
        "bundled": (converted("qwen3next", "bundled", **spec), "auto"),
        "self-contained": (converted("qwen3next", "trunk-only", **spec), converted("qwen3next", "mtp-only", **spec)),
        "head-only": (converted("qwen3next", "trunk-only", **spec), converted("qwen3next", "head-only", **spec)),
    }


@pytest.fixture(scope="module")
def native(q3n) -> bool:
    """Whether this libllama keeps qwen3next rollback snapshots (a patched build; stock 0.3.36 does not)."""
    with Model(q3n["bundled"][0]) as m, Context(m, n_ctx=64, n_rs_seq=2) as c:
        return c.n_rs_seq() == 2


def expected(native: bool, k: int, slots: bool = False) -> str:
    store = "state-device" if slots else "seq"
    return f"native (n_rs_seq={k})" if native else f"replay (store={store}, every=1, merge=8)"


@pytest.fixture(scope="module")
def reference(q3n) -> dict[str, Reference]:
    """Plain decoding on the bundled file (whose trunk is the trunk-only file's): what every pairing must match,
    up to a tie (tests/lossless.py)."""
    model, _ = q3n["bundled"]
    greedy, sampled, chat = References(plain(model), [completion(48), completion(48, SEEDED), conversation])
    return {"greedy": greedy, "sampled": sampled, "chat": chat}


@pytest.mark.parametrize("pairing", ["bundled", "self-contained", "head-only"])
def test_greedy_and_seeded_output_is_identical_to_plain_decoding(q3n, reference, native, pairing: str) -> None:
    model, mtp = q3n[pairing]
    for k in (1, 2, 3, 4):
        with session(model, mtp, n_draft=k) as s:
            assert s.pairing.source.value.startswith(pairing.split("-")[0])
            assert s.engine.rollback.name == expected(native, k)
            g = s.generate(LONG, max_tokens=48)
            reference["greedy"].check(g, f"qwen3next {pairing} greedy k={k}")
            assert 0 < g.stats.accepted < g.stats.drafted  # real accepts and rejects
            assert (g.stats.replayed_tokens > 0) != native
            if NGL:  # CUDA's MoE kernels round a batch differently: a sampled token can flip (test_runtime)
                continue
            sampled = s.generate(LONG, max_tokens=48, sampling=SEEDED)
            reference["sampled"].check(sampled, f"qwen3next {pairing} seeded k={k}",
                                       spec_session=lambda k=k: session(model, mtp, n_draft=k))


@pytest.mark.parametrize("spec", ["replay", "replay:store=state", "replay:every=3",
                                  "replay:store=state-device,every=2,merge=4"])
def test_every_replay_variant_is_lossless(q3n, reference, spec: str) -> None:
    model, mtp = q3n["bundled"]
    with session(model, mtp, n_draft=3, rollback=spec) as s:
        g = s.generate(LONG, max_tokens=48)
        reference["greedy"].check(g, f"rollback {spec} greedy")
        assert 0 < g.stats.accepted < g.stats.drafted
        reference["chat"].check(conversation(s), f"rollback {spec} chat")


@pytest.mark.parametrize("spec", ["auto", "replay:every=3", "replay:store=state-device,every=2,merge=4"])
def test_plain_steps_are_lossless_and_save_nothing(q3n, reference, native, spec: str) -> None:
    """Steps without drafts (``auto`` choosing plain decoding) between drafting steps on a target whose state is
    undone by replay: output identical to plain decoding, and a plain step saves no state (nothing of it can be
    rejected) beyond one save every Replay.PLAIN_EVERY steps, which keeps chat rewinds short."""
    from gguf_mtp.runtime.rollback import Replay

    model, mtp = q3n["bundled"]
    with session(model, mtp, n_draft=4, rollback=spec) as s:
        rb = s.engine.rollback
        saves: list[int] = []
        if not native:
            assert isinstance(rb, Replay)
            save = rb.store.save
            rb.store.save = lambda: saves.append(len(s.engine.tokens)) or save()  # type: ignore[method-assign]
        for sampling, want in ((None, reference["greedy"]), (SEEDED, reference["sampled"])):
            if NGL and sampling is not None:
                continue  # CUDA's MoE kernels: a sampled token can flip (test_runtime)
            s.engine.adaptive = pat = Pattern(PLAIN_THEN_MIXED)  # type: ignore[assignment]
            saves.clear()
            g = s.generate(LONG, max_tokens=48, sampling=sampling)
            want.check(g, f"rollback {spec} plain steps between drafts, {'seeded' if sampling else 'greedy'}")
            check_plain_steps(g, pat.given)
            if not native:  # the 36 plain steps at the start save once or twice (the first, then PLAIN_EVERY)
                n_draft_steps = len(pat.given) - pat.given.count(0)
                assert 1 <= len(saves) <= 2 + n_draft_steps + pat.given.count(0) // Replay.PLAIN_EVERY
                assert len([p for p in saves if p < g.stats.prompt_tokens - 1 + 36]) == 2  # at +0 and +32
        s.engine.adaptive = Pattern([0, 0, 3, 0, 1])  # type: ignore[assignment]
        reference["chat"].check(conversation(s), f"rollback {spec} plain steps between drafts, chat")
        s.engine.adaptive = None
        s.engine.k = 0  # every step plain: the rewinds between turns still work
        reference["chat"].check(conversation(s), f"rollback {spec} every step plain, chat")
    with session(model, mtp, n_draft=4, rollback=spec, adaptive=True) as s:
        g = s.generate(LONG, max_tokens=48)
        reference["greedy"].check(g, f"rollback {spec} adaptive")
        assert g.stats.plain_steps >= 3


@pytest.mark.parametrize("spec", ["auto", "replay"])
def test_multi_turn_chat_is_identical_to_plain(q3n, reference, spec: str) -> None:
    model, mtp = q3n["head-only"]
    with session(model, mtp, n_draft=3, rollback=spec) as s:
        reference["chat"].check(conversation(s), f"head-only rollback {spec} chat")
        assert s.stats.drafted > 0 and s.stats.accepted < s.stats.drafted


def test_an_edited_history_starts_over_and_matches_plain(q3n) -> None:
    """A chat whose earlier answer was edited shares only a prefix with what the target holds; the edits lie
    before the saved state, so the engine starts over, and must still match plain decoding."""
    model, mtp = q3n["bundled"]

    def edited(s) -> list[list[int]]:  # type: ignore[no-untyped-def]
        msgs = [{"role": "user", "content": CHAT_TURNS[0]}]
        first = s.chat(msgs, max_tokens=16)
        outs = [first.tokens]
        for cut in (len(first.text) - 1, 3):  # drop the answer's last character, then most of it
            msgs = [msgs[0], {"role": "assistant", "content": first.text[:cut]},
                    {"role": "user", "content": CHAT_TURNS[1]}]
            outs.append(s.chat(msgs, max_tokens=16).tokens)
        return outs

    ref = Reference(plain(model), edited)
    for spec in ("auto", "replay", "replay:every=4"):
        with session(model, mtp, n_draft=3, rollback=spec) as s:
            ref.check(edited(s), f"edited history, rollback {spec}")


@pytest.mark.parametrize("spec,branch", [("replay", "saved"), ("replay:merge=8", "pending")])
def test_a_rewind_inside_the_last_step_keeps_the_saved_state(q3n, spec: str, branch: str) -> None:
    """A chat turn that shares all but the last few held tokens rewinds without starting over: into tokens still
    waiting to be re-decoded (merge), or back to the saved state. The continuation must equal plain decoding."""
    model, _ = q3n["bundled"]
    with session(model, "auto", n_draft=3, rollback=spec) as s:
        e, rb = s.engine, s.engine.rollback
        prompt = s.model.tokenize(LONG)
        for n in range(20, 40):  # a generation that ends where this branch applies (deterministic per fixture)
            s.generate(prompt, max_tokens=n)
            held = len(e.tokens) - rb.pending
            if branch == "pending" and rb.pending:
                n_keep = len(e.tokens) - 1
                break
            if branch == "saved" and rb.snap is not None and rb.snap + 1 < held:
                n_keep = rb.snap + 1  # keeps a token the saved state lacks
                break
        else:
            pytest.fail(f"no generation ended with {branch} tokens to rewind into")
        edited = e.tokens[:n_keep] + [7, 8, 9]
        truncated = []
        orig = rb.truncate
        rb.truncate = lambda toks, k: truncated.append(orig(toks, k)) or truncated[-1]  # type: ignore[method-assign]
        got = s._run(edited, 16, None, None, reuse=True).tokens
        assert truncated == [True]  # no restart from scratch
    Reference(plain(model), lambda p: p.generate(edited, max_tokens=16)).check(got, f"rewind into {branch} ({spec})")


@pytest.mark.parametrize("spec", ["auto", "replay:store=state"])
def test_slots_stepped_together_roll_back_their_own_state(q3n, native, spec: str) -> None:
    """Server slots (one sequence each, stepped together by MultiStep): each keeps its own saved state and its
    own tokens to decode again, and each answer equals its plain decoding."""
    from gguf_mtp.runtime.multistep import MultiStep
    from gguf_mtp.runtime.sampling import Sampler

    model, mtp = q3n["bundled"]
    n = 32
    with session(model, mtp, n_draft=3, n_parallel=2, n_ctx=2048, rollback=spec) as s:
        if spec == "auto":  # slots keep their own KV streams: the copy goes through the state API
            assert [e.rollback.name for e in s.engines] == [expected(native, 3, slots=True)] * 2
        prompts = [s.model.tokenize(LONG), s.model.tokenize(CHAT_TURNS[1])]
        for e, p in zip(s.engines, prompts):
            e.reset()
            e.feed(p)
        multi, samplers = MultiStep(s.engines), [Sampler(SamplerConfig()) for _ in prompts]
        outs: list[list[int]] = [[], []]
        while min(map(len, outs)) < n:
            for o, emitted in zip(outs, multi.step(s.engines, samplers)):
                o.extend(emitted)
        st = [e.stats for e in s.engines]
        assert all(0 < x.accepted < x.drafted for x in st)
        assert native or all(x.replayed_tokens > 0 for x in st)
        # plain steps (auto's k=0) in one slot or both, next to drafting steps of the other
        pats = [Pattern([0, 0, 3, 0, 1, 0, 0, 0, 2]), Pattern([2, 0, 0, 3, 0])]  # lengths up to n_draft (3)
        for e, p, pat in zip(s.engines, prompts, pats):
            e.reset()
            e.feed(p)
            e.adaptive = pat  # type: ignore[assignment]
            e.stats = type(e.stats)(n_draft_max=e.n_draft_max)
        samplers = [Sampler(SamplerConfig()) for _ in prompts]
        mixed: list[list[int]] = [[], []]
        while min(map(len, mixed)) < n:
            for o, emitted in zip(mixed, multi.step(s.engines, samplers)):
                o.extend(emitted)
        for e, pat in zip(s.engines, pats):
            x = e.stats
            assert x.steps == len(pat.given) and x.plain_steps == pat.given.count(0) > 0
            assert sum(x.draft_lengths.values()) == x.drafted_at[0] == len(pat.given) - pat.given.count(0)
            assert 0 < x.accepted
        # steps where every slot decodes plainly make no MTP decode: the tokens wait in each engine's queue
        mtp = s.engines[0].mtp
        sizes: list[int] = []
        decode = mtp.decode_batch
        mtp.decode_batch = lambda b: sizes.append(b.n) or decode(b)  # type: ignore[method-assign]
        queued = [e.mbatch.n for e in s.engines]
        for e in s.engines:
            e.adaptive = Pattern([0])  # type: ignore[assignment]
        for _ in range(4):
            for o, emitted in zip(mixed, multi.step(s.engines, samplers)):
                o.extend(emitted)
        assert sizes == [] and [e.mbatch.n for e in s.engines] == [q + 4 for q in queued]
        for e in s.engines:
            e.adaptive = Pattern([2])  # type: ignore[assignment]
        for _ in range(3):
            for o, emitted in zip(mixed, multi.step(s.engines, samplers)):
                o.extend(emitted)
        # each queue once, in the first draft's decode (with each slot's pending token); two MTP decodes a step at
        # k=2, the verified tokens waiting in the queues for the next first draft (no feed decode of their own)
        assert len(sizes) == 6 and sizes[0] == sum(q + 4 + 1 for q in queued) and sizes[1::2] == [2] * 3, sizes
    # each slot's answer against its prompt's plain decoding, as far as the slot went (plain stops only at an
    # end of generation, which the slots' answers then hold too)
    refs = References(plain(model, n_ctx=2048), [lambda s, p=p: s.generate(p, max_tokens=n) for p in prompts])
    refs.check([o[:len(r.tokens)] for o, r in zip(outs, refs)], f"slots rollback {spec}")
    lengths = [len(o) for o in mixed]
    longer = References(plain(model, n_ctx=2048),
                        [lambda s, p=p, m=m: s.generate(p, max_tokens=m) for p, m in zip(prompts, lengths)])
    longer.check([o[:len(r.tokens)] for o, r in zip(mixed, longer)], f"slots rollback {spec}, plain steps mixed in")
    assert min(map(len, mixed)) >= n + 7


def test_auto_gives_slots_stepped_together_one_draft_length(q3n) -> None:
    """``auto`` in a batched step: one length for every slot (one batch shape), chosen from the pooled
    acceptance; each answer still equals its plain decoding."""
    from gguf_mtp.runtime.multistep import MultiStep
    from gguf_mtp.runtime.sampling import Sampler

    model, mtp = q3n["bundled"]
    n = 40
    with session(model, mtp, n_draft=3, n_parallel=2, n_ctx=2048, adaptive=True) as s:
        prompts = [s.model.tokenize(LONG), s.model.tokenize(CHAT_TURNS[1])]
        for e, p in zip(s.engines, prompts):
            e.reset()
            e.feed(p)
        multi, samplers = MultiStep(s.engines), [Sampler(SamplerConfig()) for _ in prompts]
        assert multi.adaptive is not None
        given: list[list[int]] = []
        for e in s.engines:  # what each slot drafted per step: the shared choice, as the step used it
            record = e.stats.record
            e.stats.record = lambda k, j, record=record, e=e: (given.append([id(e), k]), record(k, j))[1]  # type: ignore[method-assign]
        outs: list[list[int]] = [[], []]
        steps = 0
        while min(map(len, outs)) < n:
            before = len(given)
            for o, emitted in zip(outs, multi.step(s.engines, samplers)):
                o.extend(emitted)
            ks = {k for _, k in given[before:]}
            assert len(ks) <= 1, (steps, given[before:])  # both slots drafted the same length (or both none)
            steps += 1
        assert multi.adaptive.n == steps and len(multi.adaptive.times) >= 2  # it timed the shared steps
        assert all(e.adaptive.n == 0 for e in s.engines)  # the slots' own controllers are not used here
        assert sum(e.stats.plain_steps for e in s.engines) % 2 == 0  # plain steps are taken together too
    refs = References(plain(model, n_ctx=2048), [lambda s, p=p: s.generate(p, max_tokens=n) for p in prompts])
    refs.check([o[:n] for o in outs], "slots under auto")


@pytest.mark.parametrize("layout", ["bundled", "head-only"])
def test_a_head_that_is_always_right_is_always_accepted(converted, layout: str) -> None:
    kw = {"oracle_head": True, "trunk_scale": 0.0}
    model = converted("qwen3next", "bundled" if layout == "bundled" else "trunk-only", **kw)
    mtp = "auto" if layout == "bundled" else converted("qwen3next", "head-only", **kw)
    with session(model, mtp, n_draft=4) as s:
        g = s.generate("The quick brown fox", max_tokens=40)
        assert g.stats.acceptance_at == [1.0, 1.0, 1.0, 1.0]
        assert g.stats.replayed_tokens == 0


def test_the_strategy_comes_from_the_context_not_the_table(q3n, converted, native, monkeypatch) -> None:
    model, _ = q3n["bundled"]
    with session(model, "auto") as s:
        assert s.engine.rollback.name == expected(native, DEFAULT_DRAFT)
        assert _ll.llama_n_seq_max(s.engine.tgt.ptr) == (1 if native else 2)  # the copy lives in sequence 1
        noted = any("qwen3next: llama.cpp keeps no rollback snapshots" in n and "lossless" in n for n in s.notices)
        assert noted != native
    with session(converted("qwen35", "bundled", **ORACLE), "auto", n_draft=2) as s:
        assert s.engine.rollback.name == "native (n_rs_seq=2)" and s.engine.tgt.n_rs_seq() == 2
    with session(converted("glm4moe", "bundled", **ORACLE), "auto") as s:
        assert s.engine.rollback.name == "kv"
    # a table that is wrong either way: llama.cpp's answer wins (a future llama.cpp that snapshots qwen3next
    # is used natively; a qwen35 listed as snapshot-less still gets its snapshots, on one sequence)
    monkeypatch.setattr(arch_table, "ARCHS", {**arch_table.ARCHS,
                                              "qwen3next": ArchFacts(recurrent=True, rs_rollback=True),
                                              "qwen35": ArchFacts(recurrent=True, rs_rollback=False, why="x")})
    with session(model, "auto") as s:
        assert s.engine.rollback.name == expected(native, DEFAULT_DRAFT)
    with session(converted("qwen35", "bundled", **ORACLE), "auto", n_draft=2) as s:
        assert s.engine.rollback.name == "native (n_rs_seq=2)" and s.engine.tgt.n_rs_seq() == 2
        assert _ll.llama_n_seq_max(s.engine.tgt.ptr) == 1  # remade without the spare sequence


def test_bad_rollback_requests(q3n, converted, native) -> None:
    model, _ = q3n["bundled"]
    if not native:
        with pytest.raises(GgufMtpError, match="not in llm_arch_supports_rs_rollback"):
            session(model, "auto", rollback="native", require_mtp=True)
    with pytest.raises(GgufMtpError, match="unknown option 'every=x'"):
        session(model, "auto", rollback="replay:every=x", require_mtp=True)
    with pytest.raises(GgufMtpError, match="no recurrent state"):
        session(converted("glm4moe", "bundled", **ORACLE), "auto", rollback="replay", require_mtp=True)


def test_cli_says_how_it_rolls_back(q3n, native, tmp_path, capsys) -> None:
    import json

    from gguf_mtp_cli.main import main

    model, _ = q3n["bundled"]
    stats = tmp_path / "s.json"
    assert main(["run", str(model), "-p", "The quick", "-n", "12", "-t", "1", "-c", "512", "--stats-json",
                 str(stats)]) == 0
    err = capsys.readouterr().err
    d = json.loads(stats.read_text())
    assert d["rollback"] == expected(native, DEFAULT_DRAFT) and f"rollback {d['rollback']}" in err
    assert ("note: qwen3next: llama.cpp keeps no rollback snapshots" in err) != native
    assert "replayed_tokens" in d and "rollback_seconds" in d
