"""Speculative-decoding statistics: drafted and accepted per draft position, speeds, our own overhead, and
(with timings on) where each decode step's time goes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Breakdown:
    """Seconds summed over decode steps, by phase. Every llama_decode whose results are read is followed by a
    wait for the device, so ``launch`` (inside llama_decode: graph build or reuse, input upload, enqueue) plus
    the wait is the phase's llama.cpp time; ``read`` is taking the results on the host (sampled ids or logits
    and the host pick, hidden rows); ``python`` is the rest of the step. ``d2h_bytes``: what llama.cpp copies
    from the device for us (logits or sampled ids, hidden rows); ``h2d_bytes``: hidden rows we upload."""

    steps: float = 0.0  # wall time of the steps
    verify: float = 0.0  # target decode of [last, drafts]
    draft: list[float] = field(default_factory=list)  # MTP decode per draft position (0: with the merged feed)
    feed: float = 0.0  # MTP decodes that only feed (several heads; very long queues)
    read: float = 0.0
    launch: float = 0.0  # part of verify + draft + feed spent inside llama_decode before the wait
    d2h_bytes: int = 0
    h2d_bytes: int = 0
    decodes: int = 0  # llama_decode calls
    reused: int = 0  # of those, how many reused the previous compute graph of their context

    def add_draft(self, i: int, seconds: float) -> None:
        while len(self.draft) <= i:
            self.draft.append(0.0)
        self.draft[i] += seconds

    @property
    def python(self) -> float:
        return max(0.0, self.steps - self.verify - sum(self.draft) - self.feed - self.read)

    def merge(self, o: Breakdown, sign: int = 1) -> None:
        for k in ("steps", "verify", "feed", "read", "launch", "d2h_bytes", "h2d_bytes", "decodes", "reused"):
            setattr(self, k, getattr(self, k) + sign * getattr(o, k))
        for i, x in enumerate(o.draft):
            self.add_draft(i, sign * x)

    def per_step(self, n_steps: int) -> dict:
        """Milliseconds (and bytes, calls) per step."""
        n = max(1, n_steps)
        ms = lambda x: round(1000 * x / n, 3)  # noqa: E731
        draft = list(self.draft)
        while draft and draft[-1] <= 0:  # positions this span never drafted
            draft.pop()
        return {"step_ms": ms(self.steps), "verify_ms": ms(self.verify), "draft_ms": [ms(x) for x in draft],
                "feed_ms": ms(self.feed), "read_ms": ms(self.read), "python_ms": ms(self.python),
                "launch_ms": ms(self.launch), "d2h_bytes": round(self.d2h_bytes / n),
                "h2d_bytes": round(self.h2d_bytes / n), "decodes": round(self.decodes / n, 2),
                "reused": round(self.reused / n, 2)}


@dataclass
class Stats:
    n_draft_max: int = 0
    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    emitted: int = 0
    steps: int = 0  # target decode steps, plain ones included
    # steps that drafted nothing by choice though a head is loaded (``auto`` found plain decoding fastest, or the
    # context had no room left): they are in ``steps`` but not in ``draft_lengths`` nor the acceptance figures
    plain_steps: int = 0
    decode_seconds: float = 0.0
    llama_seconds: float = 0.0  # time inside llama_decode during generation
    rollback_seconds: float = 0.0  # restoring a saved recurrent state and decoding accepted tokens again
    replayed_tokens: int = 0  # accepted tokens decoded a second time (recurrent state without snapshots)
    drafted_at: list[int] = field(default_factory=list)   # drafts offered at position i (0-based)
    accepted_at: list[int] = field(default_factory=list)  # of those, accepted
    draft_lengths: dict[int, int] = field(default_factory=dict)  # drafted k -> steps (k >= 1; 0 is plain_steps)
    breakdown: Breakdown | None = None  # with timings on (SessionConfig.timings, GGUF_MTP_TIMINGS=1)

    def record(self, n_drafted: int, n_accepted: int) -> None:
        while len(self.drafted_at) < n_drafted:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(n_drafted):
            self.drafted_at[i] += 1
            if i < n_accepted:
                self.accepted_at[i] += 1
        self.draft_lengths[n_drafted] = self.draft_lengths.get(n_drafted, 0) + 1

    @property
    def drafted(self) -> int:
        return sum(self.drafted_at)

    @property
    def accepted(self) -> int:
        return sum(self.accepted_at)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def acceptance_at(self) -> list[float]:
        """Acceptance at each draft position that was drafted at all."""
        n = len(self.drafted_at)
        while n and not self.drafted_at[n - 1]:
            n -= 1
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at[:n], self.drafted_at[:n])]

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per target decode step (1 + accepted drafts), over the steps that could draft: a plain
        step (``plain_steps``, one token each) would only dilute what the head achieves. With no such step
        left (no head, or nothing but plain steps): tokens per step of all of them."""
        n = self.steps - self.plain_steps
        if n > 0 and self.plain_steps:
            return (self.emitted - self.plain_steps) / n
        return self.emitted / self.steps if self.steps else 0.0

    @property
    def decode_tps(self) -> float:
        return self.emitted / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds else 0.0

    @property
    def python_overhead(self) -> float:
        """Share of decode time spent outside llama.cpp (sampling, bookkeeping, ctypes)."""
        return max(0.0, 1 - self.llama_seconds / self.decode_seconds) if self.decode_seconds else 0.0

    def merge(self, o: Stats) -> None:
        self.prompt_tokens += o.prompt_tokens
        self.prompt_seconds += o.prompt_seconds
        self.emitted += o.emitted
        self.steps += o.steps
        self.plain_steps += o.plain_steps
        self.decode_seconds += o.decode_seconds
        self.llama_seconds += o.llama_seconds
        self.rollback_seconds += o.rollback_seconds
        self.replayed_tokens += o.replayed_tokens
        for i, (d, a) in enumerate(zip(o.drafted_at, o.accepted_at)):
            while len(self.drafted_at) <= i:
                self.drafted_at.append(0)
                self.accepted_at.append(0)
            self.drafted_at[i] += d
            self.accepted_at[i] += a
        for k, v in o.draft_lengths.items():
            self.draft_lengths[k] = self.draft_lengths.get(k, 0) + v
        if o.breakdown is not None:
            if self.breakdown is None:
                self.breakdown = Breakdown()
            self.breakdown.merge(o.breakdown)

    def copy(self) -> Stats:
        c = Stats(n_draft_max=self.n_draft_max)
        c.merge(self)
        return c

    def since(self, before: Stats) -> Stats:
        """What was added to these statistics after ``before`` (a copy taken earlier)."""
        d = Stats(n_draft_max=self.n_draft_max)
        for f in ("prompt_tokens", "prompt_seconds", "emitted", "steps", "plain_steps", "decode_seconds",
                  "llama_seconds", "rollback_seconds", "replayed_tokens"):
            setattr(d, f, getattr(self, f) - getattr(before, f))
        pad = lambda xs: xs + [0] * (len(self.drafted_at) - len(xs))  # noqa: E731
        d.drafted_at = [a - b for a, b in zip(self.drafted_at, pad(before.drafted_at))]
        d.accepted_at = [a - b for a, b in zip(self.accepted_at, pad(before.accepted_at))]
        d.draft_lengths = {k: v - before.draft_lengths.get(k, 0) for k, v in self.draft_lengths.items()
                           if v - before.draft_lengths.get(k, 0)}
        if self.breakdown is not None:
            d.breakdown = Breakdown()
            d.breakdown.merge(self.breakdown)
            if before.breakdown is not None:
                d.breakdown.merge(before.breakdown, -1)
        return d

    def to_dict(self) -> dict:
        d = asdict(self)
        d["breakdown"] = self.breakdown.per_step(self.steps) if self.breakdown is not None else None
        d.update(drafted=self.drafted, accepted=self.accepted, acceptance=round(self.acceptance, 4),
                 acceptance_at=[round(x, 4) for x in self.acceptance_at],
                 mean_accepted_length=round(self.mean_accepted_length, 3), decode_tps=round(self.decode_tps, 2),
                 prompt_tps=round(self.prompt_tps, 2), python_overhead=round(self.python_overhead, 4))
        return d

    def compact(self) -> str:
        """One line for chat: ``42 tok 31.2 t/s | drafted 60 accepted 38 (63%) by pos 80/62/41% | 2.1 tok/step``."""
        line = f"{self.emitted} tok {self.decode_tps:.1f} t/s, prompt {self.prompt_tps:.0f} t/s"
        if self.drafted:
            per = "/".join(f"{x * 100:.0f}" for x in self.acceptance_at)
            line += (f" | drafted {self.drafted} accepted {self.accepted} ({self.acceptance * 100:.0f}%), "
                     f"by position {per}% | {self.mean_accepted_length:.2f} tok/step")
        if self.plain_steps:
            line += f" | {self.plain_steps} of {self.steps} steps plain (no drafts)"
        if self.breakdown is not None and self.steps:
            b = self.breakdown.per_step(self.steps)
            drafts = "/".join(f"{x:.2f}" for x in b["draft_ms"])
            line += (f" | step {b['step_ms']:.2f} ms: verify {b['verify_ms']:.2f}"
                     + (f", drafts {drafts}" if drafts else "") + f", read {b['read_ms']:.2f}, "
                     f"python {b['python_ms']:.2f}")
        return line
