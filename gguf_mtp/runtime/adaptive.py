"""``--spec-draft-n-max auto``: pick the draft length with the best measured tokens per second, plain decoding
(no drafts) included.

Expected tokens of a step that drafts k: ``E(k) = 1 + sum_{i<k} a_i``, where ``a_i`` is the share of steps whose
first i+1 drafts were all accepted (``Stats.acceptance_at``: already a prefix probability, so it is summed, not
multiplied again); ``E(0) = 1``. Cost of a step ``T(k)``: the median wall time of recent whole steps at length k
(verify, drafts, feed and our own work all included: a per-step cost left out would favour short drafts); for a
length of 1 or more not measured yet, a straight line ``c + d * k`` through the lengths >= 1 that are. The
choice is ``argmax_k E(k) / T(k)`` over 0..k_max.

Why 0 is a candidate: drafting can lose at every length. A step that drafts pays for the head's decodes and a
wider verify, and on a recurrent target that llama.cpp cannot roll back (rollback.py: replay) for saving and
restoring the state; on a compute-bound back-end (a 2-core CPU) a wider verify costs about its width. Measured
on an H100 (bench/reference/qwen3next-h100.txt), a ~70% head on a Qwen3-Next target is slower than plain
decoding at every k (best 0.73-0.78x); ``auto`` must then decode plainly rather than pick the least bad k. T(0) is
only ever measured, never read off the line: a plain step has no head decode and no rollback, so it does not
lie on the line through the drafting lengths.

Why it is shaped so: every change of length makes llama.cpp build the target's graph (and CUDA capture it)
again, and the first steps at a new length pay for that (``WARMUP``). So exploration is short and in blocks: k_max first
(it also measures acceptance at every position), then 1, then 0 (plain steps: cheap), then the best length and
its neighbours until each of them is measured. The line alone is not enough: on an H100 a step's cost bends
upwards (k=4 costs more than the line through k=1 and k=3 predicts), so a choice made on the line alone sat
9-18% below the best fixed length. The first ``WARMUP`` steps of each block are not timed, and medians drop
other outliers. Later, every ``PROBE_EVERY`` steps, a block of ``PROBE`` steps at one neighbour of the choice
(k+1 and k-1 in turn, within 0..k_max; only the last timed) keeps the times and the deep acceptance current. While
the choice is 0 the probe is always k=1: it measures the head's acceptance again, so a head that becomes
useful (a different kind of text) is picked up again: not at once, as the acceptance is counted over the whole
session and the probes' drafts must first outweigh the old ones (simulated: back to drafting after 200-500
steps, tests/test_adaptive.py). There a probe step is what plain decoding loses (on
that Qwen3-Next target a k=1 step costs 2.9 plain steps for 1.76 tokens), so only one probe in
``PLAIN_TIMED`` is a timed block; the others are one step, for the acceptance. The first step of a probe
also sends the head the tokens queued for it during the plain steps (speculative.py), one more reason it is
not timed.
"""

from __future__ import annotations

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
    PROBE_EVERY = 32
    PROBE = WARMUP + 1  # steps per probe block: one timed
    PLAIN_TIMED = 4  # while at 0: one probe in this many is a timed block, the others one step (acceptance only)
    KEEP = 8  # recent step times kept per length
    # A change of length costs about one step of graph work on a GPU (WARMUP), so the choice moves only for a
    # clear gain (on an H100 with a perfect head, k=3 and k=4 measured within 2.5% of each other).
    SWITCH_GAIN = 0.03

    def __init__(self, k_max: int) -> None:
        self.k_max = max(1, k_max)
        self.times: dict[int, deque[float]] = {}
        self.n = 0  # steps seen
        self.k = self.k_max
        self._last = -1  # draft length of the previous step
        self._run = 0  # steps in a row at that length
        self._block: list[int] = [self.k_max] * self.BLOCK  # lengths still to run in the current block
        self._explored = {self.k_max}  # lengths measured or being measured (k_max is the first block)
        self._probes = 0  # probe blocks run (they alternate between the neighbours)

    def next(self, stats: Stats) -> int:
        """Draft length for the next step (0: a plain step, no drafts)."""
        if self._block:
            return self._block.pop()
        rates = self.rates(stats)  # once per step: this runs between two decodes
        if len(self._explored) < self.k_max + 1:
            k = self._unexplored(stats, rates)
            if k is not None:  # one more block: the first WARMUP steps rebuild the graph, the others are timed
                self._explored.add(k)
                self._block = [k] * (self.BLOCK - 1)
                return k
        self.k = self._choose(stats, rates)
        if self.n % self.PROBE_EVERY == self.PROBE_EVERY - self.PROBE:
            nbrs = [j for j in (self.k + 1, self.k - 1) if 0 <= j <= self.k_max]  # at 0: only 1
            k = nbrs[self._probes % len(nbrs)]
            self._probes += 1
            if self.k > 0 or self._probes % self.PLAIN_TIMED == 1:
                self._block = [k] * (self.PROBE - 1)
            return k
        return self.k

    def _choose(self, stats: Stats, rates: dict[int, float]) -> int:
        """The best length, unless the current one is within ``SWITCH_GAIN`` of it (a change costs graph work)."""
        b = self.best(stats, rates)
        cur = rates.get(self.k)
        if b != self.k and cur is not None and rates[b] < cur * (1 + self.SWITCH_GAIN):
            return self.k
        return b

    def _unexplored(self, stats: Stats, rates: dict[int, float]) -> int | None:
        """The next length to measure: 1 after k_max, then 0, then the current best or a neighbour of it."""
        for k in (1, 0):
            if k not in self._explored:
                return k
        b = self.best(stats, rates)
        return next((k for k in (b, b - 1, b + 1) if 0 <= k <= self.k_max and k not in self._explored), None)

    def observe(self, k: int, seconds: float) -> None:
        """A step given length ``k`` (0: plain) took ``seconds`` of wall time. The first ``WARMUP`` steps after a
        change of length are not kept: they pay for graph rebuilds and captures that a steady run does not."""
        self.n += 1
        self._run = self._run + 1 if k == self._last else 1
        self._last = k
        if self._run > self.WARMUP:
            self.times.setdefault(k, deque(maxlen=self.KEEP)).append(seconds)

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

    def rates(self, stats: Stats) -> dict[int, float]:
        """Expected tokens per second at each length measured or predicted."""
        line = self.cost()
        acc = stats.acceptance_at
        out, expected = {}, 1.0
        for k in range(0, self.k_max + 1):
            if k:
                expected += acc[k - 1] if k - 1 < len(acc) else 0.0
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
