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
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..errors import GgufMtpError
from .adaptive import DraftLength
from .llama import Batch, Context
from .rollback import Rollback
from .sampling import ContextSampler, Sampler, context_sampler, top1_prob
from .stats import Breakdown, Stats
from .timing import NO_TIMING, NoTiming, StepTimer

_clock = time.perf_counter


class Engine:
    """Decoding state of one conversation on a target context (and optionally an MTP context)."""

    def __init__(self, target: Context, mtp: Context | None, *, n_draft: int = 3, p_min: float = 0.0,
                 adaptive: bool = False, prompt_window: int = 0, seq: int = 0, rollback: Rollback | None = None,
                 timings: bool | None = None, device_sampling: bool = True, stable_shapes: bool = False) -> None:
        self.tgt, self.mtp = target, mtp
        # the llama.cpp sequence this conversation lives in (one per server slot); both contexts use the same id
        self.seq = seq
        self.n_ctx = target.n_ctx_seq
        self.rollback = rollback or Rollback(target, "kv", seq=seq)
        # >0: the MTP context gets only the last ``prompt_window`` tokens of each prompt. The head's prompt
        # cost is then bounded by the window instead of growing with the prompt; drafts may be worse early
        # on, output is unchanged (the target verifies every draft).
        self.prompt_window = max(0, prompt_window)
        # several trained heads (mimo2, step35): one head per draft step, chained through their own outputs
        self.n_heads = max(1, mtp.model.n_nextn) if mtp is not None else 0
        self.chain = self.n_heads > 1
        if self.chain:
            n_draft = min(n_draft, self.n_heads)
        self.n_draft_max = max(1, n_draft) if mtp is not None else 0
        self.p_min = p_min
        self.adaptive = DraftLength(self.n_draft_max) if adaptive and mtp is not None else None
        self.device_sampling = device_sampling
        # every MTP decode padded to k + 1 tokens (single head), k the draft length (auto: its current choice, not
        # a probe's): one graph shape, so llama.cpp reuses its graph and CUDA its captured one; costs the head's
        # block over the padding (cheap on a GPU only). Padding to n_draft_max + 1 under auto instead cost 0.3 ms a
        # step at k=1 on an H100 (the head's block over 5 rows, and the rows copied): 8%.
        self.stable = stable_shapes and mtp is not None and not self.chain
        # (position, token, input row) of the MTP cache's tail; room for a step's drafts, which leave again
        self._held: deque[tuple[int, int, np.ndarray]] = deque(maxlen=2 * (self.n_draft_max + 1))
        n_embd = target.model.n_embd_out
        self.n_embd = n_embd
        self.tbatch = Batch(max(target.n_batch, self.n_draft_max + 1), seq=seq)
        # the MTP batch doubles as its queue: verified tokens waiting for the next MTP decode
        self.mbatch = Batch(max(target.n_batch, self.n_draft_max + 1), n_embd, seq=seq) if mtp is not None else None
        self.tokens: list[int] = []  # decoded into the target, position = index
        self.id_last: int | None = None
        self.pending_h = np.zeros(n_embd, dtype=np.float32)
        self.h_hist: dict[int, np.ndarray] = {}  # recent target hidden rows by position (chat rollback)
        self.stats = Stats(n_draft_max=self.n_draft_max)
        self.k = self.n_draft_max
        if timings is None:
            timings = os.environ.get("GGUF_MTP_TIMINGS", "") not in ("", "0")
        #: where each step's time goes (``--perf``): a recorder the step calls at each phase, a no-op when off
        self.timing: NoTiming = StepTimer(Breakdown(), n_embd, self._reused) if timings else NO_TIMING
        self.stats.breakdown = self.timing.breakdown
        self.tsampler: ContextSampler = context_sampler(target, seq)
        self.msampler: ContextSampler | None = context_sampler(mtp, seq) if mtp is not None else None
        if self.msampler is not None:  # drafts are greedy; p_min needs the head's logits, so those stay on the host
            self.msampler.use(None, device=device_sampling and p_min <= 0)
        self._sampler: Sampler | None = None  # the one the target samples with now
        self._n_pre = 0  # tokens the target decodes again ahead of this step's verify rows (rollback.prefix)

    # -- low-level ---------------------------------------------------------------------------
    def _decode(self, ctx: Context, batch: Batch, *, wait: bool = True, in_step: bool = True) -> float:
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
        return self.tgt.graphs_reused() + (self.mtp.graphs_reused() if self.mtp is not None else 0)

    def _remember_h(self, pos0: int, rows: np.ndarray) -> None:
        for i, row in enumerate(rows):
            self.h_hist[pos0 + i] = row.copy()
        if len(self.h_hist) > 256:
            for p in sorted(self.h_hist)[:-128]:
                del self.h_hist[p]

    # -- the MTP queue -----------------------------------------------------------------------
    def _feed_mtp(self, toks: Sequence[int], pos0: int, rows: np.ndarray, h_before: np.ndarray) -> None:
        """Queue tokens at pos0.. for the MTP context, paired with the target's hidden row of the previous
        position (``h_before`` for the first token, ``rows[i - 1]`` for the others). They go out with the next
        MTP decode (normally the next draft's)."""
        assert self.mbatch is not None
        b, n = self.mbatch, len(toks)
        if b.n and int(b.pos_np[b.n - 1]) + 1 != pos0:
            raise GgufMtpError(f"internal: MTP queue gap at position {pos0}")
        if b.n + n > b.capacity:
            self._flush(in_step=False)
        assert b.embd is not None and n <= b.capacity
        b.tok_np[b.n:b.n + n] = toks
        b.pos_np[b.n:b.n + n] = np.arange(pos0, pos0 + n)
        b.logits_np[b.n:b.n + n] = 0
        b.embd[b.n] = h_before
        b.embd[b.n + 1:b.n + n] = rows[: n - 1]
        b.n += n

    def _queue_start(self) -> int:
        """First position waiting in the MTP queue (or the end of the target's tokens when it is empty)."""
        b = self.mbatch
        return int(b.pos_np[0]) if b is not None and b.n else len(self.tokens)

    def _flush(self, *, wait: bool = False, in_step: bool = True) -> None:
        """Decode the queue into the MTP context (every head's cache for several heads), no outputs."""
        assert self.mtp is not None and self.mbatch is not None
        b = self.mbatch
        if not b.n:
            return
        spent = 0.0
        if not self.chain:
            spent = self._mtp_decode(b, wait=wait, in_step=in_step)
        else:
            pos0 = int(b.pos_np[0])
            for head in range(self.n_heads):  # every head keeps its own layer's cache for these positions
                self.mtp.seq_rm(pos0, seq=self.seq)
                self.mtp.set_head(head)
                spent += self._decode(self.mtp, b, wait=wait, in_step=in_step)
            self.mtp.set_head(0)
        if in_step:
            self.timing.feed(spent)
        b.clear()

    @property
    def _shape(self) -> int:
        """Rows every MTP decode is padded to: the draft length + 1 (auto: its current choice, not a probe's)."""
        return max(1, self.adaptive.k if self.adaptive is not None else self.n_draft_max) + 1

    def _mtp_decode(self, b: Batch, *, wait: bool = True, in_step: bool = True) -> float:
        """Decode ``b`` on the (single-head) MTP context. With stable shapes, pad it first to k + 1 tokens with the
        positions just before it, taken from the cache's tail: they are dropped and decoded again from the same
        inputs, so the cache ends up the same and every decode has one shape."""
        assert self.mtp is not None
        if self.stable and b.n < self._shape:
            self._pad(b)
        dt = self._decode(self.mtp, b, wait=wait, in_step=in_step)
        if self.stable:
            p0 = int(b.pos_np[0])
            while self._held and self._held[-1][0] >= p0:
                self._held.pop()
            assert b.embd is not None
            for i in range(max(0, b.n - self.n_draft_max - 1), b.n):
                self._held.append((int(b.pos_np[i]), int(b.tok_np[i]), b.embd[i].copy()))
        return dt

    def _pad(self, b: Batch) -> None:
        assert self.mtp is not None and b.embd is not None
        p0 = int(b.pos_np[0])
        take: list[tuple[int, int, np.ndarray]] = []
        for e in reversed(self._held):  # contiguous positions ending right before the batch
            if e[0] >= p0:
                continue
            if e[0] != p0 - 1 - len(take) or len(take) + b.n >= self._shape:
                break
            take.append(e)
        m = len(take)
        if not m or b.n + m > b.capacity:
            return
        take.reverse()
        n = b.n
        for arr in (b.tok_np, b.pos_np, b.logits_np, b.embd):
            arr[m:m + n] = arr[:n].copy()
        for i, (pos, tok, row) in enumerate(take):
            b.tok_np[i], b.pos_np[i], b.logits_np[i] = tok, pos, 0
            b.embd[i] = row
        b.n = n + m
        self.mtp.seq_rm(take[0][0], seq=self.seq)

    # -- warm-up -----------------------------------------------------------------------------
    def warm_up(self, token: int) -> None:
        """Run once, before the first answer, the decodes a first answer will use: a short prompt, plain steps
        and verify steps with the head's decodes at every draft length this engine can choose (a fixed length: that
        one). Back-ends pay for a shape's first use (CUDA: loading kernels, pools, capturing graphs) and llama.cpp's
        own tools pay it at load with a decode of their own, so a first answer that paid it would be measured
        slower than theirs. Nothing of it stays but, under auto, the controller's step times (the later steps at
        each length are timed): the context is cleared, and no token or statistic remains."""
        kept = self.adaptive, self.k, self.stats, self.timing
        lengths = list(range(self.n_draft_max, 0, -1)) if self.adaptive is not None else [self.k]
        # auto: past the steps that rebuild and capture a shape's graph, two more are timed at every length, so
        # the first answer need not explore them (its opening block still measures the acceptance)
        n_steps = DraftLength.WARMUP + (2 if self.adaptive is not None else 0)
        times: dict[int, list[float]] = {}
        self.adaptive, self.timing = None, NO_TIMING
        self.stats = Stats(n_draft_max=self.n_draft_max)
        try:
            self.use_sampler(Sampler(None))
            for k in (lengths if self.mtp is not None else []) + [0]:
                self.reset()
                self.k = k
                self.feed([token] * 3)  # a prompt of a few tokens: a batch, then the queue to the head
                for i in range(max(2, n_steps)):  # the second step drafts from a queue fed by the first's verify
                    t = _clock()
                    self.step()
                    if i >= DraftLength.WARMUP:
                        times.setdefault(k, []).append(_clock() - t)
        finally:
            self.reset()
            self.adaptive, self.k, self.stats, self.timing = kept
        if self.adaptive is not None:
            self.adaptive.seed_times(times)

    # -- prompt ------------------------------------------------------------------------------
    def reset(self) -> None:
        self.tgt.clear(self.seq)
        self.rollback.reset()
        if self.mtp is not None:
            self.mtp.clear(self.seq)
            assert self.mbatch is not None
            self.mbatch.clear()
        self._held.clear()
        self.tokens, self.id_last, self.h_hist = [], None, {}
        self.pending_h[:] = 0

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
        # first position the MTP context is given; the hidden row of the position before it is still needed
        mtp_from = max(len(self.tokens), end - self.prompt_window) if self.prompt_window else len(self.tokens)
        if self.mtp is not None and mtp_from > len(self.tokens):
            assert self.mbatch is not None
            self.mbatch.clear()  # the queue ends where the gap starts
            self._held.clear()
            if self.mtp.pos_max(self.seq) >= 0:
                self.mtp.clear(self.seq)  # positions must not jump over a gap in a non-empty cache (llama.cpp refuses)
        try:
            for c in range(0, len(body), n):
                chunk = body[c:c + n]
                pos0 = len(self.tokens)
                if pos0 + len(chunk) + self.n_draft_max + 1 > self.n_ctx:
                    raise ContextFull(self.n_ctx)
                # chunks wholly before the window need no hidden rows: skip their device-to-host copy
                rows_needed = self.mtp is not None and pos0 + len(chunk) >= mtp_from
                if self.mtp is not None:
                    self.tgt.set_nextn_rows(rows_needed)
                b = self.tbatch
                b.fill(chunk, pos0)
                self._decode(self.tgt, b, wait=rows_needed, in_step=False)
                if rows_needed:
                    rows = self.tgt.h_rows(len(chunk))
                    skip = max(0, mtp_from - pos0)
                    if skip < len(chunk):
                        h_before = self.pending_h if skip == 0 else rows[skip - 1]
                        self._feed_mtp(chunk[skip:], pos0 + skip, rows[skip:], h_before)
                    keep = min(len(rows), 64)
                    self._remember_h(pos0 + len(rows) - keep, rows[len(rows) - keep:])
                    self.pending_h = rows[-1].copy()
                self.tokens.extend(chunk)
            if self.mtp is not None and self.mbatch is not None and self.mbatch.n > self.n_draft_max + 1:
                self._flush(in_step=False)  # a prompt's worth: its own decode (short queues ride with the first draft)
        finally:
            if self.mtp is not None:
                self.tgt.set_nextn_rows(True)  # every verify step needs them, even after ContextFull
        self.tgt.synchronize()
        if self.mtp is not None:
            self.mtp.synchronize()  # prompt time includes the head's share of it
        self.id_last = last
        self.stats.prompt_tokens += len(new_tokens)
        self.stats.prompt_seconds += _clock() - t0

    def rewind(self, n_keep: int) -> bool:
        """Keep the first ``n_keep`` decoded tokens; False when the state cannot roll back that far."""
        if n_keep >= len(self.tokens):
            return True
        if n_keep == 0:
            self.reset()
            return True
        if self.mtp is not None and (n_keep - 1) not in self.h_hist:
            return False
        if not self.rollback.truncate(self.tokens, n_keep):
            return False
        if self.mtp is not None:
            b = self.mbatch
            assert b is not None
            q0 = self._queue_start()
            if n_keep <= q0:
                b.clear()
                self.mtp.seq_rm(n_keep, seq=self.seq)
                while self._held and self._held[-1][0] >= n_keep:
                    self._held.pop()
            else:
                b.n = n_keep - q0  # drop the queued tail
            self.pending_h = self.h_hist[n_keep - 1].copy()
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

    # -- generation --------------------------------------------------------------------------
    def pick_draft(self, i: int) -> int | None:
        """The head's greedy token for MTP batch entry ``i`` (a row of this sequence); None below ``p_min``."""
        assert self.mtp is not None and self.msampler is not None
        t = _clock()
        if self.p_min > 0 and top1_prob(self.mtp.logits_view(i)) < self.p_min:
            d = None
        else:
            d = self.msampler.sample(i)
        timing = self.timing
        timing.d2h(self.msampler, self.mtp.model.n_vocab, 1, 1)
        timing.read(_clock() - t)
        return d

    def _draft_chain(self, k: int) -> list[int]:
        """Draft step i runs head i over the whole draft prefix (its layer has no cache there yet). Leaves
        nothing at ``n_past`` in the MTP context: id_last goes out with the verified tokens."""
        assert self.mtp is not None and self.mbatch is not None and self.id_last is not None
        self._flush()
        pos0, b = len(self.tokens), self.mbatch
        toks, rows = [self.id_last], [self.pending_h]
        out: list[int] = []
        for i in range(k):
            self.mtp.seq_rm(pos0, seq=self.seq)
            self.mtp.set_head(i)
            b.fill(toks, pos0, last_logits=True, embd=np.stack(rows))
            self.timing.draft(i, self._decode(self.mtp, b))
            d = self.pick_draft(len(toks) - 1)
            if d is None:
                break
            out.append(d)
            toks.append(d)
            rows.append(self.mtp.h_row(len(toks) - 2).copy())
        b.clear()
        self.mtp.set_head(0)
        self.mtp.seq_rm(pos0, seq=self.seq)
        return out

    def _draft(self, k: int) -> tuple[list[int], bool]:
        """Up to ``k`` draft tokens, and whether the MTP context now holds ``(id_last, pending_h)`` at n_past."""
        if self.chain:
            return self._draft_chain(k), False
        assert self.mtp is not None and self.mbatch is not None and self.id_last is not None
        pos0 = len(self.tokens)
        b = self.mbatch
        if b.n >= b.capacity:
            self._flush()
        # the queue and (id_last, pending_h) in one decode: the feed and the first draft share it
        b.add(self.id_last, pos0, logits=True, embd=self.pending_h)
        out: list[int] = []
        for step in range(k):
            self.timing.draft(step, self._mtp_decode(b))
            i = b.n - 1  # the output row is the last one
            d = self.pick_draft(i)
            if d is None:
                break
            out.append(d)
            if step + 1 < k:  # the next draft: this one paired with the head's own hidden row
                h = self.mtp.h_row(i)
                b.clear()
                b.add(d, pos0 + 1 + step, logits=True, embd=h)
        b.clear()
        if out and k > 1:  # a decode ran at pos0 + 1 or later
            self.mtp.seq_rm(pos0 + 1, seq=self.seq)  # the drafts' own positions leave no trace; (id_last) at pos0 stays
            while self._held and self._held[-1][0] > pos0:
                self._held.pop()
        return out, True

    # -- one step, in the operations a batched step (multistep.py) uses for each of its sequences ---------
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
        if self.mtp is None:
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
        verified = [last, *drafts]
        if self.mtp is not None:
            assert rows is not None
            self._remember_h(n_past, rows[: j + 1])
            if held > j + 1:
                self.mtp.seq_rm(n_past + j + 1, seq=self.seq)
            elif held < j + 1:
                # After a plain step (k=0) too: the head drafts from (token, target hidden row of the position
                # before) at every position, so a later draft needs all of them in its cache. They wait in the
                # queue and go out in one batch with the next draft (or at the queue's capacity): one MTP decode
                # for a whole run of plain steps, not one per step, and none at all if no draft follows.
                self._feed_mtp(verified[held: j + 1], n_past + held, rows[held:],
                               self.pending_h if held == 0 else rows[held - 1])
            self.pending_h = rows[j].copy()
            if drafts:
                self.stats.record(len(drafts), j)
            elif k == 0:  # chose not to draft: no drafted-and-rejected position, no dilution of tok/step
                self.stats.plain_steps += 1
        self.tokens.extend(verified[: j + 1])
        spent, replayed = self.rollback.settle(self.tokens, n_past + len(verified))
        stats = self.stats
        stats.llama_seconds += spent
        stats.rollback_seconds += spent
        stats.replayed_tokens += replayed + self._n_pre
        self.id_last = emitted[-1]
        stats.steps += 1

    def step(self, sampler: Sampler | None = None) -> list[int]:
        """One target decode; returns the emitted tokens (1 + accepted drafts). Samples with ``sampler``, or the
        one given last (``use_sampler``; ``generate`` sets it)."""
        t_step = _clock()
        room = self.begin_step(sampler)
        timing = self.timing
        timing.begin()
        k = self.draft_length(room)  # 0: a plain step
        drafts: list[int] = []
        held = 0  # the MTP context holds (id_last, pending_h) at n_past already
        shadow: int | None = None  # auto's shadow draft: drafted, not verified (adaptive.py, SHADOW_EVERY)
        adaptive = self.adaptive
        extra = adaptive is not None and adaptive.shadow and k < self.n_draft_max and k + 1 < room
        if k > 0 or extra:
            drafts, kept_last = self._draft(k + 1 if extra else k)
            held = 1 if kept_last else 0
            if len(drafts) > k:  # the target's token after k accepted drafts tells whether it would have been
                shadow, drafts = drafts[k], drafts[:k]
        b = self.tbatch
        b.clear()
        row = self.add_verify(b, drafts)
        timing.verify(self._decode(self.tgt, b))
        t = _clock()
        emitted = self.accept(row, drafts)
        if shadow is not None and adaptive is not None:
            adaptive.shadow_result(k, len(emitted) - 1 == k and emitted[-1] == shadow)
        n_rows = row + len(drafts) + 1 if self.mtp is not None else 0
        rows = self.tgt.h_rows(n_rows)[row:] if n_rows else None
        timing.read(_clock() - t)
        timing.d2h(self.tsampler, self.tgt.model.n_vocab, len(drafts) + 1, n_rows)
        self.commit(drafts, emitted, rows, k=k, held=held)
        dt = _clock() - t_step
        timing.step(dt)
        if adaptive is not None:
            adaptive.observe(k, dt)  # the length it was given: a step with no drafts above p_min is no plain step
        return emitted

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

    def before_batched_step(self) -> None:
        """A step batched with other sequences (multistep.py) decodes the head itself: send out this engine's
        queue first, and forget the cache tail it pads with (the batched step does not keep it)."""
        if self.mtp is not None:
            self._flush()
            self._held.clear()

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


class ContextFull(GgufMtpError):
    def __init__(self, n_ctx: int) -> None:
        super().__init__(f"context is full ({n_ctx} tokens); start a new chat or raise -c/--ctx-size")
