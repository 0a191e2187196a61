"""``--spec-draft-n-max auto``: pick the draft length with the best measured tokens per second, plain decoding
(no drafts) included.

Expected tokens of a step that drafts k: ``E(k) = 1 + sum_{i<k} a_i``, where ``a_i`` is the share of steps whose
first i+1 drafts were all accepted (a prefix probability, so it is summed, not multiplied again), counted over
the session's verified drafts (``Stats``) and this controller's shadow drafts (below); ``E(0) = 1``. Cost of a
step ``T(k)``: the median wall time of recent whole steps at length k (verify, drafts, feed and our own work all
included: a per-step cost left out would favour short drafts); for a length of 1 or more not measured yet, a
straight line ``c + d * k`` through the lengths >= 1 that are. The choice is ``argmax_k E(k) / T(k)`` over
0..k_max.

Why 0 is a candidate: drafting can lose at every length. A step that drafts pays for the head's decodes and a
wider verify, and on a recurrent target that llama.cpp cannot roll back (rollback.py: replay) for saving and
restoring the state; on a compute-bound back-end (a 2-core CPU) a wider verify costs about its width. Measured
on an H100 (bench/reference/qwen3next-h100.txt), a ~70% head on a Qwen3-Next target is slower than plain
decoding at every k (best 0.73-0.78x); ``auto`` must then decode plainly rather than pick the least bad k. T(0) is
only ever measured, never read off the line: a plain step has no head decode and no rollback, so it does not
lie on the line through the drafting lengths.

Why it is shaped so: every change of length makes llama.cpp build the target's graph and CUDA run it eagerly
and capture it again (stock ggml-cuda keeps one captured graph per context), so the first ``WARMUP`` steps at a new
length pay for graph work a steady run does not: on an H100 about 1.3 ms each, a third of a step. Exploration
is therefore short and in blocks: k_max first (it also measures acceptance at every position), then 1, then 0
(plain steps: cheap), then the best length and its neighbours until each of them is measured. The line alone
is not enough: on an H100 a step's cost bends upwards (k=4 costs more than the line through k=1 and k=3
predicts), so a choice made on the line alone sat 9-18% below the best fixed length. The first ``WARMUP`` steps
of each block are not timed and medians drop other outliers. A new length must beat the current one by
``SWITCH_GAIN``.

Keeping the acceptance current without changing length: every ``SHADOW_EVERY`` steps at k < k_max the caller
drafts k+1 tokens and verifies k (``shadow``); the target's next token says whether draft k+1 would have been
accepted, which is all a verify of it would say. That costs one head decode, and the verify keeps its shape; the
head's decode changes shape for that step, which with one captured graph per context (stock ggml-cuda) costs its
graph built, run eagerly and captured again there and back. That cost is measured (``shadow_cost``: the shadow
step and the ``WARMUP`` steps after it, over steady ones; those steps are not the length's times) and shadow
drafts come no more often than keeps it under ``SHADOW_SHARE`` of the time. At 0 this is one draft on a plain
step, so a head that becomes useful (a different kind of text) is picked up again: not at once, as the
acceptance is counted over the whole session and new drafts must first outweigh the old ones (simulated: back
to drafting after a few hundred steps, tests/test_adaptive.py).
Step times drift less, so the probes that change the length (a block of ``PROBE`` steps at one neighbour of
the choice, k+1 and k-1 in turn, only the last timed) come every ``PROBE_EVERY_SHADOWED`` steps. Each costs
two changes of length, four warm-up steps: with them every 32 steps, auto sat 9-10% below the best fixed k on
~70% heads (H100, 128 tokens). Where the caller cannot shadow (server slots stepped together, multistep.py)
probes come every ``PROBE_EVERY`` steps and also carry the acceptance; at 0 only one in ``PLAIN_TIMED`` of those
is a timed block, as a probe step there is what plain decoding loses. The first step of a probe also sends the
head the tokens queued for it during plain steps (speculative.py), one more reason it is not timed.

Shadow drafts on every fourth step instead (and probes every 128) measured 0.85-0.87x the best fixed k on the
same H100: the extra head decode, 0.8 ms on a 3.7 ms step, cost more than the probes it saved.

What a change of length costs is measured, not assumed (``switch_cost``: the untimed steps after a change, over
as many steady ones; the warm-up at load times one change after every shape ran). On a deep model with ggml-cuda's
stock graph cache it is several steps' worth (the whole target's graph run eagerly and captured again), so: the
choice moves only where the gain pays the change back within ``PAYBACK_STEPS``; probes come less often where
their two changes would cost more than ``PROBE_SHARE`` of the time between them; and a session warmed up at load
has no opening block at k_max (two changes, and k_max is the slowest length of a ~70% head) but starts from the
best length for a typical head's acceptance (``TYPICAL_*``), whose deeper positions follow the trend of the
verified ones, so a head better or worse than typical moves the choice within a few steps. A move to a shorter
length must also hold with the acceptance it gives up at the top of its interval (``EVIDENCE``): on the prior's
few drafts one rejected draft could move a near-tie down and the next steps move it back, each change costing a
deep model several steps (docs/benchmarks.md, "A move to a shorter length needs evidence"). A move to a longer one
likewise must hold with the positions it adds at the bottom of theirs: those are the prior's extrapolation and a
few shadow drafts, and a near-tie taken on them was then held for the rest of an answer by the payback rule (two
of three auto processes on an H200 host; tests/test_adaptive.py, the lucky start).

The first choice is free of the payback rule: the prompt's decode comes before it, so every length rebuilds its
graphs there alike (held to the rule from k_max, a deep model's dear change kept it at k_max for much of an
answer: docs/benchmarks.md, "auto's first choice"). Where
a change costs more than a plain step, the head's first draft is first checked against the target's pick on the
prompt's last ``PROMPT_ROWS`` positions (``seed_prompt``): counted where it shows a head better than typical, so a
head right nearly every time starts at its own best length instead of being held below it; not counted below, as a
prompt is the user's text and a head may agree with the target far more on the model's own answer.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import median

from .stats import Stats


class DraftLength:
    # Steps after a change of length that are not timed. CUDA replays a captured graph only from the third decode
    # of one shape: the first runs eagerly (the shape changed), the second captures and instantiates the graph
    # (ggml-cuda keeps one graph per context). Timing the second made every length but the steady one look
    # 1.3-2.2 ms slower on an H100, and auto stuck at k_max (0.72x the best fixed k on a ~70% head).
    WARMUP = 2
    BLOCK = WARMUP + 2  # steps per exploration block: two timed
    PROBE = WARMUP + 1  # steps per probe block: one timed
    PROBE_EVERY = 32  # without shadow drafts
    PLAIN_TIMED = 4  # without shadow drafts, at 0: one probe in this many is a timed block, the others one step
    # Shadow drafts: one every SHADOW_EVERY steps; every SHADOW_DOUBT steps while the choice between k and k+1
    # could go either way within DOUBT standard errors of the acceptance at position k+1, until DOUBT_DRAFTS
    # drafts (verified or shadow) were counted there
    SHADOW_EVERY = 32
    SHADOW_DOUBT = 8
    # ... but at most this share of the time goes to shadow drafts, as measured (shadow_cost()): a shadow step
    # changes the head's decode for one step, and where the library keeps one captured graph per context (stock
    # ggml-cuda) the head's graph is run eagerly and captured again on the way there and back, several times the
    # extra draft itself (bench/length_change.py)
    SHADOW_SHARE = 0.03
    DOUBT = 1.5
    DOUBT_DRAFTS = 64
    PROBE_EVERY_SHADOWED = 256
    KEEP = 8  # recent step times kept per length
    # A change of length costs about one step of graph work on a GPU (WARMUP), so the choice moves only for a
    # clear gain. 3% held a perfect head at k=4, 2.2% below k=3 (H100); 1.5% let noise move it (simulated).
    SWITCH_GAIN = 0.02
    # ... and a move to a shorter length must win with the acceptance it gives up at the top of its interval, this
    # many standard errors wide: the early moves one or two rejections caused, and the moves back after them,
    # go; simulated, no case lost and clustered misses gained (tests/test_adaptive.py); 1.0 held moves too long.
    # A move to a longer length must win with the positions it adds at the bottom of theirs, as wide
    EVIDENCE = 0.5
    # ... and only where the gain pays back what a change measurably costs (switch_cost()) within this many steps:
    # on a deep model with the stock CUDA graph cache a change re-captures the whole target's graph, several steps'
    # worth of time, and a choice moving on small gains lost more than it found
    PAYBACK_STEPS = 32
    PROBE_SHARE = 0.02  # at most this share of the time between probes goes to their changes of length
    MAX_RUNS = 256  # runs of one length kept for summary()
    EXPLORE_WITHIN = 0.9
    PRIOR_DRAFTS = 64  # a profile's acceptance (seed()) counts as its drafts at each position, at most this many
    # Without a profile, a session warmed up at load (every length timed) starts from the best length for a
    # typical MTP head (acceptance TYPICAL_FIRST at the first position, each next one TYPICAL_DECAY of the one
    # before), counted as TYPICAL_DRAFTS drafts a position, instead of an opening block at k_max: that block
    # costs two changes of length, on a deep model with the stock CUDA graph cache several steps each, and its
    # steps at k_max are the slowest of a ~70% head. The run's own drafts outweigh the prior within a few steps.
    TYPICAL_FIRST = 0.75
    TYPICAL_DECAY = 0.66
    TYPICAL_DRAFTS = 8
    # Where a change of length costs more than a plain step, the first choice is hard to leave: before it, the
    # head's first draft is checked against the target's pick on the prompt's last PROMPT_ROWS positions
    # (seed_prompt), so a head better than typical (right every time) starts at its own best length
    PROMPT_ROWS = 32
    # ... and they count only where they show the head better than typical (the typical first position below their
    # Wilson interval, this many standard errors wide). A prompt is the user's text, not the model's answer: a head
    # that agrees with the target there will agree at least as well on the answer, one that disagrees may not: the
    # benchmark models' heads and the tiny model's trained one agree less on prompts than on their answers
    # (docs/benchmarks.md, "auto's first choice"; bench/prompt_agreement.py). Counted both ways, simulated
    # near-typical heads also lost to prompts that ended in a hard stretch (tests/test_adaptive.py, CLUSTERED).
    PROMPT_Z = 2.0

    def __init__(self, k_max: int, *, shadows: bool = True) -> None:
        self.k_max = max(1, k_max)
        self.shadows = shadows  # the caller can draft one more token than it verifies (Engine.step)
        self.shadow = False  # this step: draft k+1, verify k, report the extra one with shadow_result()
        self._shadow_d = [0] * self.k_max  # shadow drafts at each 0-based position, and of those accepted
        self._shadow_a = [0] * self.k_max
        self._prior_d = [0.0] * self.k_max  # an earlier run's acceptance as pseudo-counts (seed())
        self._prior_a = [0.0] * self.k_max
        self._typical = [False] * self.k_max  # positions whose prior is the typical head's (seed_times)
        self.prompt_checks: tuple[int, int] | None = None  # the prompt's checks (checked, right), counted or not
        self._prompt_counted = False  # whether they count as first drafts
        self._probe_every = self.PROBE_EVERY_SHADOWED if shadows else self.PROBE_EVERY
        self.times: dict[int, deque[float]] = {}
        self._timed_at: dict[int, int] = {}  # step of each length's newest timed sample
        self.n = 0  # steps seen
        self.k = self.k_max
        self._last = -1  # draft length of the previous step
        self._run = 0  # steps in a row at that length
        self._block: list[int] = [self.k_max] * self.BLOCK  # lengths still to run in the current block
        self._explored = {self.k_max}  # lengths measured or being measured (k_max is the first block)
        self._probes = 0  # probe blocks run (they alternate between the neighbours)
        self.switch_s: deque[float] = deque(maxlen=self.KEEP)  # measured cost of a change of length (seconds)
        self._switch_acc = 0.0  # wall time of the untimed steps since the last change
        self.shadow_s: deque[float] = deque(maxlen=self.KEEP)  # measured cost of a shadow draft (seconds)
        self._shadow_left = 0  # steps still to count into the cost of the last shadow draft
        self._shadow_acc = 0.0  # their wall time so far
        self.changes = 0  # changes of length (the first step included)
        self.runs: list[list[int]] = []  # [length, steps] of the first MAX_RUNS runs
        self._all: dict[int, list[float]] = {}  # every step at each length, timed or not: [seconds, steps]

    def next(self, stats: Stats) -> int:
        """Draft length for the next step (0: a plain step, no drafts); ``shadow`` says whether to draft one more
        token than that, unverified."""
        self.shadow = False
        if self._block:
            return self._block.pop()
        line = self.cost()  # once per step: this runs between two decodes
        rates = self.rates(stats, line)
        if len(self._explored) < self.k_max + 1:
            k = self._unexplored(stats, rates)
            if k is not None:  # one more block: the first WARMUP steps rebuild the graph, the others are timed
                self._explored.add(k)
                self._block = [k] * (self.BLOCK - 1)
                return k
        self.k = self._choose(stats, rates, line)
        # a probe step of the stretched period is one of the base period's: the stretch is worked out only there
        base = self.n % self._probe_every == self._probe_every - self.PROBE
        every = self._probe_every * self._probe_stretch() if base else self._probe_every
        if base and self.n % every == every - self.PROBE:
            nbrs = [j for j in (self.k + 1, self.k - 1) if 0 <= j <= self.k_max]  # at 0: only 1
            k = nbrs[self._probes % len(nbrs)]
            self._probes += 1
            if self.k > 0 or self.shadows or self._probes % self.PLAIN_TIMED == 1:
                self._block = [k] * (self.PROBE - 1)
            return k
        if self.shadows and self.k < self.k_max:
            every = self.SHADOW_DOUBT if self._doubt(stats, rates, line) else self.SHADOW_EVERY
            if self.shadow_s:  # measured: no more often than keeps them under SHADOW_SHARE of the time
                cost, t = self.shadow_cost(), self.step_time(self.k, line)
                if cost > 0 and t:
                    every = max(every, math.ceil(cost / (self.SHADOW_SHARE * t)))
            self.shadow = self.n % every == every - 1
        return self.k

    def _doubt(self, stats: Stats, rates: dict[int, float], line: tuple[float, float] | None) -> bool:
        """Whether k+1 would replace k, or not, depending on where within ``DOUBT`` standard errors the acceptance
        at position k+1 really lies: then more shadow drafts are worth their head decode."""
        k = self.k
        t_up = self.step_time(k + 1, line)
        if k not in rates or t_up is None or t_up <= 0:
            return False
        counts = self._all_counts(stats)
        d, a = counts[k]
        if d >= self.DOUBT_DRAFTS:
            return False
        lo, hi = wilson(a / d if d else 0.0, round(d), self.DOUBT)
        acc = self._shares(counts)
        if k:  # a prefix share never exceeds the one before it: at best, draft k+1 is accepted whenever draft k is
            hi = min(hi, acc[k - 1])
            lo = min(lo, hi)
        e_up = rates.get(k + 1, 0.0) * t_up - acc[k]  # E(k+1) less the acceptance at k+1
        return (e_up + lo) / t_up < rates[k] * (1 + self.SWITCH_GAIN) < (e_up + hi) / t_up

    def shadow_result(self, pos: int, accepted: bool) -> None:
        """The shadow draft at 0-based position ``pos`` would have been accepted (all drafts before it were)."""
        if 0 <= pos < self.k_max:
            self._shadow_d[pos] += 1
            self._shadow_a[pos] += int(accepted)

    def _counts(self, stats: Stats, i: int) -> tuple[float, float]:
        """Drafts and accepted drafts at 0-based position ``i``: verified, shadow and the prior's pseudo-counts."""
        return self._all_counts(stats)[i]

    def _all_counts(self, stats: Stats) -> list[tuple[float, float]]:
        """:meth:`_counts` at every position. A profile's prior has its own shares; the typical head's prior
        (seed_times) at position i > 0 is the estimate at i-1 times the ratio of the estimates at i-1 and i-2
        (at i = 1, TYPICAL_DECAY scaled by the estimate at 0 over TYPICAL_FIRST): acceptance falls by about one
        ratio a position, so what the verified positions show carries to the deeper ones, and a head better than
        typical is not held back by the prior."""
        d0, a0 = stats.drafted_at, stats.accepted_at
        out: list[tuple[float, float]] = []
        for i in range(self.k_max):
            d = (d0[i] if i < len(d0) else 0) + self._shadow_d[i]
            a = (a0[i] if i < len(a0) else 0) + self._shadow_a[i]
            if i == 0 and self._prompt_counted and self.prompt_checks:  # first drafts like any other
                d, a = d + self.prompt_checks[0], a + self.prompt_checks[1]
            pd, pa = self._prior_d[i], self._prior_a[i]
            if pd and self._typical[i]:
                if i == 0:
                    share = self.TYPICAL_FIRST
                else:
                    prev = out[i - 1][1] / out[i - 1][0] if out[i - 1][0] else 0.0
                    before = (out[i - 2][1] / out[i - 2][0] if out[i - 2][0] else 0.0) if i >= 2 else 0.0
                    ratio = prev / before if i >= 2 and before > 0 else self._second_ratio(prev)
                    share = prev * min(1.0, ratio)
                pa = pd * share
            out.append((d + pd, a + pa))
        return out

    def _second_ratio(self, first: float) -> float:
        """The typical prior's second position over its first, for a first position at ``first``: the typical
        decay at a typical first position, approaching 1 as the first does (a head right every time at the first
        is expected so at the second), and scaled down with the first below typical."""
        f, dec = self.TYPICAL_FIRST, self.TYPICAL_DECAY
        return max(dec * first / f, 1 - (1 - dec) * (1 - first) / (1 - f))

    def acceptance(self, stats: Stats) -> list[float]:
        """Share of steps whose first i+1 drafts were all accepted: verified drafts, shadow ones and the prior; never
        above the share at the position before (the counts of a deeper position come from fewer steps, shadow
        drafts among them, and can say otherwise by chance)."""
        return self._shares(self._all_counts(stats))

    @staticmethod
    def _shares(counts: list[tuple[float, float]], top_from: int | None = None, z: float = 0.0) -> list[float]:
        """:meth:`acceptance` from :meth:`_all_counts`' (drafts, accepted) by position; from position ``top_from``
        on, each share at the top of its Wilson interval ``z`` standard errors wide, at the bottom for a negative
        ``z`` (before the cap)."""
        out: list[float] = []
        for i, (d, a) in enumerate(counts):
            share = a / d if d else 0.0
            if top_from is not None and i >= top_from:
                share = wilson(share, round(d), abs(z))[z >= 0]
            out.append(min(share, out[-1]) if out else share)
        return out

    def seed(self, step_s: dict[int, float], acceptance: list[float], drafts: list[int] | None = None) -> None:
        """Start from what an earlier run on the same model and machine measured (draft_profile.py): its step
        time (seconds) at each length, as one sample each, and its acceptance by position, as the ``drafts`` it
        was measured over (at most ``PRIOR_DRAFTS``; that many when not given). Lengths with a time are not
        explored again, so the first answer starts at the best of them; the run's own steps and drafts soon
        outweigh the seed."""
        for k, t in step_s.items():
            if 0 <= k <= self.k_max and t > 0:
                self.times[k] = deque([t], maxlen=self.KEEP)
                self._timed_at[k] = 0
        if self.times:
            self._explored |= set(self.times)
            self._block = []  # no opening block at k_max: its times and acceptance are known
        for i, a in enumerate(acceptance[: self.k_max]):
            given = drafts[i] if drafts is not None and i < len(drafts) else self.PRIOR_DRAFTS
            n = float(min(self.PRIOR_DRAFTS, given))
            self._prior_d[i] = n
            self._prior_a[i] = min(1.0, max(0.0, a)) * n
            self._typical[i] = False

    def wants_prompt(self) -> bool:
        """Whether the head's first drafts should be checked on the prompt before the first choice
        (:meth:`seed_prompt`): no step run yet, the acceptance still the typical head's (no profile), and a change
        of length measured dearer than a plain step, so a wrong first choice would be costly to leave."""
        plain = self.step_time(0, None)
        return (self.n == 0 and not self._prompt_counted and self._typical[0] and plain is not None
                and self.switch_cost() > plain)

    def seed_prompt(self, drafts: int, right: int) -> bool:
        """The head's first draft was checked at ``drafts`` positions of the prompt against the target's own pick
        there, and was ``right`` at that many: counted as verified first drafts where they show the head better than
        a typical one (``PROMPT_Z``). Returns whether they count."""
        drafts = max(0, drafts)
        right = max(0, min(right, drafts))
        self.prompt_checks = (drafts, right)
        if not drafts or wilson(right / drafts, drafts, self.PROMPT_Z)[0] <= self.TYPICAL_FIRST:
            return False
        self._prompt_counted = True
        return True

    def seed_switch(self, seconds: float) -> None:
        """A change of length's cost measured before the first answer (the warm-up at load); noise below the
        steady steps counts as no cost."""
        self.switch_s.append(max(0.0, seconds))

    def seed_times(self, step_s: dict[int, list[float]]) -> None:
        """Step times (seconds) at each length measured before the first answer (the warm-up at load, after its
        untimed steps): those lengths need no exploration block. With every length timed, the opening block at
        k_max goes too: the acceptance starts from a typical head's (``TYPICAL_*``) unless a profile gave one, and
        verified and shadow drafts correct it."""
        for k, ts in step_s.items():
            if 0 <= k <= self.k_max and ts:
                self.times[k] = deque(ts, maxlen=self.KEEP)
                self._timed_at[k] = 0
                self._explored.add(k)
        if self._explored >= set(range(self.k_max + 1)):
            self._block = []
            for i in range(self.k_max):
                if not self._prior_d[i]:
                    self._prior_d[i] = float(self.TYPICAL_DRAFTS)
                    self._typical[i] = True

    def measured(self, stats: Stats) -> tuple[dict[int, float], list[float], list[int]]:
        """What a profile keeps: the median step time (seconds) at each length timed, and the acceptance at the
        positions drafted at least once (a position never drafted says nothing) with the drafts it counts."""
        acc, n = [], []
        for i in range(self.k_max):
            d, a = self._counts(stats, i)
            if not d:
                break
            acc.append(a / d)
            n.append(round(d))
        return {k: median(v) for k, v in sorted(self.times.items()) if v}, acc, n

    def _choose(self, stats: Stats, rates: dict[int, float], line: tuple[float, float] | None = None) -> int:
        """The best length, unless the current one is within ``SWITCH_GAIN`` of it or the gain would not pay back
        a change's measured cost within ``PAYBACK_STEPS`` steps (the first choice, before any step, is free of both).
        Leaving the length that runs now for a shorter one
        (1 or more), the shorter must win with the positions it gives up at the top of their acceptance's interval
        (``EVIDENCE``); for a longer one, the longer must win with the positions it adds at the bottom of theirs."""
        b = self.best(stats, rates)
        cur = rates.get(self.k)
        # the first choice is free: the prompt's decode came before it, so every length rebuilds its graphs alike
        if b == self.k or cur is None or cur <= 0 or self._last < 0:
            return b
        r_b = rates[b]
        # leaving the length that runs now (not the first choice, not a probe) for a shorter one that still
        # drafts: plain steps are left to the payback test, as the acceptance of a length left for them comes back
        # only through one shadow draft a probe period
        if 0 < b < self.k and self._last == self.k:
            cur = self._rate_held(stats, self.k, b, line) or cur
        # ... and leaving it for a longer one, the longer must win with the positions it adds at the bottom of
        # their interval: those come from the prior and a few shadow drafts, and a near-tie taken on them is held
        # by the payback rule for the rest of the answer
        if 0 < self.k < b and self._last == self.k:
            r_b = min(r_b, self._rate_held(stats, b, self.k, line, -self.EVIDENCE) or r_b)
        if r_b < cur * (1 + self.SWITCH_GAIN):
            return self.k
        t_b = self.step_time(b, None) or 0.0
        saved = self.PAYBACK_STEPS * t_b * (r_b / cur - 1)  # time the same tokens would take longer at k
        return b if saved >= self.switch_cost() else self.k

    def _rate_held(self, stats: Stats, k: int, b: int, line: tuple[float, float] | None,
                   z: float | None = None) -> float | None:
        """Expected tokens per second at ``k`` with positions ``b``..``k``-1 (0-based) at the top of their Wilson
        interval, ``EVIDENCE`` standard errors wide (``z``: that many, at the bottom where negative): what a move
        down to ``b`` must beat, or (with ``b`` the length that runs and ``-EVIDENCE``) what a move up to ``k`` may
        count on. A run's first steps count few drafts there, so one rejection could otherwise move the choice, and
        the next steps move it back: changes of length that cost a deep model several steps each."""
        t = self.step_time(k, line)
        if not t or t <= 0:
            return None
        return (1 + sum(self._shares(self._all_counts(stats)[:k], b, self.EVIDENCE if z is None else z))) / t

    def _probe_stretch(self) -> int:
        """How many probe periods go between probes: one, unless a probe's two changes of length would cost more
        than ``PROBE_SHARE`` of the steps between them."""
        t = self.step_time(self.k, None)
        cost = 2 * self.switch_cost()
        if not t or cost <= 0:
            return 1
        return max(1, math.ceil(cost / (self.PROBE_SHARE * self._probe_every * t)))

    def switch_cost(self) -> float:
        """Median measured cost (seconds) of a change of length: the time its untimed steps took over steady ones
        (graph rebuilds, CUDA graph captures); 0 until one was measured."""
        return median(self.switch_s) if self.switch_s else 0.0

    def shadow_cost(self) -> float:
        """Median measured cost (seconds) of a shadow draft: the shadow step and the ``WARMUP`` steps after it over
        as many steady ones; 0 until one was measured."""
        return median(self.shadow_s) if self.shadow_s else 0.0

    def summary(self) -> dict:
        """What this controller did, for ``--stats-json``: changes of length, the runs of each length in order
        (the first ``MAX_RUNS``), the prompt's checks of the head's first draft ([checked, right]) and whether they
        counted, the measured cost of a change, each length's median step time (what the choice
        uses) and its mean over every step run at it (untimed and shadow steps included)."""
        return {"changes": self.changes, "runs": [list(r) for r in self.runs],
                "prompt_checks": list(self.prompt_checks) if self.prompt_checks else None,
                "prompt_counted": self._prompt_counted,
                "switch_ms": round(1e3 * self.switch_cost(), 3), "shadow_ms": round(1e3 * self.shadow_cost(), 3),
                "step_ms": {k: round(1e3 * median(v), 3) for k, v in sorted(self.times.items()) if v},
                "mean_ms": {k: round(1e3 * t / n, 3) for k, (t, n) in sorted(self._all.items()) if n}}

    def _unexplored(self, stats: Stats, rates: dict[int, float]) -> int | None:
        """The next length to measure: 1 after k_max, then 0, then the current best or a neighbour of it that the
        line puts within ``EXPLORE_WITHIN`` of the best rate (a block far below it costs more than it can find:
        on an H100 with a perfect head, exploring k=2, 11% below k=3 on the line, cost 5% of an answer)."""
        for k in (1, 0):
            if k not in self._explored:
                return k
        b = self.best(stats, rates)
        top = rates.get(b, 0.0)
        return next((k for k in (b, b - 1, b + 1) if 0 <= k <= self.k_max and k not in self._explored
                     and rates.get(k, top) >= self.EXPLORE_WITHIN * top), None)

    def observe(self, k: int, seconds: float) -> None:
        """A step given length ``k`` (0: plain) took ``seconds`` of wall time. The first ``WARMUP`` steps after a
        change of length are not kept: they pay for graph rebuilds and captures that a steady run does not."""
        self.n += 1
        self._run = self._run + 1 if k == self._last else 1
        self._last = k  # a shadow step has the verify's shape of k
        if self._run == 1:
            self.changes += 1
            self._switch_acc = 0.0
            self._shadow_left = 0  # a change cut the last shadow's steps short: not counted
            if self.changes <= self.MAX_RUNS:
                self.runs.append([k, 0])
        if self.changes <= self.MAX_RUNS:  # this run is recorded
            self.runs[-1][1] += 1
        total = self._all.setdefault(k, [0.0, 0.0])
        total[0] += seconds
        total[1] += 1
        if self._run <= self.WARMUP:
            self._switch_acc += seconds
        elif self._run == self.WARMUP + 1 and self.times.get(k):
            # what the untimed steps cost over as many steady ones: the graph work a change brought
            self.switch_s.append(max(0.0, self._switch_acc - self.WARMUP * median(self.times[k])))
        if self._run > self.WARMUP and self.shadow:
            # a shadow step paid for one more head decode, and the next WARMUP steps for the head's shape changing
            # back: those steps are the shadow's cost, not this length's time
            self._shadow_left, self._shadow_acc = self.WARMUP + 1, 0.0
        if self._shadow_left:
            self._shadow_left -= 1
            self._shadow_acc += seconds
            if not self._shadow_left and self.times.get(k):
                self.shadow_s.append(max(0.0, self._shadow_acc - (self.WARMUP + 1) * median(self.times[k])))
        elif self._run > self.WARMUP:
            v = self.times.setdefault(k, deque(maxlen=self.KEEP))
            if self.n - self._timed_at.get(k, self.n) > self.PROBE_EVERY:
                # a probe, long after this length's last time: the old times count as one, or a change of the
                # machine's speed (load, clocks) would take KEEP / 2 probes, thousands of steps, to show
                while len(v) > 1:
                    v.popleft()
            v.append(seconds)
            self._timed_at[k] = self.n

    def cost(self) -> tuple[float, float] | None:
        """(c, d) of the line T(k) = c + d * k through the median step time at each length >= 1 tried."""
        pts = [(k, median(v)) for k, v in self.times.items() if v and k > 0]
        if len(pts) < 2:
            return None
        mk = sum(k for k, _ in pts) / len(pts)
        mt = sum(t for _, t in pts) / len(pts)
        var = sum((k - mk) ** 2 for k, _ in pts)
        d = sum((k - mk) * (t - mt) for k, t in pts) / var
        d = max(d, 0.0)  # a longer draft never costs less; noise must not make it look free or cheaper
        return mt - d * mk, d

    def step_time(self, k: int, line: tuple[float, float] | None) -> float | None:
        """Median measured time of a step at length ``k``, or the line's prediction where none is measured
        (none for 0: a plain step is not on the drafting lengths' line)."""
        v = self.times.get(k)
        if v:
            return median(v)
        return None if line is None or k == 0 else line[0] + line[1] * k

    def rates(self, stats: Stats, line: tuple[float, float] | None = None) -> dict[int, float]:
        """Expected tokens per second at each length measured or predicted (``line``: :meth:`cost`'s, when the
        caller has it already)."""
        line = line if line is not None else self.cost()
        acc = self.acceptance(stats)
        out, expected = {}, 1.0
        for k in range(0, self.k_max + 1):
            if k:
                expected += acc[k - 1]
            t = self.step_time(k, line)
            if t is not None and t > 0:
                out[k] = expected / t
        return out

    def best(self, stats: Stats, rates: dict[int, float] | None = None) -> int:
        """The length with the best expected rate among those measured or predicted; ``k`` while none is."""
        best, best_rate = self.k, -1.0
        for k, rate in sorted((rates if rates is not None else self.rates(stats)).items()):
            if rate > best_rate * 1.0001:  # ties go to the shorter draft
                best, best_rate = k, rate
        return best


def wilson(p: float, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval of a share ``p`` measured over ``n`` trials, ``z`` standard errors wide: unlike
    p +- z * se it does not shrink to nothing when a few trials all came out alike."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z / n
    mid = (p + z2 / 2) / (1 + z2)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n)) / (1 + z2)
    return max(0.0, mid - half), min(1.0, mid + half)
