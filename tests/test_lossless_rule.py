"""The rule every identical-output test applies (tests/lossless.py): a difference from plain decoding passes only
as a tie within tolerance at its first token. Here it must fail for real bugs: a rollback that leaves rejected
drafts in the target's memory, and a token the speculative run skips."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import MTPSession, SamplerConfig
from tests.lossless import TIES, Reference, References, first_difference, flatten, judge, tolerance

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
REF = json.loads((TINY / "reference.json").read_text())
PROMPTS = REF["prompts"][:4]


def test_the_tie_rule() -> None:
    row = np.array([10.0, 9.99, 3.0, -20.0], dtype=np.float32)
    assert tolerance(row) == pytest.approx(0.1)  # 0.5% of the largest magnitude
    assert tolerance(np.zeros(3, dtype=np.float32)) == pytest.approx(1e-3)  # the floor
    assert judge(row, 0, 1)[0] and not judge(row, 0, 2)[0]
    assert judge(row, 0, 1)[1] == pytest.approx(0.01, abs=1e-5)
    assert first_difference([1, 2, 3], [1, 2, 3]) is None and first_difference([1, 2], [1, 5]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert flatten([[1, 2], [3]]) == [1, 2, 3]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(TINY, outfile=tmp_path_factory.mktemp("rule") / "tiny.gguf", progress=False).path


@pytest.fixture(scope="module")
def plain(model: Path) -> References:
    actions = [lambda s, p=p: s.generate(p, max_tokens=REF["new_tokens"]) for p in PROMPTS]
    return References(lambda: MTPSession(model, mtp=False, n_ctx=512), actions)


def speculative(model: Path, sabotage=None) -> list:  # type: ignore[no-untyped-def]
    with MTPSession(model, n_draft=3, n_ctx=512) as s:
        if sabotage:
            sabotage(s.engine)
        gens = [s.generate(p, max_tokens=REF["new_tokens"]) for p in PROMPTS]
        assert s.stats.drafted > 0
    return gens


def test_a_correct_run_passes(model: Path, plain: References) -> None:
    with MTPSession(model, n_draft=3, n_ctx=512) as s:
        gens = [s.generate(p, max_tokens=REF["new_tokens"]) for p in PROMPTS]
        assert 0 < s.stats.accepted < s.stats.drafted  # accepts and rejections: the rollback was exercised
    plain.check(gens, "correct")


def test_a_rollback_that_keeps_rejected_drafts_fails(model: Path) -> None:
    """Rejected drafts left in the target's memory: llama.cpp refuses the next decode (positions no longer
    follow on), so this bug cannot pass silently either."""
    def keep_rejected(engine) -> None:  # type: ignore[no-untyped-def]
        engine.rollback.settle = lambda tokens, n_end: (0.0, 0)  # no seq_rm

    with pytest.raises(GgufMtpError, match="llama_decode failed"):
        speculative(model, keep_rejected)


def test_a_verify_that_accepts_every_draft_fails(model: Path, plain: References) -> None:
    def accept_all(engine) -> None:  # type: ignore[no-untyped-def]
        step, accept, sample = engine.step, engine.accept, engine.tsampler.sample
        pending: list[int] = []

        def stepping():  # type: ignore[no-untyped-def]
            pending.clear()
            return step()

        def accepting(row, drafts):  # type: ignore[no-untyped-def]
            pending[:] = drafts  # the drafts as the target checks them (a last draft left on the device: read)
            return accept(row, drafts)

        def sampling(i: int) -> int:  # the target's pick is replaced by the draft it should have been checked against
            t = sample(i)
            return pending.pop(0) if pending else t

        engine.step, engine.accept, engine.tsampler.sample = stepping, accepting, sampling

    n = len(TIES)
    with pytest.raises(AssertionError, match="not rounding, a bug"):
        plain.check(speculative(model, accept_all), "every draft accepted")
    assert len(TIES) == n


def test_a_skipped_token_fails(model: Path, plain: References) -> None:
    def skip_one(engine) -> None:  # type: ignore[no-untyped-def]
        step, done = engine.step, []

        def skipping():  # type: ignore[no-untyped-def]
            out = step()
            if len(out) > 1 and not done:  # the second token of the first step that accepted a draft goes missing
                done.append(out.pop(1))
            return out

        engine.step = skipping

    with pytest.raises(AssertionError, match="not rounding, a bug"):
        plain.check(speculative(model, skip_one), "skipped token")


def test_a_sampled_difference_passes_only_as_rounding(model: Path) -> None:
    """Seeded sampling: a difference that is no tie in the logits passes only when the speculative run's row equals
    plain decoding's within the tolerance (a draw on a boundary of the cumulative distribution); a skipped token
    shifts the rows by a position, far beyond rounding, and fails."""
    seeded = SamplerConfig(temp=0.9, top_k=0, top_p=1.0, seed=3)
    action = lambda s: s.generate(PROMPTS[0], max_tokens=REF["new_tokens"], sampling=seeded)  # noqa: E731
    ref = Reference(lambda: MTPSession(model, mtp=False, n_ctx=512), action)

    def skip_one(engine) -> None:  # type: ignore[no-untyped-def]
        step, done = engine.step, []

        def skipping():  # type: ignore[no-untyped-def]
            out = step()
            if len(out) > 1 and not done:
                done.append(out.pop(1))
            return out

        engine.step = skipping

    def sabotaged() -> MTPSession:
        s = MTPSession(model, n_draft=3, n_ctx=512)
        skip_one(s.engine)
        return s

    with sabotaged() as s:
        got = action(s)
    with pytest.raises(AssertionError, match="not rounding, a bug"):
        ref.check(got, "sampled, skipped token", spec_session=sabotaged)
