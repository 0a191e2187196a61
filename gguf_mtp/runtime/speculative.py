"""The draft / verify loop with an MTP head (or plain decoding when there is none).

State between steps: the target holds positions ``0..n_past-1``; ``id_last`` (the last emitted token) is not
decoded yet; ``pending_h`` is the target's hidden row at ``n_past-1``. The MTP context holds positions up to
the start of its *queue*: tokens the target has verified, each paired with the target's hidden row of the
position before, waiting in the MTP batch to go out with the next MTP decode. One step:

1. draft: the MTP context decodes its queue plus ``(id_last, pending_h)`` at ``n_past`` in one batch (the feed
   and the first draft share a decode), then its own outputs, greedily, up to ``k`` tokens (stopping early
   below ``p_min``); the draft positions are dropped again;
2. verify: the target decodes ``[id_last, d0..dk-1]`` in one batch; the target's sampler picks each emitted
   token from those rows, and a draft token is accepted while it equals the token the sampler picked;
3. roll the target back to the accepted prefix through its ``Rollback`` (rollback.py: a KV cache or ``n_rs_seq``
   recurrent snapshots step back by themselves; a recurrent state without snapshots is restored from a saved
   copy and the accepted tokens are decoded again, possibly ahead of the next verify batch: ``rollback.prefix``),
   and queue the accepted drafts for the MTP context with the target's hidden rows (shifted by one).

The step is written once, batched: :func:`batch_step` steps several sequences (server slots, through
:class:`~.multistep.MultiStep`) or one (:meth:`Engine.step`, which ``run`` and the Python API use) with the same
code and, for one, the same decodes and shapes. It is made of public operations (:meth:`Engine.begin_step`,
:meth:`~Engine.draft_length`, the proposer's ``propose``, :meth:`~Engine.add_verify`, :meth:`~Engine.accept`,
:meth:`~Engine.commit`); the head's side (its queue, drafts, stable shapes) is the engine's proposer
(``proposer.py``: the null one without a head), and per-phase timing a recorder (``timing.py``).

Both samplers are llama.cpp sampler chains that run inside the decode graph where the back-end can
(``sampling.py``): only token ids come back, no vocabulary-sized logits. Every emitted token comes from the
target's sampler on the target's rows, so output is identical to plain decoding (which uses the same sampler)
for greedy and for seeded sampling. That is also why ``prompt_window`` is safe: the MTP context may see only
the end of a prompt (its cost on long prompts is one full-attention layer per token), and worse drafts only
lower acceptance.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from statistics import median

import numpy as np

from ..errors import GgufMtpError
from .adaptive import DraftLength
from .config import DEFAULT_DRAFT
from .llama import Batch, Context
from .proposer import MtpProposer, Proposer
from .rollback import Rollback
from .sampling import ContextSampler, Sampler, context_sampler
from .stats import Breakdown, Stats
from .timing import NO_TIMING, NoTiming, StepTimer

_clock = time.perf_counter


class Engine:
    """Decoding state of one conversation on a target context (and optionally an MTP context)."""

    def __init__(self, target: Context, mtp: Context | None, *, n_draft: int = DEFAULT_DRAFT, p_min: float = 0.0,
                 adaptive: bool = False, prompt_window: int = 0, seq: int = 0, rollback: Rollback | None = None,
                 timings: bool | None = None, device_sampling: bool = True, stable_shapes: bool = False,
                 chained_drafts: bool = False, device_tokens: bool = False, device_feed: bool = False) -> None:
        self.tgt = target
        # the llama.cpp sequence this conversation lives in (one per server slot); both contexts use the same id
        self.seq = seq
        self.n_ctx = target.n_ctx_seq
        self.rollback = rollback or Rollback(target, "kv", seq=seq)
        # >0: the MTP context gets only the last ``prompt_window`` tokens of each prompt. The head's prompt
        # cost is then bounded by the window instead of growing with the prompt; drafts may be worse early
        # on, output is unchanged (the target verifies every draft).
        self.prompt_window = max(0, prompt_window)
        self.device_sampling = device_sampling
        self.tokens: list[int] = []  # decoded into the target, position = index
        self.id_last: int | None = None
        #: who drafts: the MTP head, or (none) a proposer of plain steps only
        self.head: Proposer = (MtpProposer(self, mtp, n_draft, p_min, device_sampling=device_sampling,
                                           stable_shapes=stable_shapes, chained=chained_drafts,
                                           device_tokens=device_tokens, device_feed=device_feed)
                               if mtp is not None else Proposer())
        head = self.head
        # the head's parts, by the names callers read
        self.mtp, self.mbatch, self.msampler = head.ctx, head.mbatch, head.msampler
        self.chain, self.n_heads, self.n_draft_max = head.chain, head.n_heads, head.n_draft_max
        self.adaptive = DraftLength(self.n_draft_max) if adaptive and self.n_draft_max else None
        n_embd = target.model.n_embd_out
        self.tbatch = Batch(max(target.n_batch, self.n_draft_max + 1), seq=seq)
        self.stats = Stats(n_draft_max=self.n_draft_max)
        self.k = self.n_draft_max
        if timings is None:
            timings = os.environ.get("GGUF_MTP_TIMINGS", "") not in ("", "0")
        #: where each step's time goes (``--perf``): a recorder the step calls at each phase, a no-op when off
        self.timing: NoTiming = StepTimer(Breakdown(), n_embd, self._reused) if timings else NO_TIMING
        self.stats.breakdown = self.timing.breakdown
        self.tsampler: ContextSampler = context_sampler(target, seq)
        self._sampler: Sampler | None = None  # the one the target samples with now
        self._n_pre = 0  # tokens the target decodes again ahead of this step's verify rows (rollback.prefix)

    # -- low-level ---------------------------------------------------------------------------
    def decode(self, ctx: Context, batch: Batch, *, wait: bool = True, in_step: bool = True) -> float:
        """Decode; with ``wait`` also wait for the device (GPU back-ends run async), so the time is llama.cpp's.
        Decodes whose results are read next wait anyway; the others need not. ``in_step``: count it in the
        step breakdown (prompt decodes are not)."""
        t = _clock()
        ctx.decode_batch(batch)
        t1 = _clock()
        timing = self.timing
        if wait or timing.sync:
            ctx.synchronize()
        spent = _clock() - t
        if in_step:
            self.stats.llama_seconds += spent
            timing.decode(t1 - t, batch.n if batch.embd is not None else 0)
        return spent

    def _reused(self) -> int:
        return self.tgt.graphs_reused() + self.head.graphs_reused()

    # -- warm-up -----------------------------------------------------------------------------
    def warm_up(self, prompt: Sequence[int]) -> None:
        """Run once, before the first answer, the decodes a first answer will use: a short prompt, plain steps
        and verify steps with the head's decodes at every draft length this engine can choose (a fixed length: that
        one). Back-ends pay for a shape's first use (CUDA: loading kernels, pools, capturing graphs) and llama.cpp's
        own tools pay it at load with a decode of their own, so a first answer that paid it would be measured
        slower than theirs. Nothing of it stays but, under auto, the controller's step times (the later steps at
        each length are timed): the context is cleared, and no token or statistic remains. ``prompt``: a few
        tokens of ordinary text (``Model.warmup_tokens``)."""
        if not prompt:
            raise ValueError("warm_up needs a prompt of at least one token")
        kept = self.adaptive, self.k, self.stats, self.timing
        lengths = list(range(self.n_draft_max, 0, -1)) if self.adaptive is not None else [self.k]
        # auto: past the steps that rebuild and capture a shape's graph, three more are timed at every length, so
        # the first answer need not explore them (nor open with a block at k_max: DraftLength.seed_times). The
        # head's graph settles a step after the target's (its first decode after a prompt takes the prompt's
        # queue, a shape of its own), so one more step is left untimed; the median of three drops a slow one.
        untimed = DraftLength.WARMUP + 1
        n_steps = untimed + (3 if self.adaptive is not None else 0)
        times: dict[int, list[float]] = {}
        switch: float | None = None
        self.adaptive, self.timing = None, NO_TIMING
        self.stats = Stats(n_draft_max=self.n_draft_max)
        try:
            self.use_sampler(Sampler(None))
            for k in [*(lengths if self.n_draft_max else []), 0]:
                self.reset()
                self.k = k
                self.feed(list(prompt))  # a batch, then the queue to the head
                for i in range(n_steps):  # at least two: the second drafts from a queue fed by the first's verify
                    t = _clock()
                    self.step()
                    if i >= untimed:
                        times.setdefault(k, []).append(_clock() - t)
                if kept[0] is not None and len(lengths) > 1 and k == lengths[-1]:
                    # auto: what a change between drafting lengths costs once their shapes ran (from 1 to the
                    # longest; leaving plain decoding would also send the head the tokens queued meanwhile)
                    self.k = lengths[0]
                    spent = 0.0
                    for _ in range(DraftLength.WARMUP):
                        t = _clock()
                        self.step()
                        spent += _clock() - t
                    switch = spent - DraftLength.WARMUP * median(times[lengths[0]])
        finally:
            self.reset()
            self.adaptive, self.k, self.stats, self.timing = kept
        if self.adaptive is not None:
            self.adaptive.seed_times(times)
            if switch is not None:
                self.adaptive.seed_switch(switch)

    # -- prompt ------------------------------------------------------------------------------
    def reset(self) -> None:
        self.tgt.clear(self.seq)
        self.rollback.reset()
        self.head.reset()
        self.tokens, self.id_last = [], None

    def feed(self, new_tokens: Sequence[int]) -> None:
        """Append tokens to the conversation; the last one becomes ``id_last`` (decoded with the next step)."""
        if not new_tokens:
            return
        t0 = _clock()
        self.rollback.flush(self.tokens)
        toks = ([self.id_last] if self.id_last is not None else []) + list(new_tokens)
        body, last = toks[:-1], toks[-1]
        n = self.tgt.n_batch
        end = len(self.tokens) + len(body)
        head = self.head
        # first position the MTP context is given; the hidden row of the position before it is still needed
        start = head.prompt_start(len(self.tokens), end, self.prompt_window)
        check = self._prompt_check(start, end)
        picks: dict[int, int] = {}  # the target's own pick after each checked position
        try:
            for c in range(0, len(body), n):
                chunk = body[c:c + n]
                pos0 = len(self.tokens)
                if pos0 + len(chunk) + self.n_draft_max + 1 > self.n_ctx:
                    raise ContextFull(self.n_ctx)
                # chunks wholly before the window need no hidden rows: skip their device-to-host copy
                rows_needed = pos0 + len(chunk) >= start
                head.rows_for(rows_needed)
                b = self.tbatch
                b.fill(chunk, pos0)
                # checked only in the last chunk: its positions are still in the head's queue when it is flushed
                lo = max(check, pos0) - pos0 if check is not None and c + n >= len(body) else len(chunk)
                b.logits_np[lo:len(chunk)] = 1
                self.decode(self.tgt, b, wait=rows_needed, in_step=False)
                for i in range(lo, len(chunk)):
                    picks[pos0 + i] = self.tsampler.sample(i)  # greedy: no state to advance
                if rows_needed:
                    head.take_prompt(chunk, pos0, self.tgt.h_rows(len(chunk)), start)
                self.tokens.extend(chunk)
            checked, right = head.flush_prompt(picks)
            if checked and self.adaptive is not None:
                self.adaptive.seed_prompt(checked, right)
        finally:
            head.end_prompt()
        self.tgt.synchronize()
        head.synchronize()
        self.id_last = last
        self.stats.prompt_tokens += len(new_tokens)
        self.stats.prompt_seconds += _clock() - t0

    def _prompt_check(self, start: int, end: int) -> int | None:
        """First position of the prompt (which ends at ``end``; the head is given it from ``start``) at which auto
        checks the head's first draft against the target's pick before its first choice (``DraftLength.
        seed_prompt``), or None: no check. Only under a greedy chain, whose pick is the argmax and advances no state
        (the chain left from the warm-up or the last answer: the next answer's comes after its prompt)."""
        a, smp, mtp = self.adaptive, self.tsampler, self.head.ctx
        if (a is None or mtp is None or not a.wants_prompt() or not self.head.checks_prompt or smp.chain is None
                or smp.key is None or smp.key[0] is not None or smp.on_logits is not None):
            return None
        if min(self.tgt.n_outputs_per_seq, mtp.n_outputs_per_seq) < a.PROMPT_ROWS:  # contexts not made for them
            return None
        # the head's row at ``start`` has no hidden row before it when the prompt starts there
        return max(end - a.PROMPT_ROWS, start, 1)

    def rewind(self, n_keep: int) -> bool:
        """Keep the first ``n_keep`` decoded tokens; False when the state cannot roll back that far."""
        if n_keep >= len(self.tokens):
            return True
        if n_keep == 0:
            self.reset()
            return True
        if not self.head.can_rewind(n_keep) or not self.rollback.truncate(self.tokens, n_keep):
            return False
        self.head.rewind(n_keep, len(self.tokens))
        del self.tokens[n_keep:]
        self.id_last = None
        return True

    def matching_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the conversation already holds (its decoded tokens, then the pending one)."""
        history = self.tokens + ([self.id_last] if self.id_last is not None else [])
        n = 0
        for a, b in zip(history, tokens):
            if a != b:
                break
            n += 1
        return n

    def sync(self, tokens: Sequence[int]) -> int:
        """Make the conversation equal ``tokens`` (the last one left pending), reusing the longest common prefix
        with what is already decoded; returns how many tokens were reused."""
        common = min(self.matching_prefix(tokens), len(tokens) - 1)  # always leave a token to decode
        if common > len(self.tokens):  # id_last matches: keep it pending
            self.feed(tokens[common:])
            return common
        if not self.rewind(common):
            self.reset()
            common = 0
        self.id_last = None
        self.feed(tokens[common:])
        return common

    # -- one step, in the operations the batched step (batch_step) runs for each of its sequences ----------
    def begin_step(self, sampler: Sampler | None = None) -> int:
        """Check that a step can run, and sample it with ``sampler`` (or the one given last); returns the room
        left in the context after ``id_last``."""
        if self.id_last is None:
            raise GgufMtpError("nothing to decode: feed a prompt first")
        if sampler is not None:
            self.use_sampler(sampler)
        if self._sampler is None:
            raise GgufMtpError("no sampler: call use_sampler() or generate()")
        room = self.n_ctx - len(self.tokens) - 1
        if room < 1:
            raise ContextFull(self.n_ctx)
        return room

    def draft_length(self, room: int, chosen: int | None = None) -> int:
        """This step's draft length: ``chosen`` (a batched step's shared one), else fixed or auto's choice; at most
        ``room`` - 1, and 0 without a head."""
        if not self.n_draft_max:
            return 0
        return min(self._next_k() if chosen is None else chosen, room - 1)

    def add_verify(self, batch: Batch, drafts: Sequence[int]) -> int:
        """Append this sequence's verify rows to ``batch``: the accepted tokens the target must decode again first
        (``rollback.prefix``; a step without drafts has nothing to roll back), then ``id_last`` and the drafts,
        each with an output. Returns the batch index of ``id_last``'s row."""
        last = self.id_last
        assert last is not None  # begin_step checked it
        n_past, seq = len(self.tokens), (None if batch is self.tbatch else self.seq)
        pre = self.rollback.prefix(self.tokens, drafts=bool(drafts))
        self._n_pre = len(pre)
        for i, tok in enumerate(pre):
            batch.add(tok, n_past - len(pre) + i, logits=False, seq=seq)
        row = batch.add(last, n_past, logits=True, seq=seq)
        for i, d in enumerate(drafts):
            batch.add(d, n_past + 1 + i, logits=True, seq=seq)
        return row

    def accept(self, row: int, drafts: Sequence[int]) -> list[int]:
        """The target's tokens from its rows at ``row``..: a draft is accepted while it equals the token the target's
        sampler picked; the last token is the first pick that differs (or the one after every draft)."""
        emitted: list[int] = []
        sample = self.tsampler.sample
        for i in range(len(drafts) + 1):
            tok = sample(row + i)
            emitted.append(tok)
            if i >= len(drafts) or tok != drafts[i]:
                break
        return emitted

    def commit(self, drafts: list[int], emitted: list[int], rows: np.ndarray | None, *, k: int, held: int) -> None:
        """Take the step's outcome: the accepted tokens join the conversation, the target rolls back the rejected
        drafts, and the head gets the verified tokens with the target's hidden ``rows`` of ``[id_last, drafts]``
        (None without a head). ``held``: how many of those tokens the MTP context holds at ``n_past`` already (the
        rejected ones leave it; the rest wait in its queue for the next MTP decode). ``k``: the draft length the
        step was given."""
        last = self.id_last
        assert last is not None
        n_past, j = len(self.tokens), len(emitted) - 1
        self.head.commit(self.stats, last, drafts, j, rows, n_past, k=k, held=held, bonus=emitted[-1])
        self.tokens.append(last)
        self.tokens.extend(drafts[:j])
        spent, replayed = self.rollback.settle(self.tokens, n_past + len(drafts) + 1)
        stats = self.stats
        stats.llama_seconds += spent
        stats.rollback_seconds += spent
        stats.replayed_tokens += replayed + self._n_pre
        self.id_last = emitted[-1]
        stats.steps += 1

    def step(self, sampler: Sampler | None = None) -> list[int]:
        """One target decode; returns the emitted tokens (1 + accepted drafts). Samples with ``sampler``, or the
        one given last (``use_sampler``; ``generate`` sets it). The batched step, for a batch of one."""
        return batch_step((self,), (sampler,))[0]

    def use_sampler(self, sampler: Sampler) -> None:
        """Sample the target with ``sampler`` from now on; a seeded chain starts from its seed again when
        ``sampler`` is a new one (a generation, a server job), not when the same one is passed again."""
        if sampler is self._sampler:
            return
        self._sampler = sampler
        # the context's tokens are the prompt: the penalties count them, as llama.cpp's tools do
        history = self.tokens + [self.id_last] if self.id_last is not None else self.tokens
        self.tsampler.use(None if sampler.greedy else sampler.cfg, device=self.device_sampling and sampler.device,
                          on_logits=sampler.on_logits, history=history)

    def generate(self, sampler: Sampler, max_tokens: int, is_eog: Callable[[int], bool],
                 should_stop: Callable[[], bool] = lambda: False) -> Iterator[int]:
        """Emit up to ``max_tokens`` tokens, stopping after an end-of-generation token."""
        n = 0
        t0 = _clock()
        self.use_sampler(sampler)
        try:
            while n < max_tokens and not should_stop():
                for t in self.step():
                    n += 1
                    self.stats.emitted += 1
                    yield t
                    if is_eog(t) or n >= max_tokens:
                        return
        finally:
            self.stats.decode_seconds += _clock() - t0

    # -- draft length ------------------------------------------------------------------------
    def _next_k(self) -> int:
        """Draft length for the next step: fixed, or chosen by the measured rate (``adaptive.py``)."""
        if self.adaptive is None:
            return self.k
        self.k = self.adaptive.next(self.stats)
        return self.k

    def adopt_stats(self, stats: Stats) -> None:
        """Carry on counting into ``stats`` (a session changing the draft length keeps its totals)."""
        self.stats = stats
        timing = self.timing
        if timing.breakdown is not None:
            if stats.breakdown is None:
                stats.breakdown = timing.breakdown
            timing.breakdown = stats.breakdown


