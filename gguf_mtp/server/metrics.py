"""Server-wide counters, rendered as Prometheus text (``GET /metrics``). Names follow llama-server's
``llamacpp:*`` metrics with a ``gguf_mtp_`` prefix, so the same dashboards read both."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ..runtime.stats import Stats


@dataclass
class _Item:
    name: str
    kind: str  # counter | gauge
    help: str
    value: float


class Metrics:
    """Updated by the engine thread, read by the HTTP thread: every access holds the lock."""

    PREFIX = "gguf_mtp_"

    def __init__(self, n_slots: int) -> None:
        self._lock = threading.Lock()
        self.n_slots = n_slots
        self.stats = Stats()  # merged over every finished or cancelled request
        self.requests = 0  # answered (finished, stopped or cut by the length limit)
        self.cancelled = 0  # the client went away, or the server shut down
        self.rejected = 0  # 4xx
        self.failed = 0  # 5xx
        self.prompt_cached = 0
        self.processing = 0
        self.deferred = 0
        self.batched_steps = 0  # steps of the scheduler (one batched step of every active slot)
        self.slot_steps = 0  # slot steps inside them

    def record(self, stats: Stats, cached: int, *, cancelled: bool) -> None:
        with self._lock:
            self.stats.merge(stats)
            self.prompt_cached += cached
            if cancelled:
                self.cancelled += 1
            else:
                self.requests += 1

    def count_error(self, status: int) -> None:
        with self._lock:
            if status >= 500:
                self.failed += 1
            else:
                self.rejected += 1

    def count_step(self, n_slots: int) -> None:
        with self._lock:
            self.batched_steps += 1
            self.slot_steps += n_slots

    def set_load(self, processing: int, deferred: int) -> None:
        with self._lock:
            self.processing, self.deferred = processing, deferred

    def snapshot(self) -> dict:
        """The same figures as a dict (for tests and the bench)."""
        with self._lock:
            return self.stats.to_dict() | {"requests": self.requests, "cancelled": self.cancelled,
                                           "rejected": self.rejected, "failed": self.failed,
                                           "prompt_cached": self.prompt_cached}

    def render(self) -> str:
        with self._lock:
            s = self.stats
            items = [
                _Item("requests_total", "counter", "Requests answered", self.requests),
                _Item("requests_cancelled_total", "counter", "Requests cancelled (client gone or shutdown)",
                      self.cancelled),
                _Item("requests_rejected_total", "counter", "Requests refused with a 4xx error", self.rejected),
                _Item("requests_failed_total", "counter", "Requests that failed with a 5xx error", self.failed),
                _Item("prompt_tokens_total", "counter", "Prompt tokens processed, excluding cached tokens",
                      s.prompt_tokens),
                _Item("prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache",
                      self.prompt_cached),
                _Item("prompt_seconds_total", "counter", "Time spent processing prompts", s.prompt_seconds),
                _Item("tokens_predicted_total", "counter", "Tokens generated", s.emitted),
                _Item("tokens_predicted_seconds_total", "counter", "Time spent generating tokens", s.decode_seconds),
                _Item("n_decode_steps_total", "counter", "Target decode steps (one verify of 1 + drafts each)",
                      s.steps),
                _Item("spec_decode_num_draft_tokens_total", "counter",
                      "Speculative: draft tokens proposed by the MTP head", s.drafted),
                _Item("spec_decode_num_accepted_tokens_total", "counter", "Speculative: draft tokens accepted",
                      s.accepted),
                _Item("spec_decode_num_drafts_total", "counter", "Speculative: verification steps with drafts",
                      sum(s.draft_lengths.values())),
                _Item("spec_decode_acceptance_ratio", "gauge", "Speculative: accepted / drafted", s.acceptance),
                _Item("tokens_per_step", "gauge", "Tokens emitted per target decode step that could draft (plain "
                      "steps that auto chose are left out)", s.mean_accepted_length),
                _Item("prompt_tokens_seconds", "gauge", "Prompt throughput in tokens/s", s.prompt_tps),
                _Item("predicted_tokens_seconds", "gauge", "Decode throughput in tokens/s", s.decode_tps),
                _Item("requests_processing", "gauge", "Requests in a slot", self.processing),
                _Item("requests_deferred", "gauge", "Requests waiting for a slot", self.deferred),
                _Item("slots", "gauge", "Parallel slots (-np)", self.n_slots),
                _Item("n_busy_slots_per_decode", "gauge", "Average number of slots stepped together in one batch",
                      self.slot_steps / self.batched_steps if self.batched_steps else 0.0),
            ]
            lines = []
            for it in items:
                n = self.PREFIX + it.name
                lines += [f"# HELP {n} {it.help}", f"# TYPE {n} {it.kind}", f"{n} {_fmt(it.value)}"]
            per_pos: list[tuple[str, str, str, Sequence[float]]] = [
                ("spec_decode_num_draft_tokens_per_pos_total", "counter",
                 "Speculative: draft tokens proposed at each draft position", s.drafted_at),
                ("spec_decode_num_accepted_tokens_per_pos_total", "counter",
                 "Speculative: draft tokens accepted at each draft position", s.accepted_at),
                ("spec_decode_acceptance_ratio_per_pos", "gauge",
                 "Speculative: acceptance at each draft position", s.acceptance_at)]
            for name, kind, help_, values in per_pos:
                if not values:
                    continue
                n = self.PREFIX + name
                lines += [f"# HELP {n} {help_}", f"# TYPE {n} {kind}"]
                lines += [f'{n}{{position="{i}"}} {_fmt(v)}' for i, v in enumerate(values)]
            return "\n".join(lines) + "\n"


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.6g}"
