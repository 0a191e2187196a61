"""Who proposes an engine's drafts: :class:`Proposer` (no head: every step is plain, the target returns no
hidden rows) or :class:`MtpProposer` (the MTP head, see speculative.py's docstring for its queue). The step
(speculative.py: ``batch_step``) asks its proposers and never asks whether there is a head.

Drafting is written once, for a batch of sequences on one MTP context (:meth:`MtpProposer.propose`): the first
draft decode carries every drafting sequence's queue and its ``(id_last, pending_h)``, each later one a row per
sequence still drafting. A batch of one decodes its proposer's own batch (its queue), padded to a stable shape;
several sequences share a batch whose shape the number of sequences sets. Chained heads (mimo2, step35) run head
i over every drafting sequence's draft prefix in draft step i's one decode.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from time import perf_counter as _clock
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GgufMtpError
from . import patches
from .llama import Batch, Context
from .sampling import ContextSampler, context_sampler, top1_prob
from .stats import Stats

if TYPE_CHECKING:
    from .adaptive import DraftLength
    from .speculative import Engine

_NEVER = sys.maxsize  # a position no prompt reaches
#: positions back a chat may rewind to with the head's state (the target's hidden row of the position before)
H_HISTORY = 256


class Proposer:
    """No head (``--no-mtp``, or none found): no drafts, and the target's hidden rows are never read."""

    #: whether a step's last draft may stay on the device for the verify (see MtpProposer)
    defers = False
    #: each draft after a step's first decoded from the one before on the device (the proposed mtp-self-feed patch)
    self_feeds = False

    ctx: Context | None = None
    msampler: ContextSampler | None = None
    mbatch: Batch | None = None
    n_draft_max = 0
    n_heads = 0
    chain = False
    #: the controller whose current choice the head's padding follows (None: the engine's own)
    lengths: DraftLength | None = None

    def graphs_reused(self) -> int:
        return 0

    def reset(self) -> None:
        """The conversation was cleared."""

    def prompt_start(self, n_tokens: int, end: int, window: int) -> int:
        """First position of a prompt (``n_tokens``..``end``) the head is given; it forgets what a gap leaves."""
        return _NEVER

    def rows_for(self, on: bool) -> None:
        """Whether the next target decodes return hidden rows (prompt chunks the head does not see need none)."""

    def take_prompt(self, chunk: Sequence[int], pos0: int, rows: np.ndarray, start: int) -> None:
        """A prompt chunk at ``pos0``.. was decoded with its hidden ``rows``; the head takes its part from ``start``."""

    #: whether :meth:`flush_prompt` can check the head's first drafts on the prompt
    checks_prompt = False

    def flush_prompt(self, picks: dict[int, int] | None = None) -> tuple[int, int]:
        """The prompt's chunks are decoded. ``picks``: the target's own pick at some of the prompt's last positions
        (position -> the token it would emit after it); the head's first draft is checked at each of them. Returns
        how many were checked and how many of those drafts equal the target's pick."""
        return 0, 0

    def end_prompt(self) -> None:
        """The prompt is over (also after ContextFull)."""

    def synchronize(self) -> None:
        """Wait for the head's decodes."""

    def can_rewind(self, n_keep: int) -> bool:
        return True

    def rewind(self, n_keep: int, n_tokens: int) -> None:
        """Forget positions from ``n_keep`` on (the target held ``n_tokens``)."""

    def shared_batch(self, n_seq: int) -> Batch | None:
        """The MTP batch ``n_seq`` sequences draft in together (a batch of one uses its own queue)."""
        return None

    def propose(self, heads: Sequence[Proposer], lasts: Sequence[int], pos0s: Sequence[int], ks: Sequence[int],
                shared: Batch | None = None, *, defer: bool = False,
                verified: int | None = None) -> tuple[list[list[int]], int]:
        """Drafts for the sequences of ``heads`` (this one first, all on one MTP context): up to ``ks[s]`` after
        ``lasts[s]`` at ``pos0s[s]`` (0: none); several sequences draft in ``shared``. Also returns how many of a
        drafting sequence's tokens the MTP context holds at ``pos0`` afterwards (1: ``last``; 0: none).
        ``defer``: a lone sequence's last draft (all of them where they are chained in one decode) may stay on the
        device (their places in the list hold placeholders until :meth:`resolve`; :meth:`device_rows` hands them to
        the verify). ``verified``: of a lone sequence's ``ks[0]`` drafts, how many the verify takes (auto's shadow
        step drafts one more): with ``defer``, the last of those stays on the device for the verify as on any other
        step, so the verify's graph is the one every step reuses, and is read as well, since the shadow draft is
        decoded from it."""
        return [[] for _ in heads], 0

    def device_rows(self, tgt: Context, batch: Batch, row: int, drafts: list[int]) -> None:
        """``drafts`` follow ``batch``'s entry ``row`` (``id_last``'s): ``tgt``'s next decode takes the deferred ones'
        token ids on the device, or, where it cannot, the ids are read now and written into ``batch`` and
        ``drafts``."""

    def resolve(self, drafts: list[int]) -> None:
        """After the verify decode was started: the ids of the drafts left on the device replace their placeholders in
        ``drafts``."""

    #: whether :meth:`feed_from_device` may queue the head's next decode behind the verify
    feeds = False

    def feed_from_device(self, tgt: Context, row: int, n: int, n_past: int) -> bool:
        """Right after the verify's decode: the head's next decode from the verify's rows on the device."""
        return False

    def verify_rows(self, tgt: Context, row: int, n: int, copy: bool = False) -> tuple[np.ndarray | None, int]:
        """The target's hidden rows of the ``n`` verify rows from ``row`` (a view unless ``copy``: a later target
        decode overwrites it), and how many rows came back in all."""
        return None, 0

    def commit(self, stats: Stats, last: int, drafts: list[int], j: int, rows: np.ndarray | None, n_past: int,
               *, k: int, held: int, bonus: int = -1) -> None:
        """Take a step's outcome (``j`` accepted drafts, then the target's ``bonus`` token): see
        :meth:`Engine.commit`."""


