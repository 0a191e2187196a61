"""A dependency-free progress line for long jobs: bytes and tensors done, rate, ETA."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def _clock(s: float) -> str:
    s = int(max(0, s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress:
    """Prints ``label  42%  1.10/2.61 GiB  87/291 tensors  512 MiB/s  ETA 0:00:03`` to ``stream``.

    On a terminal the line redraws in place a few times a second; elsewhere (logs, CI) a new line
    is printed every ``log_every`` seconds. ``enabled=False`` silences it.
    """

    def __init__(self, label: str, total_bytes: int, total_tensors: int, *, stream: TextIO | None = None,
                 enabled: bool = True, log_every: float = 5.0) -> None:
        self.label, self.total_bytes, self.total_tensors = label, max(1, total_bytes), total_tensors
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.interval = 0.2 if self.tty else log_every
        self.done_bytes = 0
        self.done_tensors = 0
        self.t0 = time.perf_counter()
        self._last = 0.0

    def advance(self, nbytes: int) -> None:
        self.done_bytes += nbytes
        self._maybe_draw()

    def tensor_done(self) -> None:
        self.done_tensors += 1
        self._maybe_draw()

    def line(self) -> str:
        dt = max(1e-9, time.perf_counter() - self.t0)
        rate = self.done_bytes / dt
        frac = min(1.0, self.done_bytes / self.total_bytes)
        eta = (self.total_bytes - self.done_bytes) / rate if rate > 0 else 0
        return (f"{self.label} {frac * 100:5.1f}%  {human_bytes(self.done_bytes)}/{human_bytes(self.total_bytes)}  "
                f"{self.done_tensors}/{self.total_tensors} tensors  {human_bytes(rate)}/s  ETA {_clock(eta)}")

    def _maybe_draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line())
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> float:
        """Finish the line; returns elapsed seconds."""
        elapsed = time.perf_counter() - self.t0
        if self.enabled:
            self._maybe_draw(force=True)
            if self.tty:
                self.stream.write("\n")
            self.stream.flush()
        return elapsed
