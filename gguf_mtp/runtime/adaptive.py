"""``--spec-draft-n-max auto``: pick the draft length with the best measured tokens per second.

Expected tokens of a step that drafts k: ``E(k) = 1 + sum_{i<k} a_i``, where ``a_i`` is the share of steps whose
first i+1 drafts were all accepted (``Stats.acceptance_at``: already a prefix probability, so it is summed, not
multiplied again). Cost of a step: ``T(k) = c + d * k``, a straight line fitted to the median wall time of
recent whole steps at each length tried (verify, drafts, feed and our own work all included: a per-step cost
left out of the model would favour short drafts). The choice is ``argmax_k E(k) / T(k)`` over 1..k_max, never
below one draft.

Why it is shaped so: every change of length makes llama.cpp build the target's graph (and CUDA capture it)
again, and the first step at a new length pays for that. So exploration is short and in blocks: k_max first
(it also measures acceptance at every position), then 1 (the other end of the line); the first step of each
block is not timed, and medians drop other outliers; later, one probe at each end every ``PROBE_EVERY`` steps
keeps the deep acceptance current.
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

    def next(self, stats: Stats) -> int:
        """Draft length for the next step."""
        n, b = self.n, self.BLOCK
        if self.k_max == 1:
            return 1
        if n < b:
            return self.k_max
        if n < 2 * b:
            return 1
        phase = (n - 2 * b) % self.PROBE_EVERY
        if phase == self.PROBE_EVERY - 2 and self.k != self.k_max:
            return self.k_max
        if phase == self.PROBE_EVERY - 1 and self.k != 1:
            return 1
        self.k = self.best(stats)
        return self.k

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

    def best(self, stats: Stats) -> int:
        line = self.cost()
        if line is None:
            return self.k
        c, d = line
        acc = stats.acceptance_at
        best, best_rate, expected = 1, -1.0, 1.0
        for k in range(1, self.k_max + 1):
            expected += acc[k - 1] if k - 1 < len(acc) else 0.0
            t = c + d * k
            if t <= 0:
                continue
            rate = expected / t
            if rate > best_rate * 1.0001:  # ties go to the shorter draft
                best, best_rate = k, rate
        return best
