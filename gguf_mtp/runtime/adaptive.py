"""``--spec-draft-n-max auto``: pick the draft length with the best measured tokens per second.

Expected tokens of a step that drafts k: ``E(k) = 1 + sum_{i<k} a_i``, where ``a_i`` is the share of steps whose
first i+1 drafts were all accepted (``Stats.acceptance_at``: already a prefix probability, so it is summed, not
multiplied again). Cost of a step ``T(k)``: the median wall time of recent whole steps at length k (verify, drafts,
feed and our own work all included: a per-step cost left out would favour short drafts); for a length not
measured yet, a straight line ``c + d * k`` through the lengths that are. The choice is ``argmax_k E(k) / T(k)``
over 1..k_max, never below one draft.

Why it is shaped so: every change of length makes llama.cpp build the target's graph (and CUDA capture it)
again, and the first step at a new length pays for that. So exploration is short and in blocks: k_max first
(it also measures acceptance at every position), then 1, then the best length and its neighbours until each of
them is measured. The line alone is not enough: on an H100 a step's cost bends upwards (k=4 costs more than the
line through k=1 and k=3 predicts), so a choice made on the line alone sat 9-18% below the best fixed length.
The first step of each block is not timed, and medians drop other outliers; later, one probe at each neighbour
of the choice every ``PROBE_EVERY`` steps keeps the times and the deep acceptance current.
"""

from __future__ import annotations

from collections import deque
from statistics import median

from .stats import Stats


class DraftLength:
    BLOCK = 3  # steps per exploration block (a median of 3 drops the graph-rebuild outlier)
    PROBE_EVERY = 32
    KEEP = 8  # recent step times kept per length

    def __init__(self, k_max: int) -> None:
        self.k_max = max(1, k_max)
        self.times: dict[int, deque[float]] = {}
        self.n = 0  # steps seen
        self.k = self.k_max
        self._last = -1  # draft length of the previous step
        self._block: list[int] = [self.k_max] * self.BLOCK  # lengths still to run in the current exploration block
        self._explored = {self.k_max}  # lengths measured or being measured (k_max is the first block)

    def next(self, stats: Stats) -> int:
        """Draft length for the next step."""
        if self.k_max == 1:
            return 1
        if self._block:
            return self._block.pop()
        if self._explored != set(range(1, self.k_max + 1)):
            k = self._unexplored(stats)
            if k is not None:  # one more block: the first step rebuilds the graph, the others are timed
                self._explored.add(k)
                self._block = [k] * (self.BLOCK - 1)
                return k
        self.k = self.best(stats)
        phase = self.n % self.PROBE_EVERY
        if phase == self.PROBE_EVERY - 2 and self.k < self.k_max:
            return self.k + 1  # also refreshes the acceptance of the next position
        if phase == self.PROBE_EVERY - 1 and self.k > 1:
            return self.k - 1
        return self.k

    def _unexplored(self, stats: Stats) -> int | None:
        """The next length to measure: 1 after k_max, then the current best or a neighbour of it."""
        if 1 not in self._explored:
            return 1
        b = self.best(stats)
        return next((k for k in (b, b - 1, b + 1) if 1 <= k <= self.k_max and k not in self._explored), None)

    def observe(self, k: int, seconds: float) -> None:
        """A step that drafted ``k`` tokens took ``seconds`` of wall time. The first step after a change of
        length is not kept: it pays for a graph rebuild that a steady run at that length does not."""
        self.n += 1
        warm, self._last = k == self._last, k
        if k > 0 and warm:
            self.times.setdefault(k, deque(maxlen=self.KEEP)).append(seconds)

    def cost(self) -> tuple[float, float] | None:
        """(c, d) of the line T(k) = c + d * k through the median step time at each length tried."""
        pts = [(k, median(v)) for k, v in self.times.items() if v]
        if len(pts) < 2:
            return None
        mk = sum(k for k, _ in pts) / len(pts)
        mt = sum(t for _, t in pts) / len(pts)
        var = sum((k - mk) ** 2 for k, _ in pts)
        d = sum((k - mk) * (t - mt) for k, t in pts) / var
        d = max(d, 0.0)  # a longer draft never costs less; noise must not make it look free or cheaper
        return mt - d * mk, d

    def step_time(self, k: int, line: tuple[float, float] | None) -> float | None:
        """Median measured time of a step at length ``k``, or the line's prediction where none is measured."""
        v = self.times.get(k)
        if v:
            return median(v)
        return None if line is None else line[0] + line[1] * k

    def best(self, stats: Stats) -> int:
        line = self.cost()
        if line is None:
            return self.k
        acc = stats.acceptance_at
        best, best_rate, expected = 1, -1.0, 1.0
        for k in range(1, self.k_max + 1):
            expected += acc[k - 1] if k - 1 < len(acc) else 0.0
            t = self.step_time(k, line)
            if t is None or t <= 0:
                continue
            rate = expected / t
            if rate > best_rate * 1.0001:  # ties go to the shorter draft
                best, best_rate = k, rate
        return best
