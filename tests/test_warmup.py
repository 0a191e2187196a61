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
            assert sorted(a.times) == list(range(k + 1)) and all(len(v) == 2 for v in a.times.values())
            assert a._explored == set(range(k + 1)) and a.n == 0 and a._block == fresh._block
            left = {n: v for n, v in vars(a).items() if n not in ("times", "_timed_at", "_explored")}
            assert left == {n: v for n, v in vars(fresh).items() if n not in ("times", "_timed_at", "_explored")}


def test_a_warm_auto_answer_explores_no_length(model: Path) -> None:
    """With every length timed at load, the first answer runs its opening block at k_max (the acceptance at every
    position), then its choice: no exploration block (a cold controller explores 1 and 0 at least)."""
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