class MtpProposer(Proposer):
    """The MTP head's context and queue for one conversation (sequence) of ``engine``."""

    ctx: Context
    mbatch: Batch
    msampler: ContextSampler

    def __init__(self, engine: Engine, mtp: Context, n_draft: int, p_min: float, *, device_sampling: bool,
                 stable_shapes: bool, chained: bool = False, device_tokens: bool = False,
                 device_feed: bool = False) -> None:
        self.engine, self.ctx, self.seq = engine, mtp, engine.seq
        # several trained heads (mimo2, step35): one head per draft step, chained through their own outputs
        self.n_heads = max(1, mtp.model.n_nextn)
        self.chain = self.n_heads > 1
        if self.chain:
            n_draft = min(n_draft, self.n_heads)
        self.n_draft_max = max(1, n_draft)
        self.p_min = p_min
        # every MTP decode padded to k + 1 tokens (single head), k the draft length (auto: its current choice, not
        # a probe's): one graph shape, so llama.cpp reuses its graph and CUDA its captured one; costs the head's
        # block over the padding (cheap on a GPU only). Padding to n_draft_max + 1 under auto instead cost 0.3 ms a
        # step at k=1 on an H100 (the head's block over 5 rows, and the rows copied): 8%.
        self.stable = stable_shapes and not self.chain
        # greedy drafts made in one decode (the mtp-draft-chain patch: Context.set_mtp_chain): the last k - 1 rows
        # of a batch of one draft from the row before on the device, k outputs come back
        self.chained = chained and not self.chain and p_min <= 0
        self._chain_rows = 0  # chained rows in the decode being padded (_shape)
        # (position, token, input row) of the MTP cache's tail; room for a step's drafts, which leave again
        self._held: deque[tuple[int, int, np.ndarray]] = deque(maxlen=2 * (self.n_draft_max + 1))
        n_embd = engine.tgt.model.n_embd_out
        # the MTP batch doubles as its queue: verified tokens waiting for the next MTP decode
        self.mbatch = Batch(max(engine.tgt.n_batch, self.n_draft_max + 1), n_embd, seq=self.seq)
        self.pending_h = np.zeros(n_embd, dtype=np.float32)  # the target's hidden row at n_past - 1
        # the target's hidden rows of the last H_HISTORY positions, at position % H_HISTORY (a chat's rewind): a
        # ring written in place, as a step's commit runs on its critical path
        self._h_ring = np.zeros((H_HISTORY, n_embd), dtype=np.float32)
        self._h_pos = np.full(H_HISTORY, -1, dtype=np.int64)  # the position each ring row holds (-1: none)
        self.msampler = context_sampler(mtp, self.seq)
        # drafts are greedy; p_min needs the head's logits, so those stay on the host
        self.msampler.use(None, device=device_sampling and p_min <= 0)
        # the last draft's id may stay on the device, for the verify to take there (the device-draft-tokens patch):
        # the host starts the verify without waiting for that draft
        self.defers = device_tokens and not self.chain and self.msampler.on_device
        self._deferred: list[int] = []  # the MTP batch entries of the last drafts, whose ids are still on the device
        self._read = False  # ... and whose ids were read as well (a shadow draft came after them): resolve() has them
        # the head's next decode queued right behind the verify, before the host reads it: every verify row's
        # (target pick, target hidden row) on the device, the feed and the next first draft for whichever row the
        # verify accepts up to (the device-draft-tokens patch's row slots; GGUF_MTP_DEVICE_FEED=1, proposed)
        self.feeds = device_feed and self.defers and not self.chained
        # each draft after a step's first decoded from the one before on the device (its token and hidden row kept
        # in the head's own slots; GGUF_MTP_SELF_FEED=1, the proposed mtp-self-feed patch): the host launches the
        # next draft while the last one runs, and reads every draft's id back after the verify (kept_tokens)
        self.self_feeds = (self.defers and not self.chained and not self.feeds and mtp.output_rows
                           and patches.self_feed())
        self._self_row: int | None = None  # the next decode's row fed from the head's own slots (before padding)
        self._self_slots = False  # the head's slots exist: its other decodes read them into no row (one graph)
        self._kept = False  # the deferred drafts' ids are in the head's slots 1.. (resolve reads them there)
        self._zero_row = np.zeros(n_embd, dtype=np.float32)  # a fed row's placeholder input
        self._fed: tuple[int, int] | None = None  # (position of its first row, rows): queued, not yet committed
        self._ready: tuple[int, int] | None = None  # (its output row, position): the next first draft, decoded

    def graphs_reused(self) -> int:
        return self.ctx.graphs_reused()

    # -- the queue ------------------------------------------------------------------------------
    def feed(self, toks: Sequence[int], pos0: int, rows: np.ndarray, h_before: np.ndarray) -> None:
        """Queue tokens at pos0.. for the MTP context, paired with the target's hidden row of the previous
        position (``h_before`` for the first token, ``rows[i - 1]`` for the others). They go out with the next
        MTP decode (normally the next draft's)."""
        self._drop_ready()
        b, n = self.mbatch, len(toks)
        if b.n and int(b.pos_np[b.n - 1]) + 1 != pos0:
            raise GgufMtpError(f"internal: MTP queue gap at position {pos0}")
        if b.n + n > b.capacity:
            self.flush(in_step=False)
        assert b.embd is not None and n <= b.capacity
        b.tok_np[b.n:b.n + n] = toks
        b.pos_np[b.n:b.n + n] = np.arange(pos0, pos0 + n)
        b.logits_np[b.n:b.n + n] = 0
        b.embd[b.n] = h_before
        b.embd[b.n + 1:b.n + n] = rows[: n - 1]
        b.n += n

    def flush(self, *, wait: bool = False, in_step: bool = True) -> None:
        """Decode the queue into the MTP context (every head's cache for several heads), no outputs."""
        b = self.mbatch
        if not b.n:
            return
        spent = 0.0
        if not self.chain:
            spent = self._decode(b, wait=wait, in_step=in_step)
        else:
            pos0 = int(b.pos_np[0])
            for head in range(self.n_heads):  # every head keeps its own layer's cache for these positions
                self.ctx.seq_rm(pos0, seq=self.seq)
                self.ctx.set_head(head)
                spent += self.engine.decode(self.ctx, b, wait=wait, in_step=in_step)
            self.ctx.set_head(0)
        if in_step:
            self.engine.timing.feed(spent)
        b.clear()

    def _remember_h(self, pos0: int, rows: np.ndarray) -> None:
        n = len(rows)
        if n > H_HISTORY:  # only the last ones fit
            pos0, rows, n = pos0 + n - H_HISTORY, rows[n - H_HISTORY:], H_HISTORY
        if n <= 4:  # a step's: a row at a time costs less than an index array
            for i in range(n):
                k = (pos0 + i) % H_HISTORY
                self._h_ring[k] = rows[i]
                self._h_pos[k] = pos0 + i
        else:
            at = np.arange(pos0, pos0 + n)
            self._h_ring[at % H_HISTORY] = rows
            self._h_pos[at % H_HISTORY] = at

    # -- stable shapes --------------------------------------------------------------------------
    @property
    def _shape(self) -> int:
        """Rows every MTP decode is padded to: the draft length + 1 (auto: its current choice, not a probe's), and
        a chained decode's chained rows."""
        adaptive = self.lengths if self.lengths is not None else self.engine.adaptive
        return max(1, adaptive.k if adaptive is not None else self.n_draft_max) + 1 + self._chain_rows

    def _drop_ready(self) -> None:
        """A first draft decoded behind the last verify that no step takes (or a decode behind a verify whose step
        never committed: an interrupted answer): its rows leave the cache, which ends before ``n_past`` again, as the
        host path leaves it."""
        if self._fed is not None:
            self.ctx.seq_rm(self._fed[0], seq=self.seq)
            self._fed = None
        if self._ready is not None:
            self.ctx.seq_rm(self._ready[1], seq=self.seq)
            self._ready = None

    def _decode(self, b: Batch, *, wait: bool = True, in_step: bool = True) -> float:
        """Decode ``b`` on the (single-head) MTP context. With stable shapes, pad it first to k + 1 tokens with the
        positions just before it, taken from the cache's tail: they are dropped and decoded again from the same
        inputs, so the cache ends up the same and every decode has one shape."""
        n0 = b.n
        if self.stable and b.n < self._shape:
            self._pad(b)
        if self.feeds and b.n == self._shape:
            self._same_graph_as_fed(b)
        fed = self._self_row is not None
        if self.self_feeds and self._self_slots and (fed or (self.stable and b.n == self._shape)):
            # the fed row (moved by the padding), or none: every draft decode reads the slots, so one graph serves
            rows = [self._self_row + b.n - n0] if self._self_row is not None else [-1]
            self._self_row = None
            if not (self.ctx.take_tokens_from(self.ctx, rows) and self.ctx.take_nextn_from(self.ctx, rows)):
                raise GgufMtpError("internal: the head could not take its own kept draft on the device")
        dt = self.engine.decode(self.ctx, b, wait=wait, in_step=in_step)
        if self.stable:
            p0 = int(b.pos_np[0])
            while self._held and self._held[-1][0] >= p0:
                self._held.pop()
            assert b.embd is not None
            # the k + 1 rows a later decode may pad from, and the chained rows after them (gone again with the step)
            for i in range(max(0, b.n - self.n_draft_max - 1 - self._chain_rows), b.n):
                self._held.append((int(b.pos_np[i]), int(b.tok_np[i]), b.embd[i].copy()))
        return dt

    def _pad(self, b: Batch) -> None:
        assert b.embd is not None
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
        self.ctx.seq_rm(take[0][0], seq=self.seq)

    # -- the conversation -----------------------------------------------------------------------
    def reset(self) -> None:
        self._ready = self._fed = None
        self.ctx.clear(self.seq)
        self.mbatch.clear()
        self._held.clear()
        self._h_pos[:] = -1
        self.pending_h[:] = 0

    def prompt_start(self, n_tokens: int, end: int, window: int) -> int:
        self._drop_ready()
        start = max(n_tokens, end - window) if window else n_tokens
        if start > n_tokens:
            self.mbatch.clear()  # the queue ends where the gap starts
            self._held.clear()
            if self.ctx.pos_max(self.seq) >= 0:
                self.ctx.clear(self.seq)  # positions must not jump over a gap in a non-empty cache (llama.cpp refuses)
        return start

    def rows_for(self, on: bool) -> None:
        self.engine.tgt.set_nextn_rows(on)

    def take_prompt(self, chunk: Sequence[int], pos0: int, rows: np.ndarray, start: int) -> None:
        skip = max(0, start - pos0)
        if skip < len(chunk):
            self.feed(chunk[skip:], pos0 + skip, rows[skip:], self.pending_h if skip == 0 else rows[skip - 1])
        keep = min(len(rows), 64)
        self._remember_h(pos0 + len(rows) - keep, rows[len(rows) - keep:])
        self.pending_h = rows[-1].copy()

    def end_prompt(self) -> None:
        self.engine.tgt.set_nextn_rows(True)  # every verify step needs them, even after ContextFull

    @property
    def checks_prompt(self) -> bool:  # type: ignore[override]
        return not self.chain  # several heads: the first draft is head 0's, but its cache needs every head's

    def flush_prompt(self, picks: dict[int, int] | None = None) -> tuple[int, int]:
        """A prompt's worth of queue gets its own decode (short queues ride with the first draft); with ``picks``,
        always, with an output at each queued position the target picked at: the head's draft there (greedy, as
        every draft) against the target's pick."""
        b = self.mbatch
        if picks and self.checks_prompt and b.n:
            mark = np.isin(b.pos_np[:b.n], np.fromiter(picks, dtype=np.int64))
            if mark.any():
                b.logits_np[:b.n] = mark
                self._decode(b, wait=True, in_step=False)  # padding (stable shapes) moves entries: read by position
                rows = np.nonzero(b.logits_np[:b.n])[0]
                right = sum(self.msampler.sample(int(i)) == picks[int(b.pos_np[i])] for i in rows)
                b.clear()
                return len(rows), int(right)
        if b.n > self.n_draft_max + 1:
            self.flush(in_step=False)
        return 0, 0

    def synchronize(self) -> None:
        self.ctx.synchronize()  # prompt time includes the head's share of it

    def can_rewind(self, n_keep: int) -> bool:
        return n_keep >= 1 and int(self._h_pos[(n_keep - 1) % H_HISTORY]) == n_keep - 1

    def rewind(self, n_keep: int, n_tokens: int) -> None:
        self._drop_ready()
        b = self.mbatch
        q0 = int(b.pos_np[0]) if b.n else n_tokens
        if n_keep <= q0:
            b.clear()
            self.ctx.seq_rm(n_keep, seq=self.seq)
            while self._held and self._held[-1][0] >= n_keep:
                self._held.pop()
        else:
            b.n = n_keep - q0  # drop the queued tail
        self.pending_h = self._h_ring[(n_keep - 1) % H_HISTORY].copy()

    def shared_batch(self, n_seq: int) -> Batch | None:
        # as large as one MTP decode may be: every sequence's queue rides with its first draft
        return Batch(max(self.ctx.n_batch, n_seq * (self.n_draft_max + 1)), self.engine.tgt.model.n_embd_out)

    def _send_queue(self, b: Batch) -> None:
        """Move this sequence's queue into the shared batch ``b`` (it goes out with the first draft there). The
        shared decode does not keep the cache tail the padding needs (a batch of one pads again once refilled)."""
        q, seq = self.mbatch, self.seq
        assert q.embd is not None
        for i in range(q.n):
            b.add(int(q.tok_np[i]), int(q.pos_np[i]), logits=False, embd=q.embd[i], seq=seq)
        q.clear()
        self._held.clear()

    # -- drafts ---------------------------------------------------------------------------------
    def pick(self, i: int) -> int | None:
        """The head's greedy token for MTP batch entry ``i`` (a row of this sequence); None below ``p_min``."""
        t = _clock()
        if self.p_min > 0 and top1_prob(self.ctx.logits_view(i)) < self.p_min:
            d = None
        else:
            d = self.msampler.sample(i)
        timing = self.engine.timing
        timing.d2h(self.msampler, self.ctx.model.n_vocab, 1, 1)
        timing.read(_clock() - t)
        return d

    def _draft_chain(self, heads: list[MtpProposer], lasts: Sequence[int], pos0s: Sequence[int], ks: Sequence[int],
                     b: Batch) -> list[list[int]]:
        """Draft step i runs head i over each sequence's whole draft prefix (its layer has no cache there yet), the
        sequences still drafting in one decode. Leaves nothing at ``pos0`` in the MTP context: ``last`` goes out
        with the verified tokens."""
        mtp, timing = self.ctx, self.engine.timing
        out: list[list[int]] = [[] for _ in heads]
        drafting = [s for s, k in enumerate(ks) if k > 0]
        prefixes: dict[int, tuple[list[int], list[np.ndarray]]] = {}  # each sequence's tokens and their input rows
        for s in drafting:
            heads[s].flush()  # b may be this sequence's own queue: empty now
            prefixes[s] = [lasts[s]], [heads[s].pending_h]
        for i in range(max(ks)):
            b.clear()
            ends: list[int] = []
            for s in drafting:
                seq, (toks, rows) = heads[s].seq, prefixes[s]
                mtp.seq_rm(pos0s[s], seq=seq)
                for j, (tok, row) in enumerate(zip(toks, rows)):
                    end = b.add(tok, pos0s[s] + j, logits=j == len(toks) - 1, embd=row, seq=seq)
                ends.append(end)
            mtp.set_head(i)
            timing.draft(i, self.engine.decode(mtp, b))
            live, drafting = drafting, []
            for s, end in zip(live, ends):
                d = heads[s].pick(end)
                if d is None:
                    continue
                out[s].append(d)
                toks, rows = prefixes[s]
                toks.append(d)
                rows.append(mtp.h_row(end).copy())
                if i + 1 < ks[s]:
                    drafting.append(s)
            if not drafting:
                break
        b.clear()
        mtp.set_head(0)
        for s in prefixes:
            mtp.seq_rm(pos0s[s], seq=heads[s].seq)
        return out

    def propose(self, heads: Sequence[Proposer], lasts: Sequence[int], pos0s: Sequence[int], ks: Sequence[int],
                shared: Batch | None = None, *, defer: bool = False,
                verified: int | None = None) -> tuple[list[list[int]], int]:
        mtps: list[MtpProposer] = heads  # type: ignore[assignment]  # a session's proposers all have a head
        self._deferred, self._read, self._kept, self._self_row = [], False, False, None
        keep = ks[0] if verified is None else verified  # the lone sequence's draft whose id may stay on the device
        if self._ready is not None and len(heads) == 1 and ks[0] > 0 and not self.chain:
            return self._propose_from_ready(lasts[0], pos0s[0], ks[0], defer=defer and self.defers, keep=keep), 1
        for h in mtps:
            h._drop_ready()
        if self.chain:
            b = self.mbatch if len(heads) == 1 else shared
            assert b is not None
            return self._draft_chain(mtps, lasts, pos0s, ks, b), 0
        out: list[list[int]] = [[] for _ in heads]
        if len(heads) == 1:
            b = self.mbatch  # its queue: padded to a stable shape (_decode)
            if b.n >= b.capacity:
                self.flush()
        else:
            assert shared is not None
            b = shared
            b.clear()
            # the queues ride with the first draft; one too many for the batch goes out on its own first
            queued = sorted((h for h, k in zip(mtps, ks) if k > 0), key=lambda h: -h.mbatch.n)
            for h in queued:
                if sum(x.mbatch.n for x in queued) <= b.capacity - len(queued):
                    break
                h.flush()
            for h, k in zip(mtps, ks):
                if k > 0:
                    h._send_queue(b)
        # (id_last, pending_h) at n_past: the feed and the first draft share a decode. Each drafting sequence:
        # (its proposer, its drafts, its draft length, its first position, its output row in b)
        live: list[tuple[MtpProposer, list[int], int, int, int]] = []
        for h, o, last, pos0, k in zip(mtps, out, lasts, pos0s, ks):
            if k > 0:
                live.append((h, o, k, pos0, b.add(last, pos0, logits=True, embd=h.pending_h, seq=h.seq)))
        if self.chained and len(live) == 1 and b is self.mbatch and live[0][2] > 1 and \
                b.n + live[0][2] - 1 <= b.capacity:
            _, drafts, k, pos0, row = live[0]
            self._draft_chained(drafts, k, pos0, row, lasts[0], b, defer=defer and self.defers and keep == k)
            return out, 1
        self._draft_steps(b, live, 0, lasts[0], defer=defer and self.defers and b is self.mbatch, keep=keep)
        return out, 1

    def _draft_steps(self, b: Batch, live: list[tuple[MtpProposer, list[int], int, int, int]], step: int, last: int,
                     *, defer: bool, keep: int = 0) -> None:
        """Decode ``b`` and draft on, from ``step``: each live sequence's (proposer, drafts, length, first position,
        row in ``b``) next draft from its row, paired with the head's own hidden row, until its length. ``defer``: a
        lone sequence's draft number ``keep`` (its last unless a shadow draft follows) may stay on the device: the
        last one's id is not waited for (``last`` holds its place until :meth:`resolve`), an earlier one's is read
        too. Then the drafts' positions leave the head's cache."""
        if (self.self_feeds and defer and b is self.mbatch and step == 0 and len(live) == 1 and live[0][2] > 1
                and keep == live[0][2]):
            self._draft_fed(b, live[0], last)
            return
        started, timing, ctx = live, self.engine.timing, self.ctx
        while live:
            n0 = b.n
            kept = defer and len(live) == 1 and step + 1 == keep
            # a lone sequence's last draft: the host need not wait for it when its id can stay on the device
            last_one = kept and step + 1 == live[0][2]
            timing.draft(step, self._decode(b, wait=not last_one) if b is self.mbatch else self.engine.decode(ctx, b))
            pad = b.n - n0  # rows the padding put in front
            b.clear()
            step += 1
            going = []
            for h, o, k, pos0, i in live:
                if kept and ctx.keep_sampled_token(i + pad):
                    self._deferred = [i + pad]
                    if last_one:
                        o.append(last)  # a placeholder (any valid id) until resolve()
                        continue
                    self._read = True  # the shadow draft is decoded from it: read now, before that decode
                d = h.pick(i + pad)
                if d is None:
                    continue
                o.append(d)
                if step < k:  # the next draft: this one paired with the head's own hidden row
                    row = b.add(d, pos0 + step, logits=True, embd=ctx.h_row(i + pad), seq=h.seq)
                    going.append((h, o, k, pos0, row))
            live = going
        b.clear()
        for h, o, k, pos0, _ in started:
            if o and k > 1:  # a decode ran at pos0 + 1 or later
                h._forget_drafts(pos0)

    def _draft_fed(self, b: Batch, live: tuple[MtpProposer, list[int], int, int, int], last: int) -> None:
        """A lone sequence's k drafts (``live`` as :meth:`_draft_steps`' entries), each after the first decoded from
        the one before on the device: its token and hidden row kept in the head's own slots (slot 0 and row slot 0,
        which the next decode reads; draft j's token also in slot j + 1, for the verify), so the host launches each
        draft without waiting for the last. The ids stay on the device for the verify (placeholders in the drafts
        until :meth:`resolve`, which reads them from the slots). Where the head cannot keep one (before its first keep
        made the slots, say), the drafts read so far come back and the rest are drafted the host's way."""
        _, o, k, pos0, row = live
        timing, ctx = self.engine.timing, self.ctx
        entries: list[int] = []
        for step in range(k):
            n0 = b.n
            timing.draft(step, self._decode(b, wait=False))
            e = row + b.n - n0  # the output row, past the padding
            b.clear()
            # slot 0 and row slot 0: what the next draft reads; slots 1..k: the verify's (one graph shape each)
            if ctx.keep_sampled_token(e, step + 1) and (step + 1 == k or (ctx.keep_sampled_token(e, 0)
                                                                          and ctx.keep_output_h_row(e, 0))):
                o.append(last)  # a placeholder (any valid id) until resolve()
                entries.append(e)
                self._self_slots = True
                if step + 1 < k:
                    row = self._self_row = b.add(last, pos0 + step + 1, logits=True, embd=self._zero_row,
                                                 seq=self.seq)
                continue
            if step:  # the drafts kept so far, read back: from here on the host's way
                ids = ctx.kept_tokens(step, 1)
                if ids is None:
                    raise GgufMtpError("internal: the head's kept drafts cannot be read back")
                o[len(o) - step:] = ids
            d = self.pick(e)
            if d is not None:
                o.append(d)
                if step + 1 < k:
                    row = b.add(d, pos0 + step + 1, logits=True, embd=ctx.h_row(e), seq=self.seq)
                    self._draft_steps(b, [(self, o, k, pos0, row)], step + 1, last, defer=True, keep=k)
                    return
            self._forget_drafts(pos0)
            return
        self._deferred, self._kept = entries, True
        self._forget_drafts(pos0)

    def _propose_from_ready(self, last: int, pos0: int, k: int, *, defer: bool, keep: int) -> list[list[int]]:
        """A lone sequence's drafts when the first is decoded already (:meth:`feed_from_device`): its output row
        gives it and the hidden row the second is drafted from. ``defer``, ``keep``: as :meth:`_draft_steps`'."""
        assert self._ready is not None
        i, at = self._ready
        self._ready = None
        assert at == pos0, (at, pos0)
        if keep == 1 and defer and self.ctx.keep_sampled_token(i):
            self._deferred = [i]
            if k == 1:
                return [[last]]  # a placeholder (any valid id) until resolve()
            self._read = True
        d = self.pick(i)
        if d is None:
            return [[]]
        o = [d]
        if k > 1:
            b = self.mbatch
            row = b.add(d, pos0 + 1, logits=True, embd=self.ctx.h_row(i), seq=self.seq)
            self._draft_steps(b, [(self, o, k, pos0, row)], 1, last, defer=defer, keep=keep)
        return [o]

    def _same_graph_as_fed(self, b: Batch) -> None:
        """A draft decode of the fed decode's shape gets its graph too (an output a row, the target's slots read
        into no row): llama.cpp then reuses one graph for both, and ggml-cuda its captured one."""
        b.logits_np[:b.n] = 1
        tgt, none = self.engine.tgt, [-1] * b.n
        if self.ctx.take_tokens_from(tgt, none) and not self.ctx.take_nextn_from(tgt, none):
            self.ctx.take_tokens_from(tgt, [])

    def feed_from_device(self, tgt: Context, row: int, n: int, n_past: int) -> bool:
        """Right after the verify's decode (queued, not read): decode the head over the ``n`` verify rows from
        ``row`` on (positions ``n_past + 1 ..``), each row's token the target's pick there and its hidden row the
        target's, both taken on the device. Whatever the verify accepts (j drafts), rows 0..j are the feed the host
        would queue and row j's output is the next step's first draft; :meth:`commit` keeps those. False where it
        cannot (nothing is decoded then)."""
        b, ctx = self.mbatch, self.ctx
        if b.n or self._ready is not None or (self.stable and n != self._shape) or n_past + 1 + n > self.engine.n_ctx:
            return False
        if not (all(tgt.keep_sampled_token(row + i, i) for i in range(n)) and tgt.keep_nextn_rows(row, n, 0)):
            return False
        assert b.embd is not None
        for i in range(n):
            b.add(0, n_past + 1 + i, logits=True, embd=b.embd[i], seq=self.seq)  # placeholders: taken on the device
        if not (ctx.take_tokens_from(tgt, range(n)) and ctx.take_nextn_from(tgt, range(n))):
            ctx.take_tokens_from(tgt, [])
            b.clear()
            return False
        self.engine.timing.feed(self.engine.decode(ctx, b, wait=False))
        b.clear()
        self._fed = (n_past + 1, n)
        return True

    def device_rows(self, tgt: Context, batch: Batch, row: int, drafts: list[int]) -> None:
        n = len(self._deferred)  # the last n drafts, kept in slots 0..n-1 (fed on the device: 1..n, slot 0 none)
        first = row + len(drafts) - n + 1
        rows = [*([-1] if self._kept else []), *range(first, first + n)]
        if not n or tgt.take_tokens_from(self.ctx, rows):
            return
        self.resolve(drafts)
        batch.tok_np[first:first + n] = drafts[-n:]

    def resolve(self, drafts: list[int]) -> None:
        entries, self._deferred = self._deferred, []
        if self._read:  # the ids are in drafts already (and the head has decoded past those entries since)
            self._read = False
            return
        if self._kept:  # each draft decoded from the one before on the device: the ids are in slots 0..
            self._kept = False
            ids = self.ctx.kept_tokens(len(entries), 1)
            if ids is None:
                raise GgufMtpError("internal: the head's kept drafts cannot be read back")
            drafts[len(drafts) - len(entries):] = ids
            return
        for j, i in enumerate(entries, start=len(drafts) - len(entries)):
            d = self.pick(i)  # waits for the head's decode, which the verify waited for on the device already
            if d is None:  # cannot happen: a device sampler's pick has no p_min
                raise GgufMtpError("internal: a draft left on the device has no token")
            drafts[j] = d

    def _draft_chained(self, o: list[int], k: int, pos0: int, i: int, last: int, b: Batch, *,
                       defer: bool = False) -> None:
        """This sequence's k drafts, into ``o``, in one decode: ``last`` (row ``i`` of ``b``, after its queue) and
        k - 1 chained rows, whose token and hidden row llama.cpp takes on the device from the row before (argmax,
        h_nextn); what this side puts in them is only there for the batch's checks. ``defer``: all k ids may stay
        on the device for the verify (placeholders in ``o`` until :meth:`resolve`)."""
        for j in range(1, k):
            b.add(last, pos0 + j, logits=True, embd=self.pending_h, seq=self.seq)
        self._chain_rows = k - 1
        self.ctx.set_mtp_chain(k - 1)
        try:
            n0 = b.n
            self.engine.timing.draft(0, self._decode(b, wait=not defer))
            pad = b.n - n0
        finally:
            self.ctx.set_mtp_chain(0)  # any other decode of this context (a flush, a prompt) is not chained
            self._chain_rows = 0
        b.clear()
        entries = [i + pad + j for j in range(k)]
        if defer and all(self.ctx.keep_sampled_token(e, slot) for slot, e in enumerate(entries)):
            self._deferred = entries
            o.extend([last] * k)  # placeholders (any valid id) until resolve()
        else:
            for e in entries:
                d = self.pick(e)
                if d is None:
                    break
                o.append(d)
        self._forget_drafts(pos0)

    def _forget_drafts(self, pos0: int) -> None:
        """The drafts' own positions leave no trace; ``last`` at ``pos0`` stays."""
        self.ctx.seq_rm(pos0 + 1, seq=self.seq)
        while self._held and self._held[-1][0] > pos0:
            self._held.pop()

    # -- a step's outcome -----------------------------------------------------------------------
    def verify_rows(self, tgt: Context, row: int, n: int, copy: bool = False) -> tuple[np.ndarray | None, int]:
        rows = tgt.h_rows(row + n)[row:]
        return (rows.copy() if copy else rows), row + n

    def commit(self, stats: Stats, last: int, drafts: list[int], j: int, rows: np.ndarray | None, n_past: int,
               *, k: int, held: int, bonus: int = -1) -> None:
        assert rows is not None
        self._remember_h(n_past, rows[: j + 1])
        if self._fed is not None:
            p0, n = self._fed
            self._fed = None
            # rows 0..j are the feed; the rows after them leave, and row j's output is the next first draft
            self.ctx.seq_rm(p0 + j + 1, seq=self.seq)
            verified = drafts[:j]  # the token at p0 + i is the target's pick at row i: drafts[i], then the bonus
            while self._held and self._held[-1][0] >= p0:
                self._held.pop()
            for i in range(j + 1):
                tok = verified[i] if i < j else bonus
                self._held.append((p0 + i, tok, rows[i].copy()))
            self._ready = (j, p0 + j)
            self.pending_h = rows[j].copy()
            if drafts:
                stats.record(len(drafts), j)
            return
        if held > j + 1:
            self.ctx.seq_rm(n_past + j + 1, seq=self.seq)
        elif held < j + 1:
            # After a plain step (k=0) too: the head drafts from (token, target hidden row of the position
            # before) at every position, so a later draft needs all of them in its cache. They wait in the
            # queue and go out in one batch with the next draft (or at the queue's capacity): one MTP decode
            # for a whole run of plain steps, not one per step, and none at all if no draft follows.
            verified = [last, *drafts]
            self.feed(verified[held: j + 1], n_past + held, rows[held:],
                      self.pending_h if held == 0 else rows[held - 1])
        self.pending_h = rows[j].copy()
        if drafts:
            stats.record(len(drafts), j)
        elif k == 0:  # chose not to draft: no drafted-and-rejected position, no dilution of tok/step
            stats.plain_steps += 1

__all__ = ["Proposer", "MtpProposer"]
