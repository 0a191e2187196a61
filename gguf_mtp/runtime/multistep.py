"""One speculative step for several conversations at once: engines on the same contexts, each in its own
sequence, share every llama_decode of the step (the i-th draft of every sequence in one MTP batch, all
verifications in one target batch, all MTP feeds in one batch), as llama-server batches its slots. A
sequence whose draft length is 0 this step (``auto`` chose plain decoding) only joins the verify batch: its
token waits in its engine's MTP queue for its next draft, as in :meth:`Engine.step`.

The result for each engine is what :meth:`Engine.step` would have emitted: the same drafts are proposed, the
target's sampler picks every token from that sequence's own rows, and each sequence rolls back its own
rejected drafts through its engine's rollback (per-sequence KV cells and recurrent snapshots, or a saved
recurrent state whose accepted tokens ride ahead of that sequence's next verify). Each sequence samples with its
engine's llama.cpp sampler chains (one per sequence and context, inside the decode graph where the back-end can).
Engines with several chained heads (mimo2, step35) step one after another.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from .adaptive import DraftLength
from .llama import Batch, Context
from .proposer import MtpProposer
from .sampling import Sampler
from .speculative import Engine
from .stats import Stats


def _pooled(engines: Sequence[Engine]) -> Stats:
    """All the sequences' counts in one: what the one shared draft length is chosen by."""
    p = Stats()
    for e in engines:
        p.merge(e.stats)
    return p


def _heads(engines: Sequence[Engine]) -> list[MtpProposer]:
    """The engines' MTP heads (a session's engines all have one, or none)."""
    heads = [e.head for e in engines]
    assert all(isinstance(h, MtpProposer) for h in heads)
    return heads  # type: ignore[return-value]


class MultiStep:
    """Batches for the engines of one session (sized for all of them drafting ``n_draft_max`` tokens).

    With ``auto`` the batched step has one draft length for every sequence, chosen from the step's wall time
    and the sequences' pooled acceptance. Lengths chosen per sequence, each timed by the whole shared step,
    gave a different batch shape on most steps (a graph rebuild and a CUDA graph capture each time) and
    measured each other's costs: on an H100 with 8 clients, 0.37x the throughput of plain decoding."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        e0 = engines[0]
        self.tgt, self.mtp = e0.tgt, e0.mtp
        # no shadow drafts here: a batched step drafts and verifies the same length for every sequence
        self.adaptive = DraftLength(e0.n_draft_max, shadows=False) if e0.adaptive is not None else None
        n = len(engines) * (e0.n_draft_max + 1)
        self.tbatch = Batch(n + sum(e.rollback.max_prefix for e in engines))  # + tokens re-decoded (rollback.py)
        self.mbatch = Batch(n, e0.tgt.model.n_embd_out) if self.mtp is not None else None

    @staticmethod
    def _decode(ctx: Context, batch: Batch) -> float:
        t = time.perf_counter()
        ctx.decode_batch(batch)
        ctx.synchronize()
        return time.perf_counter() - t

    def step(self, engines: Sequence[Engine], samplers: Sequence[Sampler]) -> list[list[int]]:
        """One step of every engine (distinct sequences, in increasing sequence order for llama.cpp's splits);
        returns the tokens each emitted. Each engine's own operations (``begin_step``, ``add_verify``, ``accept``,
        ``commit``: the ones :meth:`Engine.step` is made of) run on the shared batches."""
        if any(e.chain for e in engines):
            return [e.step(s) for e, s in zip(engines, samplers)]
        t_step = time.perf_counter()
        rooms = [e.begin_step(s) for e, s in zip(engines, samplers)]  # a new job's sampler starts from its seed
        lasts = [e.id_last for e in engines if e.id_last is not None]  # begin_step checked each
        n_past = [len(e.tokens) for e in engines]
        shared = self.adaptive.next(_pooled(engines)) if self.adaptive is not None else None
        ks = [e.draft_length(room, shared) for e, room in zip(engines, rooms)]
        for e, k in zip(engines, ks):
            if k > 0:  # a plain step (k=0) leaves its engine's MTP queue and cache alone (see the feed below)
                e.before_batched_step()
        drafts, draft_t = self._draft(engines, ks, n_past, lasts)
        # verify: every sequence's [id_last, drafts] in one target batch
        tb = self.tbatch
        tb.clear()
        offs = [e.add_verify(tb, d) for e, d in zip(engines, drafts)]
        tv = self._decode(self.tgt, tb)
        out = [e.accept(o, d) for e, d, o in zip(engines, drafts, offs)]
        share = 1.0 / len(engines)
        feed_t = 0.0
        rows: list[np.ndarray | None] = [None] * len(engines)
        helds = [0] * len(engines)
        if self.mtp is not None:
            h_all = self.tgt.h_rows(tb.n)
            rows = [h_all[o: o + len(d) + 1].copy() for o, d in zip(offs, drafts)]
            mb = self.mbatch
            assert mb is not None
            mb.clear()
            for s, (head, e, n, d, r, last, k) in enumerate(zip(_heads(engines), engines, n_past, drafts, rows, lasts,
                                                                 ks)):
                if k == 0:  # a plain step: into the engine's own queue, out with its next draft (Engine.step)
                    continue
                assert r is not None
                for i, t in enumerate([last] + d):  # the MTP context gets (x_p, h_{p-1})
                    mb.add(t, n + i, logits=False, embd=head.pending_h if i == 0 else r[i - 1], seq=e.seq)
                helds[s] = len(d) + 1
            if mb.n:
                feed_t = self._decode(self.mtp, mb)
        for e, d, emitted, r, k, held in zip(engines, drafts, out, rows, ks, helds):
            e.commit(d, emitted, r, k=k, held=held)
            e.stats.llama_seconds += (draft_t + tv + feed_t) * share
        step_s = time.perf_counter() - t_step
        if self.adaptive is not None and shared is not None:
            self.adaptive.observe(shared, step_s)
        else:
            for e, k in zip(engines, ks):
                if e.adaptive is not None:
                    e.adaptive.observe(k, step_s)
        return out

    def _draft(self, engines: Sequence[Engine], ks: list[int], n_past: list[int],
               lasts: list[int]) -> tuple[list[list[int]], float]:
        """Draft step i of every sequence that still drafts, in one MTP batch; drafts leave no trace in the cache."""
        drafts: list[list[int]] = [[] for _ in engines]
        if self.mtp is None or not any(k > 0 for k in ks):
            return drafts, 0.0
        mb = self.mbatch
        assert mb is not None
        tok = list(lasts)  # each sequence's token to draft from: id_last, then its drafts
        heads = _heads(engines)
        h = [head.pending_h for head in heads]
        live = [k > 0 for k in ks]
        spent = 0.0
        for i in range(max(ks)):
            mb.clear()
            rows = []
            for s, e in enumerate(engines):
                if live[s] and i < ks[s]:
                    rows.append(s)
                    mb.add(tok[s], n_past[s] + i, logits=True, embd=h[s], seq=e.seq)
            if not rows:
                break
            spent += self._decode(self.mtp, mb)
            for r, s in enumerate(rows):
                d = heads[s].pick(r)  # that sequence's greedy chain (p_min: None below it)
                if d is None:
                    live[s] = False
                    continue
                drafts[s].append(d)
                h[s] = self.mtp.h_row(r).copy()
                tok[s] = d
        for s, e in enumerate(engines):
            if ks[s] > 0:
                self.mtp.seq_rm(n_past[s], seq=e.seq)
        return drafts, spent
