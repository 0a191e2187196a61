"""Warm-up at load (``--warmup``, issue 24): every decode shape a first answer uses runs once inside load time,
as llama.cpp's tools do, and leaves nothing behind: no tokens, no statistics, auto's controller as it was, and
output as without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf_mtp_cli.main import main

from gguf_mtp import convert
from gguf_mtp.runtime import MTPSession, SamplerConfig
from gguf_mtp.runtime.config import AUTO_DRAFT_MAX
from gguf_mtp.runtime.llama import Context
from tests.lossless import Reference

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
PROMPT = json.loads((TINY / "reference.json").read_text())["prompts"][0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(TINY, outfile=tmp_path_factory.mktemp("warm") / "tiny.gguf", progress=False).path


def opened(model: Path, monkeypatch: pytest.MonkeyPatch, **kw) -> tuple[MTPSession, list[tuple[bool, int, int]]]:
    """A session and the decodes made while it opened: (on the MTP context, tokens, outputs)."""
    seen: list[tuple[bool, int, int]] = []
    real = Context.decode_batch

    def recording(self, batch):  # type: ignore[no-untyped-def]
        seen.append((batch.embd is not None, batch.n, batch.n_outputs))  # the head's batches carry hidden rows
        return real(self, batch)

    monkeypatch.setattr(Context, "decode_batch", recording)
    s = MTPSession(model, n_ctx=512, **kw)
    monkeypatch.setattr(Context, "decode_batch", real)
    return s, seen


@pytest.mark.parametrize("k,auto", [(3, False), (4, True)])
def test_warm_up_runs_every_shape_and_leaves_nothing(model: Path, monkeypatch: pytest.MonkeyPatch, k: int,
                                                     auto: bool) -> None:
    s, seen = opened(model, monkeypatch, n_draft=k, adaptive=auto, warmup=True)
    with s:
        verifies = {n for mtp, n, out in seen if not mtp and out == n}  # a step: every row is sampled
        assert verifies == ({1} | (set(range(2, k + 2)) if auto else {k + 1})), seen
        assert any(mtp and out for mtp, n, out in seen)  # the head drafted
        e = s.engine
        assert e.tokens == [] and e.id_last is None and e.tgt.pos_max(0) < 0 and e.mtp.pos_max(0) < 0
        assert s.stats.steps == e.stats.steps == e.stats.drafted == e.stats.prompt_tokens == 0
        assert e.k == k and (e.adaptive is not None) == auto
        if auto:  # the controller has seen no step, only the times of every length, each past its untimed steps
            a, fresh = e.adaptive, type(e.adaptive)(e.n_draft_max)
            # three timed steps a length, after three untimed (the head's graph settles a step after the target's)
            assert sorted(a.times) == list(range(k + 1)) and all(len(v) == 3 for v in a.times.values())
            assert a._explored == set(range(k + 1)) and a.n == 0 and fresh._block and not a._block
            # no opening block at k_max: a typical head's acceptance until the answer's own drafts outweigh it
            assert a._typical == [True] * k and a._prior_d == [a.TYPICAL_DRAFTS] * k
            seeded = ("times", "_timed_at", "_explored", "switch_s", "_block", "_typical", "_prior_d")
            left = {n: v for n, v in vars(a).items() if n not in seeded}
            assert left == {n: v for n, v in vars(fresh).items() if n not in seeded}
            assert len(a.switch_s) == 1 and a.switch_s[0] >= 0  # a change of length, timed after every shape ran


def test_a_warm_auto_answer_explores_no_length(model: Path) -> None:
    """With every length timed at load, the first answer starts at its choice: no opening block at k_max and no
    exploration block (a cold controller runs both, and explores 1 and 0 at least)."""
    explored = {}
    for warm in (False, True):
        with MTPSession(model, n_ctx=512, n_draft=4, adaptive=True, warmup=warm) as s:
            a, found = s.engine.adaptive, []
            pick = a._unexplored
            a._unexplored = lambda *x, f=found, p=pick: f.append(p(*x)) or f[-1]
            s.generate(PROMPT, max_tokens=48)
            explored[warm] = [k for k in found if k is not None]
    assert explored[False][:2] == [1, 0] and explored[True] == [], explored


def test_output_is_unchanged_by_a_warm_up(model: Path) -> None:
    seeded = SamplerConfig(temp=0.7, seed=3)
    for sampling in (None, seeded):
        def action(s, sampling=sampling):  # type: ignore[no-untyped-def]
            return s.generate(PROMPT, max_tokens=40, sampling=sampling)

        ref = Reference(lambda: MTPSession(model, mtp=False, n_ctx=512), action)
        for auto in (False, True):
            with MTPSession(model, n_ctx=512, n_draft=3, adaptive=auto, warmup=True) as s:
                g = action(s)
                ref.check(g, f"warm, auto={auto}, sampling={sampling}")
                assert g.stats.drafted > 0 and g.stats.steps == s.stats.steps


def test_warm_up_by_default_only_where_layers_are_offloaded(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s, seen = opened(model, monkeypatch, n_draft=2)
    s.close()
    assert seen == []  # the CPU: a shape's first use costs little, a warm-up would cost more
    s, seen = opened(model, monkeypatch, n_draft=2, n_gpu_layers=99)  # a CPU-only build runs it on the CPU
    s.close()
    assert seen
    s, seen = opened(model, monkeypatch, n_draft=2, n_gpu_layers=99, warmup=False)
    s.close()
    assert seen == []


def test_the_cli_spellings(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--warmup", "--no-warmup"):
        assert main(["run", str(model), "-p", "The quick", "-n", "4", "-c", "256", flag]) == 0
        assert capsys.readouterr().out.strip()


def test_the_warm_up_prompt_is_ordinary_text(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An MoE target routes each token to its own experts: a warm-up of one token repeated would time a verify
    batch that reads a fraction of the experts a real one reads (and seed auto's step times too low)."""
    prompts: list[list[int]] = []
    real = Context.decode_batch

    def recording(self, batch):  # type: ignore[no-untyped-def]
        if batch.embd is None and batch.n_outputs < batch.n:  # the target's prompt batch: not every row sampled
            prompts.append([int(t) for t in batch.tok_np[:batch.n]])
        return real(self, batch)

    monkeypatch.setattr(Context, "decode_batch", recording)
    with MTPSession(model, n_ctx=512, n_draft=2, warmup=True) as s:
        expected = s.model.warmup_tokens()
    assert prompts and all(p == expected[:-1] for p in prompts), prompts  # the last one waits for the first step
    assert len(set(expected)) >= 6 and all(0 <= t < s.model.n_vocab for t in expected)


def test_stats_json_says_what_auto_did(model: Path, tmp_path: Path) -> None:
    """`run --spec-draft-n-max auto --stats-json`: the changes of length, the runs of each length, the measured
    cost of a change and the step times the choice used (bench/oneshot.py keeps them with each auto row)."""
    out = tmp_path / "s.json"
    assert main(["run", str(model), "-p", PROMPT, "-n", "40", "-c", "512", "--spec-draft-n-max", "auto", "--warmup",
                 "--stats-json", str(out)]) == 0
    auto = json.loads(out.read_text())["auto"]
    steps = json.loads(out.read_text())["steps"]
    assert auto["changes"] == len(auto["runs"]) >= 1 and sum(n for _, n in auto["runs"]) == steps
    assert auto["switch_ms"] >= 0 and set(auto["step_ms"]) == {str(k) for k in range(AUTO_DRAFT_MAX + 1)}
    assert set(auto["mean_ms"]) == {str(k) for k, _ in auto["runs"]}
    fixed = tmp_path / "f.json"
    assert main(["run", str(model), "-p", PROMPT, "-n", "8", "-c", "512", "--stats-json", str(fixed)]) == 0
    assert "auto" not in json.loads(fixed.read_text())
