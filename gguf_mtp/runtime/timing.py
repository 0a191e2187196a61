"""Where a decode step's time goes (``--perf``, ``SessionConfig.timings``), recorded by an object the engine
calls at each phase: :class:`StepTimer` adds to a :class:`~.stats.Breakdown`, :data:`NO_TIMING` does nothing, so
the engine's step has no "am I timing" branches. Timing also waits for the device after every decode
(``sync``): a back-end that runs asynchronously would otherwise leave its time to whichever phase waits next."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .stats import Breakdown


class _Sampled(Protocol):  # sampling.ContextSampler, as far as the byte count needs it
    on_device: bool


class NoTiming:
    """Records nothing; the engine's default."""

    sync = False  # decodes whose results are not read next need no wait
    breakdown: Breakdown | None = None

    def begin(self) -> None:
        """A step starts."""

    def decode(self, launch: float, h2d_rows: int) -> None:
        """A decode inside a step: ``launch`` seconds inside llama_decode, ``h2d_rows`` hidden rows uploaded."""

    def draft(self, i: int, seconds: float) -> None:
        """The MTP decode of draft position ``i``."""

    def feed(self, seconds: float) -> None:
        """MTP decodes that only feed the head."""

    def verify(self, seconds: float) -> None:
        """The target's verify decode."""

    def read(self, seconds: float) -> None:
        """Taking results on the host (sampled ids or logits and the pick, hidden rows)."""

    def d2h(self, smp: _Sampled, n_vocab: int, n_out: int, n_rows: int) -> None:
        """llama.cpp brought back ``n_out`` outputs of ``smp`` (ids, or logits rows) and ``n_rows`` hidden rows."""

    def step(self, seconds: float) -> None:
        """The step since :meth:`begin` took ``seconds``."""


class StepTimer(NoTiming):
    """Adds every phase to ``breakdown``."""

    sync = True

    def __init__(self, breakdown: Breakdown, n_embd: int, graphs_reused: Callable[[], int]) -> None:
        """``graphs_reused``: llama.cpp's count of decodes that reused their graph, on the step's contexts."""
        self.breakdown: Breakdown = breakdown
        self.row_bytes = n_embd * 4
        self.graphs_reused = graphs_reused
        self.reused0 = 0

    def begin(self) -> None:
        self.reused0 = self.graphs_reused()

    def decode(self, launch: float, h2d_rows: int) -> None:
        breakdown = self.breakdown
        breakdown.launch += launch
        breakdown.decodes += 1
        breakdown.h2d_bytes += h2d_rows * self.row_bytes

    def draft(self, i: int, seconds: float) -> None:
        self.breakdown.add_draft(i, seconds)

    def feed(self, seconds: float) -> None:
        self.breakdown.feed += seconds

    def verify(self, seconds: float) -> None:
        self.breakdown.verify += seconds

    def read(self, seconds: float) -> None:
        self.breakdown.read += seconds

    def d2h(self, smp: _Sampled, n_vocab: int, n_out: int, n_rows: int) -> None:
        per = 4 if smp.on_device else 4 * n_vocab
        self.breakdown.d2h_bytes += n_out * per + n_rows * self.row_bytes

    def step(self, seconds: float) -> None:
        self.breakdown.steps += seconds
        self.breakdown.reused += self.graphs_reused() - self.reused0


NO_TIMING = NoTiming()

__all__ = ["NoTiming", "StepTimer", "NO_TIMING"]