def batch_step(engines: Sequence[Engine], samplers: Sequence[Sampler | None], *, lengths: DraftLength | None = None,
               tbatch: Batch | None = None, mbatch: Batch | None = None) -> list[list[int]]:
    """One speculative step of ``engines`` (distinct sequences of the same contexts, in increasing sequence order
    for llama.cpp's splits); returns the tokens each emitted. Propose (every sequence's drafts, the i-th of each in
    one MTP decode, their queues with the first), verify (every sequence's rows in one target decode), accept and
    commit, each engine by its own operations. A batch of one decodes in its engine's own batches, as
    :meth:`Engine.step`; several share ``tbatch`` and ``mbatch`` (:class:`~.multistep.MultiStep` sizes them).

    ``lengths``: one draft length for every sequence, chosen from the pooled acceptance and the step's wall time
    (a server's ``auto``); without it each engine chooses its own (fixed, or its own ``auto`` with shadow drafts).
    A batch's phases are timed by the first engine's recorder; its decode time is shared between the engines."""
    e0 = engines[0]
    n = len(engines)
    # a loop over the engines per phase, not a comprehension per quantity: a batch of one (every conversation's
    # step) pays Python per pass
    t_step = _clock()
    timing = e0.timing
    timing.begin()
    chosen = lengths.next(_pooled(engines)) if lengths is not None else None
    ks: list[int] = []  # 0: a plain step
    asks: list[int] = []  # with auto's shadow draft (adaptive.py, SHADOW_EVERY): drafted, not verified
    ask_any = 0
    for e, sampler in zip(engines, samplers):
        room = e.begin_step(sampler)
        k = e.draft_length(room, chosen)
        ks.append(k)
        a = e.adaptive
        if chosen is None and a is not None and a.shadow and k < e.n_draft_max and k + 1 < room:
            k += 1
        asks.append(k)
        ask_any |= k
    llama0 = e0.stats.llama_seconds
    held = 0  # how many of a drafting sequence's tokens the MTP context holds at n_past (id_last: 1)
    shadows: list[int | None] = [None] * n
    drafts: list[list[int]] = [[]] * n  # read only: a list per sequence only where it drafts
    # one sequence: the last verified draft's id may stay on the device for the verify (proposer.py), also on a
    # shadow step, so that the verify's graph is the one every other step reuses (a changed one is built and, on a
    # GPU, captured again, there and back)
    defer = n == 1
    if ask_any:
        drafts, held = e0.head.propose([e.head for e in engines], [e.id_last for e in engines],  # type: ignore[misc]
                                       [len(e.tokens) for e in engines], asks, mbatch, defer=defer,
                                       verified=ks[0] if n == 1 and asks != ks else None)
        if asks != ks:
            for s, k in enumerate(ks):
                if len(drafts[s]) > k:  # the target's token after k accepted drafts tells whether it would have been
                    shadows[s], drafts[s] = drafts[s][k], drafts[s][:k]
    b = e0.tbatch if n == 1 else tbatch
    assert b is not None
    b.clear()
    rows: list[int] = []
    for e, d in zip(engines, drafts):
        rows.append(e.add_verify(b, d))
    if defer and drafts[0]:
        e0.head.device_rows(e0.tgt, b, rows[0], drafts[0])
    timing.verify(e0.decode(e0.tgt, b))
    if defer:
        e0.head.resolve(drafts[0])
        if drafts[0] and e0.head.feeds:  # the head's next decode, queued behind the verify (proposer.py)
            e0.head.feed_from_device(e0.tgt, rows[0], len(drafts[0]) + 1, len(e0.tokens))
    t = _clock()
    emitted: list[list[int]] = []
    hidden: list[np.ndarray | None] = []
    tgt = e0.tgt
    n_vocab, copy = tgt.model.n_vocab, n > 1
    for e, row, d, k, shadow in zip(engines, rows, drafts, ks, shadows):
        em = e.accept(row, d)
        emitted.append(em)
        if shadow is not None and e.adaptive is not None:
            e.adaptive.shadow_result(k, len(em) - 1 == k and em[-1] == shadow)
        # a later target decode (a rollback's replay in a commit) overwrites the rows: several sequences copy theirs
        h, n_rows = e.head.verify_rows(tgt, row, len(d) + 1, copy)
        hidden.append(h)
        timing.d2h(e.tsampler, n_vocab, len(d) + 1, n_rows)
    timing.read(_clock() - t)
    if n > 1:  # the shared decodes were counted by the first engine: each sequence takes its share
        share = (e0.stats.llama_seconds - llama0) / n
        e0.stats.llama_seconds = llama0
        for e in engines:
            e.stats.llama_seconds += share
    for e, d, em, h, k, ask in zip(engines, drafts, emitted, hidden, ks, asks):
        e.commit(d, em, h, k=k, held=held if ask else 0)
    dt = _clock() - t_step
    timing.step(dt)
    if chosen is not None:
        lengths.observe(chosen, dt)  # type: ignore[union-attr]  # chosen by it
    else:
        for e, k in zip(engines, ks):
            if e.adaptive is not None:
                e.adaptive.observe(k, dt)  # the length it was given: a step with no drafts above p_min is no plain step
    return emitted


def _pooled(engines: Sequence[Engine]) -> Stats:
    """All the sequences' counts in one: what the one shared draft length is chosen by."""
    if len(engines) == 1:
        return engines[0].stats
    p = Stats()
    for e in engines:
        p.merge(e.stats)
    return p


class ContextFull(GgufMtpError):
    def __init__(self, n_ctx: int) -> None:
        super().__init__(f"context is full ({n_ctx} tokens); start a new chat or raise -c/--ctx-size")
