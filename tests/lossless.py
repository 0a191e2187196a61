"""What "identical to plain decoding" means in these tests, checked so that only a real bug can fail it.

llama.cpp computes the k+1 rows of a verify batch with other kernels (and other summation orders) than the one
row of a plain step, on some CPUs and on every GPU. The logits then differ by rounding, and a greedy pick whose two
best logits are that close can go the other way. So the rule (docs/run.md, "Lossless"): speculative output equals
plain decoding token for token, except that at the first token where they differ the plain run's logits of the two
tokens may tie within ``tolerance(row)``; after such a tie the two texts are different continuations and are not
compared further.

``Reference`` holds the plain run's tokens; on a divergence it decodes the same thing again, plain, with an
observer on the sampler that keeps every row it picks from, and fails unless the two tokens tie. Every tie that
was allowed is counted, and the summary at the end of the test run says how many (conftest.py).

A wrong rollback or a skipped token changes the logits far beyond rounding, so it still fails
(tests/test_lossless_rule.py shows both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Ties are judged relative to the row's scale: rounding in a float32 dot product grows with the magnitude of
#: the values summed, and a logit row's largest magnitude is a fair proxy for it.
TIE_REL = 5e-3
TIE_ABS = 1e-3  # the floor for rows whose logits are all small


def tolerance(row: np.ndarray) -> float:
    """How far apart two logits of ``row`` may be and still count as a tie."""
    return max(TIE_ABS, TIE_REL * float(np.abs(row).max()))


@dataclass
class Tie:
    label: str
    index: int  # the pick (0-based, over every generation of the action) where the outputs part
    plain: int  # plain decoding's token there
    spec: int  # the speculative run's token there
    gap: float  # plain's logit of ``plain`` minus its logit of ``spec``
    tol: float


#: every comparison made and every tie allowed during this test run (the summary reports them)
COMPARED: list[str] = []
TIES: list[Tie] = []


def flatten(out: Any) -> list[int]:
    """The picks of one action's output: a Generation, a token list, or a list of either (a conversation)."""
    if hasattr(out, "tokens"):
        return list(out.tokens)
    if out and not isinstance(out[0], int | np.integer):
        return [t for o in out for t in flatten(o)]
    return [int(t) for t in out]


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (a length difference counts at the shorter's end)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def judge(row: np.ndarray, plain: int, spec: int) -> tuple[bool, float, float]:
    """Whether ``spec`` instead of ``plain`` at a pick whose logits were ``row`` is a tie: (tie, gap, tolerance)."""
    gap = float(row[plain]) - float(row[spec])
    tol = tolerance(row)
    return abs(gap) <= tol, gap, tol


def observed_rows(session: Any, action: Callable[[Any], Any]) -> tuple[Any, list[np.ndarray], list[int]]:
    """Run ``action(session)`` with an observer on the target's sampler; return the action's output, a copy of the
    logit row each emitted token was picked from, in order, and the token the sampler picked from that row (a
    speculative step may sample rows past ``max_tokens``: those are not kept, so later generations stay aligned)."""
    rows: list[np.ndarray] = []
    picks: list[int] = []
    engine = session.engine
    generate = engine.generate

    def observing(sampler, *a, **kw):  # type: ignore[no-untyped-def]
        mine: list[tuple[np.ndarray, int]] = []
        sampler.on_logits = lambda logits: None  # the logits must come back: the chain runs on the host
        ts = engine.tsampler
        sample = ts.sample

        def recording(i: int) -> int:
            row = np.array(ts.ctx.logits_view(i), dtype=np.float32)
            t = sample(i)
            mine.append((row, t))
            return t

        ts.sample = recording
        try:
            for n, t in enumerate(generate(sampler, *a, **kw)):
                rows.append(mine[n][0])  # sampled before it was yielded
                picks.append(mine[n][1])
                yield t
        finally:
            del ts.sample

    engine.generate = observing
    try:
        return action(session), rows, picks
    finally:
        del engine.generate  # the instance attribute goes, the class's method is back


def margin_over_tolerance(make_plain: Callable[[], Any], action: Callable[[Any], Any]) -> tuple[float, int]:
    """The smallest gap between the two largest logits over ``tolerance(row)``, over every pick plain decoding of
    ``action`` makes, and at which pick. Above 1, no pick is one the tie rule would excuse: every kernel's rounding
    (which the rule bounds by ``tolerance``) leaves the greedy path as it is, so outputs of other code paths may be
    compared exactly (as text, through the CLI)."""
    with make_plain() as s:
        _, rows, _ = observed_rows(s, action)
    ratios = []
    for row in rows:
        top2 = np.partition(row, -2)[-2:]
        ratios.append(float(top2[1] - top2[0]) / tolerance(row))
    i = int(np.argmin(ratios))
    return ratios[i], i


class Reference:
    """Plain decoding of ``action`` on sessions from ``make_plain``: the tokens speculative runs must match.

    ``tokens`` may be given when the test already has them (from the same action on such a session); otherwise
    the action runs once here. The plain run is repeated, with an observer, only when a comparison differs.
    """

    def __init__(self, make_plain: Callable[[], Any], action: Callable[[Any], Any], tokens: Any = None) -> None:
        self.make_plain, self.action = make_plain, action
        if tokens is None:
            with make_plain() as s:
                tokens = action(s)
        self.tokens = flatten(tokens)
        self._rows: list[np.ndarray] | None = None

    def rows(self) -> list[np.ndarray]:
        if self._rows is None:
            with self.make_plain() as s:
                out, rows, _ = observed_rows(s, self.action)
            again = flatten(out)
            assert again == self.tokens, (
                "plain decoding with an observer gave other tokens than without one: the reference itself is not "
                f"reproducible (first difference at pick {first_difference(again, self.tokens)})")
            self._rows = rows
        return self._rows

    def check(self, got: Any, label: str = "", spec_session: Callable[[], Any] | None = None) -> None:
        """Fail unless ``got`` equals the reference up to a tie at the first difference (module docstring).

        ``spec_session``: for seeded sampling, a factory of the speculative session ``got`` came from. A sampled
        token can flip without a near-tie in the logits, when the draw falls within rounding of the boundary
        between two tokens' cumulative probabilities; that difference then passes only if the speculative run,
        decoded again with an observer, picked from a row that equals plain decoding's within ``tolerance``."""
        spec = flatten(got)
        COMPARED.append(label)
        i = first_difference(spec, self.tokens)
        if i is None:
            return
        if i >= len(spec) or i >= len(self.tokens):
            raise AssertionError(f"{label}: output is {len(spec)} tokens where plain decoding gave "
                                 f"{len(self.tokens)}, identical up to there")
        rows = self.rows()
        tie, gap, tol = judge(rows[i], self.tokens[i], spec[i])
        if not tie and spec_session is not None:
            with spec_session() as s:
                out, spec_rows, picks = observed_rows(s, self.action)
            again = flatten(out)
            if picks[: i + 1] != again[: i + 1]:
                raise AssertionError(f"{label}: the speculative run emitted {again[: i + 1][-4:]} where its sampler "
                                     f"picked {picks[: i + 1][-4:]} from the rows: not rounding, a bug")
            if again[: i + 1] == spec[: i + 1] and i < len(spec_rows):
                drift = float(np.abs(spec_rows[i] - rows[i]).max())
                if drift <= tol:  # the same distribution up to rounding: the draw sat on a boundary
                    TIES.append(Tie(label + " (sampled, rows differ by rounding)", i, self.tokens[i], spec[i],
                                    drift, tol))
                    return
                raise AssertionError(
                    f"{label}: output differs from plain decoding at pick {i}: token {spec[i]} where plain decoding "
                    f"picked {self.tokens[i]}, and the rows they were sampled from differ by {drift:.5f} (rounding "
                    f"is within {tol:.5f}): not rounding, a bug")
        if not tie:
            raise AssertionError(
                f"{label}: output differs from plain decoding at pick {i}: token {spec[i]} where plain decoding "
                f"picked {self.tokens[i]}, whose logit is {gap:+.5f} above it (a tie is within {tol:.5f}): "
                f"not rounding, a bug. plain {self.tokens[max(0, i - 4): i + 4]}, got {spec[max(0, i - 4): i + 4]}")
        TIES.append(Tie(label, i, self.tokens[i], spec[i], gap, tol))


def summary() -> list[str]:
    """Lines for the end of the test run."""
    lines = [f"lossless: {len(COMPARED)} comparisons with plain decoding, {len(TIES)} parted at a tie within "
             f"tolerance (TIE_REL {TIE_REL:g}, TIE_ABS {TIE_ABS:g})"]
    lines += [f"  tie: {t.label} at pick {t.index}: plain {t.plain}, speculative {t.spec}, gap {t.gap:+.6f} "
              f"(tolerance {t.tol:.5f})" for t in TIES]
    return lines


class References(list):
    """One Reference per action (prompts generated one by one from fresh contexts), compared one by one, so a
    tie in one prompt does not hide the others."""

    def __init__(self, make_plain: Callable[[], Any], actions: Sequence[Callable[[Any], Any]],
                 outputs: Sequence[Any] | None = None) -> None:
        if outputs is None:
            with make_plain() as s:
                outputs = [a(s) for a in actions]
        super().__init__(Reference(make_plain, a, o) for a, o in zip(actions, outputs))

    def check(self, got: Sequence[Any], label: str = "") -> None:
        assert len(got) == len(self), f"{label}: {len(got)} outputs for {len(self)} references"
        for i, (ref, g) in enumerate(zip(self, got)):
            ref.check(g, f"{label} #{i}")
