"""The inference thread: ``-np`` slots over one :class:`MTPSession`, a FIFO queue in front of them.

Each slot is a llama.cpp sequence with its own :class:`Engine` (tokens, pending hidden row, recurrent-state
rollback, statistics), so requests never share state and a slot keeps its last conversation cached: a new
request goes to the free slot whose cache shares the longest prefix with its prompt (multi-turn chats skip
the prompt they already sent). All llama.cpp calls happen on this one thread: each iteration processes
the prompts of newly admitted requests, then takes one speculative step of every active slot with their
decodes batched together (:class:`~gguf_mtp.runtime.multistep.MultiStep`: the step ``run`` takes, for a batch of
slots; a slot stepping alone decodes as ``run`` does). A job's cancel flag (client gone, shutdown) is honoured at
the next step.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import GgufMtpError
from ..runtime.multistep import MultiStep
from ..runtime.sampling import Sampler, SamplerConfig
from ..runtime.session import MTPSession
from ..runtime.speculative import Engine
from ..runtime.stats import Stats
from .metrics import Metrics
from .schemas import APIError
from .text import TextStream


@dataclass
class Defaults:
    """Sampling used when a request leaves a field out (the serve command's --temp, --top-k, ...)."""

    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    seed: int = -1  # < 0: a random seed per request
    n_predict: int = -1  # < 0: until end of generation or the slot's context is full
    # the serve command's --min-p, --repeat-penalty, ... (schemas.SAMPLING_FIELDS)
    min_p: float = 0.0
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    ignore_eos: bool = False


@dataclass
class Job:
    """One request: its prompt tokens and sampling, and the channel its events go back through."""

    tokens: list[int]
    sampling: SamplerConfig
    max_tokens: int
    stops: list[str]
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue  # ("text", str) | ("ids", list[int]) | ("done", dict) | ("error", APIError)
    ignore_eos: bool = False
    ids: list[int] | None = None  # llama-server's /completion "tokens": generated ids, each batch sent before its text
    cancelled: threading.Event = field(default_factory=threading.Event)
    t_arrival: float = field(default_factory=time.perf_counter)

    def emit(self, kind: str, value: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass


class _Slot:
    def __init__(self, engine: Engine, index: int = 0) -> None:
        self.index = index
        self.engine = engine
        self.job: Job | None = None
        self.dirty = False  # a failed step left the engine mid-way: start the next request afresh
        self.last_used = 0.0
        self.sampler: Sampler | None = None
        self.text: TextStream | None = None
        self.before: Stats | None = None
        self.n = 0
        self.cached = 0
        self.t_prompt = self.t_gen0 = self.t_first = 0.0
        self.stop_type = "none"  # llama-server's: eos | word | limit
        self.unsent: list[int] = []  # ids generated since the last text event (jobs that want ids)
        self.n_decoded_last = 0  # tokens the last request generated (GET /slots)

    def common_prefix(self, tokens: list[int]) -> int:
        return 0 if self.dirty else self.engine.matching_prefix(tokens)


class Scheduler:
    """Owns the session from :meth:`start` to :meth:`close`; ``submit`` may be called from any thread."""

    def __init__(self, session: MTPSession, metrics: Metrics) -> None:
        self.session = session
        self.metrics = metrics
        self.slots = [_Slot(e, i) for i, e in enumerate(session.engines)]
        self.multi = MultiStep(session.engines)
        self.n_ctx_seq = session.engine.n_ctx
        self.n_draft_max = session.engine.n_draft_max
        self._pending: deque[Job] = deque()
        self._cv = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="gguf-mtp-engine", daemon=True)
        self._is_eog: Callable[[int], bool] = session.model.is_eog
        self._piece = session.model.piece

    # -- called from the HTTP side ---------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._closing:
                raise APIError(503, "the server is shutting down", type="unavailable_error", code="shutting_down")
            self._pending.append(job)
            self._cv.notify()

    def closing(self) -> bool:
        """Whether shutdown has begun (asked by requests being prepared, so that they stop early)."""
        return self._closing

    def cancel_all(self) -> None:
        """Shutdown: refuse new work, cancel what is queued or running (the thread then exits)."""
        with self._cv:
            self._closing = True
            for j in self._pending:
                j.cancelled.set()
            for s in self.slots:
                if s.job is not None:
                    s.job.cancelled.set()
            self._cv.notify()

    def close(self) -> None:
        self.cancel_all()
        if self._thread.is_alive():
            self._thread.join()

    # -- the inference thread --------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not any(s.job for s in self.slots) and not self._closing:
                    self.metrics.set_load(0, 0)
                    self._cv.wait()
                if self._closing:
                    while self._pending:
                        self._pending.popleft().emit("error", _shutdown_error())
                admitted = []
                free = [s for s in self.slots if s.job is None]
                while self._pending and free:
                    job = self._pending.popleft()
                    slot = max(free, key=lambda s: (s.common_prefix(job.tokens), -s.last_used))
                    free.remove(slot)
                    slot.job = job
                    admitted.append(slot)
                active = [s for s in self.slots if s.job is not None]
                self.metrics.set_load(len(active), len(self._pending))
                if self._closing and not active:
                    return
            for slot in admitted:
                self._guard(slot, self._begin)
            stepping = []
            for slot in active:  # in sequence order: llama.cpp splits a batch by consecutive sequence ids
                if slot.job is None:
                    continue
                if slot.job.cancelled.is_set():
                    self._finish(slot, "cancelled")
                elif slot.engine.n_ctx - len(slot.engine.tokens) - 1 < 1:
                    slot.stop_type = "limit"
                    self._finish(slot, "length", truncated=True)  # the slot's context is full
                else:
                    stepping.append(slot)
            if stepping:
                self._step(stepping)

    def _guard(self, slot: _Slot, fn: Callable[[_Slot], None]) -> None:
        """Start a job (its prompt); a cancelled job ends here, and a failure becomes a 500 for that job only."""
        job = slot.job
        assert job is not None
        if job.cancelled.is_set():
            self._finish(slot, "cancelled")
            return
        try:
            fn(slot)
        except GgufMtpError as e:
            slot.dirty = True
            self._fail(slot, APIError(500, f"generation failed: {e}", type="server_error", code="engine_error"))
        except Exception as e:  # a bug: this request fails, the server keeps serving  # noqa: BLE001
            slot.dirty = True
            self._fail(slot, APIError(500, f"internal error: {type(e).__name__}: {e}", type="server_error",
                                      code="internal_error"))

    def _begin(self, slot: _Slot) -> None:
        job, e = slot.job, slot.engine
        assert job is not None
        if slot.dirty:
            e.reset()
            slot.dirty = False
        slot.before = e.stats.copy()
        slot.sampler = Sampler(job.sampling)
        slot.text = TextStream(job.stops)
        slot.n = 0
        t0 = time.perf_counter()
        slot.dirty = True  # until the prompt is in
        slot.cached = e.sync(job.tokens)
        slot.dirty = False
        slot.t_gen0 = time.perf_counter()
        slot.t_prompt = slot.t_gen0 - t0

    def _step(self, slots: list[_Slot]) -> None:
        """One speculative step of every active slot, their decodes batched together."""
        t0 = time.perf_counter()
        try:
            # [type: ignore] every active slot has its job's sampler
            outs = self.multi.step([s.engine for s in slots], [s.sampler for s in slots])  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 - llama.cpp failed mid-step: these requests fail, the server goes on
            msg = (f"generation failed: {e}" if isinstance(e, GgufMtpError)
                   else f"internal error: {type(e).__name__}: {e}")
            for slot in slots:
                slot.dirty = True
                self._fail(slot, APIError(500, msg, type="server_error", code="engine_error"))
            return
        self.metrics.count_step(len(slots))
        share = (time.perf_counter() - t0) / len(slots)
        for slot, emitted in zip(slots, outs):
            slot.engine.stats.decode_seconds += share
            self._consume(slot, emitted)

    def _consume(self, slot: _Slot, emitted: list[int]) -> None:
        job, e, text = slot.job, slot.engine, slot.text
        assert job is not None and text is not None
        for t in emitted:
            slot.n += 1
            e.stats.emitted += 1
            if slot.n == 1:
                slot.t_first = time.perf_counter()
            if self._is_eog(t) and not job.ignore_eos:
                slot.stop_type = "eos"
                self._finish(slot, "stop")
                return
            if job.ids is not None:
                job.ids.append(t)
                slot.unsent.append(t)
            delta = text.push(self._piece(t))
            if delta or slot.n == 1:  # the first token always makes an event: clients see generation start (TTFT)
                if slot.unsent:
                    job.emit("ids", slot.unsent)
                    slot.unsent = []
                job.emit("text", delta)  # even where its text is held back (a split character, a stop's prefix)
            if text.stopped:
                slot.stop_type = "word"
                self._finish(slot, "stop")
                return
            if slot.n >= job.max_tokens:
                slot.stop_type = "limit"
                self._finish(slot, "length")
                return

    def _finish(self, slot: _Slot, reason: str, truncated: bool = False) -> None:
        job, e = slot.job, slot.engine
        assert job is not None
        cancelled = reason == "cancelled"
        if slot.text is not None and not cancelled:
            tail = slot.text.finish()
            if slot.unsent:
                job.emit("ids", slot.unsent)
            if tail or slot.unsent:
                job.emit("text", tail)
        stats = e.stats.since(slot.before) if slot.before is not None else Stats()
        self.metrics.record(stats, slot.cached, cancelled=cancelled)
        now = time.perf_counter()
        gen_s = now - slot.t_gen0 if slot.t_gen0 else 0.0
        prompt_n = len(job.tokens) - slot.cached
        timings = {
            "cache_n": slot.cached,
            "prompt_n": prompt_n,
            "prompt_ms": slot.t_prompt * 1e3,
            "prompt_per_token_ms": slot.t_prompt * 1e3 / prompt_n if prompt_n else 0.0,
            "prompt_per_second": prompt_n / slot.t_prompt if slot.t_prompt else 0.0,
            "predicted_n": slot.n,
            "predicted_ms": gen_s * 1e3,
            "predicted_per_token_ms": gen_s * 1e3 / slot.n if slot.n else 0.0,
            "predicted_per_second": slot.n / gen_s if gen_s else 0.0,
            "draft_n": stats.drafted,
            "draft_n_accepted": stats.accepted,
        }
        if cancelled:
            job.emit("error", _shutdown_error() if self._closing else APIError(499, "request cancelled"))
        else:
            first = (slot.t_first - job.t_arrival) * 1e3 if slot.t_first else None
            job.emit("done", {"finish_reason": reason, "prompt_tokens": len(job.tokens), "completion_tokens": slot.n,
                              "timings": timings, "stats": stats, "slot": slot.index, "ttft_ms": first,
                              "stop_type": slot.stop_type, "truncated": truncated,
                              "stopping_word": slot.text.word if slot.text is not None else ""})
        self._release(slot)

    def _fail(self, slot: _Slot, err: APIError) -> None:
        assert slot.job is not None
        self.metrics.count_error(err.status)
        slot.job.emit("error", err)
        self._release(slot)

    def _release(self, slot: _Slot) -> None:
        slot.job, slot.text, slot.sampler, slot.before = None, None, None, None
        slot.t_gen0 = slot.t_prompt = slot.t_first = 0.0
        slot.n_decoded_last = slot.n
        slot.n = slot.cached = 0
        slot.stop_type = "none"
        slot.unsent = []
        slot.last_used = time.perf_counter()


def _shutdown_error() -> APIError:
    return APIError(503, "the server is shutting down; the generation was cancelled", type="unavailable_error",
                    code="shutting_down")


def random_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")  # 32 bits: llama.cpp seeds are uint32
