"""The draft / verify loop with an MTP head (or plain decoding when there is none).

State between steps: the target holds positions ``0..n_past-1``; ``id_last`` (the last emitted token) is not
decoded yet; ``pending_h`` is the target's hidden row at ``n_past-1``. One step:

1. draft: the MTP context decodes ``(id_last, pending_h)`` at ``n_past`` and then its own outputs, greedily,
   up to ``k`` tokens (stopping early below ``p_min``);
2. verify: the target decodes ``[id_last, d0..dk-1]`` in one batch; the target's sampler picks each emitted
   token from those logits, and a draft token is accepted while it equals the token the sampler picked;
3. feed: the MTP context gets the verified tokens paired with the target's hidden rows (shifted by one);
4. roll back both contexts to the accepted prefix: the MTP context's KV cache drops positions, the target
   through its ``Rollback`` (rollback.py: a KV cache or ``n_rs_seq`` recurrent snapshots step back by themselves;
   a recurrent state without snapshots is restored from a saved copy and the accepted tokens are decoded again,
   possibly ahead of the next verify batch: ``rollback.prefix``).

Every emitted token comes from the target's logits and the target's sampler, so output is identical to plain
decoding for greedy and for seeded sampling. That is also why ``prompt_window`` is safe: the MTP context may
see only the end of a prompt (its cost on long prompts is one full-attention layer per token), and worse
drafts only lower acceptance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..errors import GgufMtpError
from .llama import Batch, Context
from .rollback import Rollback
from .sampling import Sampler, top1_prob
from .stats import Stats


class Engine:
    """Decoding state of one conversation on a target context (and optionally an MTP context)."""

    def __init__(self, target: Context, mtp: Context | None, *, n_draft: int = 3, p_min: float = 0.0,
                 adaptive: bool = False, prompt_window: int = 0, seq: int = 0,
                 rollback: Rollback | None = None) -> None:
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
        self.adaptive = adaptive and mtp is not None
        n_embd = target.model.n_embd_out
        self.tbatch = Batch(max(target.n_batch, self.n_draft_max + 1), seq=seq)
        self.mbatch = Batch(max(target.n_batch, self.n_draft_max + 1), n_embd, seq=seq) if mtp is not None else None
        self.tokens: list[int] = []  # decoded into the target, position = index
        self.id_last: int | None = None
        self.pending_h = np.zeros(n_embd, dtype=np.float32)
        self.h_hist: dict[int, np.ndarray] = {}  # recent target hidden rows by position (chat rollback)
        self.stats = Stats(n_draft_max=self.n_draft_max)
        self.k = self.n_draft_max
        self._verify_cost: dict[int, float] = {}  # draft length -> seconds to verify it (EMA)
        self._draft_cost = 0.0  # seconds per MTP draft step (EMA)

    # -- low-level ---------------------------------------------------------------------------
    def _decode(self, ctx: Context, batch: Batch) -> float:
        """Decode and wait for the device, so the time measured is llama.cpp's (GPU back-ends run async)."""
        t = time.perf_counter()
        ctx.decode_batch(batch)
        ctx.synchronize()
        return time.perf_counter() - t

    def _remember_h(self, pos0: int, rows: np.ndarray) -> None:
        for i, row in enumerate(rows):
            self.h_hist[pos0 + i] = row.copy()
        if len(self.h_hist) > 256:
            for p in sorted(self.h_hist)[:-128]:
                del self.h_hist[p]

    def _feed_mtp(self, toks: Sequence[int], pos0: int, rows: np.ndarray, h_before: np.ndarray) -> float:
        """Give the MTP context tokens at pos0.. paired with the target's hidden row of the previous position
        (``h_before`` for the first token, ``rows[i - 1]`` for the others)."""
        assert self.mtp is not None and self.mbatch is not None
        b = self.mbatch
        n = len(toks)
        b.fill(toks, pos0)
        assert b.embd is not None
        b.embd[0] = h_before
        b.embd[1:n] = rows[: n - 1]
        if not self.chain:
            return self._decode(self.mtp, b)
        spent = 0.0
        for head in range(self.n_heads):  # every head keeps its own layer's cache for these positions
            self.mtp.seq_rm(pos0, seq=self.seq)
            self.mtp.set_head(head)
            spent += self._decode(self.mtp, b)
        self.mtp.set_head(0)
        return spent

    # -- prompt ------------------------------------------------------------------------------
    def reset(self) -> None:
        self.tgt.clear(self.seq)
        self.rollback.reset()
        if self.mtp is not None:
            self.mtp.clear(self.seq)
        self.tokens, self.id_last, self.h_hist = [], None, {}
        self.pending_h[:] = 0

    def feed(self, new_tokens: Sequence[int]) -> None:
        """Append tokens to the conversation; the last one becomes ``id_last`` (decoded with the next step)."""
        if not new_tokens:
            return
        t0 = time.perf_counter()
        self.rollback.flush(self.tokens)
        toks = ([self.id_last] if self.id_last is not None else []) + list(new_tokens)
        body, last = toks[:-1], toks[-1]
        n = self.tgt.n_batch
        end = len(self.tokens) + len(body)
        # first position the MTP context is given; the hidden row of the position before it is still needed
        mtp_from = max(len(self.tokens), end - self.prompt_window) if self.prompt_window else len(self.tokens)
        if self.mtp is not None and mtp_from > len(self.tokens) and self.mtp.pos_max(self.seq) >= 0:
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
                self._decode(self.tgt, b)
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
        finally:
            if self.mtp is not None:
                self.tgt.set_nextn_rows(True)  # every verify step needs them, even after ContextFull
        self.id_last = last
        self.stats.prompt_tokens += len(new_tokens)
        self.stats.prompt_seconds += time.perf_counter() - t0

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
            self.mtp.seq_rm(n_keep, seq=self.seq)
            self.pending_h = self.h_hist[n_keep - 1].copy()
        del self.tokens[n_keep:]
        self.id_last = None
        return True

    def sync(self, tokens: Sequence[int]) -> int:
        """Make the conversation equal ``tokens`` (the last one left pending), reusing the longest common prefix
        with what is already decoded; returns how many tokens were reused."""
        history = self.tokens + ([self.id_last] if self.id_last is not None else [])
        common = 0
        for a, b in zip(history, tokens):
            if a != b:
                break
            common += 1
        common = min(common, len(tokens) - 1)  # always leave a token to decode
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
    def _draft_chain(self, k: int) -> tuple[list[int], float]:
        """Draft step i runs head i over the whole draft prefix (its layer has no cache there yet)."""
        assert self.mtp is not None and self.mbatch is not None and self.id_last is not None
        pos0, b = len(self.tokens), self.mbatch
        toks, rows = [self.id_last], [self.pending_h]
        out: list[int] = []
        spent = 0.0
        for i in range(k):
            self.mtp.seq_rm(pos0, seq=self.seq)
            self.mtp.set_head(i)
            b.fill(toks, pos0, last_logits=True, embd=np.stack(rows))
            spent += self._decode(self.mtp, b)
            logits = self.mtp.logits_view(len(toks) - 1)
            if self.p_min > 0 and top1_prob(logits) < self.p_min:
                break
            d = int(np.argmax(logits))
            out.append(d)
            toks.append(d)
            rows.append(self.mtp.h_row(len(toks) - 2).copy())
        self.mtp.set_head(0)
        self.mtp.seq_rm(pos0, seq=self.seq)
        return out, spent

    def _draft(self, k: int) -> tuple[list[int], float]:
        if self.chain:
            return self._draft_chain(k)
        assert self.mtp is not None and self.mbatch is not None and self.id_last is not None
        pos0 = len(self.tokens)
        b = self.mbatch
        out: list[int] = []
        h = self.pending_h
        tok = self.id_last
        spent = 0.0
        for i in range(k):
            b.clear()
            b.add(tok, pos0 + i, logits=True, embd=h)
            spent += self._decode(self.mtp, b)
            logits = self.mtp.logits_view(0)
            d = int(np.argmax(logits))
            if self.p_min > 0 and top1_prob(logits) < self.p_min:
                break
            out.append(d)
            h = self.mtp.h_row(0)
            tok = d
        self.mtp.seq_rm(pos0, seq=self.seq)  # drafts leave no trace in the MTP cache
        return out, spent

    def step(self, sampler: Sampler) -> list[int]:
        """One target decode; returns the emitted tokens (1 + accepted drafts)."""
        if self.id_last is None:
            raise GgufMtpError("nothing to decode: feed a prompt first")
        n_past = len(self.tokens)
        room = self.n_ctx - n_past - 1
        if room < 1:
            raise ContextFull(self.n_ctx)
        llama_t = 0.0
        drafts: list[int] = []
        draft_t = 0.0
        if self.mtp is not None:
            k = min(self._next_k(), room - 1)
            if k > 0:
                drafts, draft_t = self._draft(k)
                llama_t = draft_t
        b = self.tbatch
        pre = self.rollback.prefix(self.tokens)  # accepted tokens the target must decode again first
        b.fill(pre, n_past - len(pre))
        b.add(self.id_last, n_past, logits=True)
        for i, d in enumerate(drafts):
            b.add(d, n_past + 1 + i, logits=True)
        tv = self._decode(self.tgt, b)
        llama_t += tv
        emitted: list[int] = []
        for i in range(len(drafts) + 1):
            t = sampler(self.tgt.logits_view(len(pre) + i))
            emitted.append(t)
            if i >= len(drafts) or t != drafts[i]:
                break
        j = len(emitted) - 1  # accepted drafts
        verified = [self.id_last] + drafts
        if self.mtp is not None:
            rows = self.tgt.h_rows(len(pre) + len(verified))[len(pre):]
            llama_t += self._feed_mtp(verified, n_past, rows, self.pending_h)
            self._remember_h(n_past, rows[: j + 1])
            self.pending_h = rows[j].copy()
            if drafts:
                self.stats.record(len(drafts), j)
                self._learn(len(drafts), tv, draft_t)
        if j < len(drafts) and self.mtp is not None:
            self.mtp.seq_rm(n_past + j + 1, seq=self.seq)
        self.tokens.extend(verified[: j + 1])
        spent, replayed = self.rollback.settle(self.tokens, n_past + len(verified))
        llama_t += spent
        self.stats.rollback_seconds += spent
        self.stats.replayed_tokens += replayed + len(pre)
        self.id_last = emitted[-1]
        self.stats.steps += 1
        self.stats.llama_seconds += llama_t
        return emitted

    def generate(self, sampler: Sampler, max_tokens: int, is_eog: Callable[[int], bool],
                 should_stop: Callable[[], bool] = lambda: False) -> Iterator[int]:
        """Emit up to ``max_tokens`` tokens, stopping after an end-of-generation token."""
        n = 0
        t0 = time.perf_counter()
        try:
            while n < max_tokens and not should_stop():
                for t in self.step(sampler):
                    n += 1
                    self.stats.emitted += 1
                    yield t
                    if is_eog(t) or n >= max_tokens:
                        return
        finally:
            self.stats.decode_seconds += time.perf_counter() - t0

    # -- adaptive draft length ---------------------------------------------------------------
    EXPLORE_ROUNDS = 3  # each draft length 1..n_draft_max is tried this many times before choosing

    def _next_k(self) -> int:
        """Draft length for the next step: measured round-robin first, then the best expected rate."""
        if not self.adaptive:
            return self.k
        n = self.stats.steps
        if n < self.EXPLORE_ROUNDS * self.n_draft_max:
            return 1 + n % self.n_draft_max
        if n % 8 == 0:
            self.k = self._best_k()
        return self.k

    def _learn(self, k: int, verify_seconds: float, draft_seconds: float) -> None:
        c = self._verify_cost
        c[k] = verify_seconds if k not in c else 0.8 * c[k] + 0.2 * verify_seconds
        per_step = draft_seconds / max(1, k)
        self._draft_cost = per_step if not self._draft_cost else 0.8 * self._draft_cost + 0.2 * per_step

    def _best_k(self) -> int:
        """argmax_k E[tokens | k] / (verify(k) + k * draft), with E[tokens | k] = 1 + sum_i prod_{m<=i} a_m from
        the measured acceptance at each draft position and the measured verify and draft times."""
        acc = self.stats.acceptance_at
        best, best_rate = self.k, -1.0
        for k in sorted(self._verify_cost):
            expected, run = 1.0, 1.0
            for m in range(k):
                run *= acc[m] if m < len(acc) else 0.0
                expected += run
            rate = expected / (self._verify_cost[k] + k * self._draft_cost)
            if rate > best_rate:
                best, best_rate = k, rate
        return best


class ContextFull(GgufMtpError):
    def __init__(self, n_ctx: int) -> None:
        super().__init__(f"context is full ({n_ctx} tokens); start a new chat or raise -c/--ctx-size")
