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

from ..errors import GgufMtpError
from .adaptive import DraftLength
from .llama import Batch, Context
from .sampling import Sampler
from .speculative import ContextFull, Engine
from .stats import Stats


def _pooled(engines: Sequence[Engine]) -> Stats:
    """All the sequences' counts in one: what the one shared draft length is chosen by."""
    p = Stats()
    for e in engines:
        p.merge(e.stats)
    return p


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
        returns the tokens each emitted."""
        if any(e.chain for e in engines):
            return [e.step(s) for e, s in zip(engines, samplers)]
        t_step = time.perf_counter()
        lasts: list[int] = []  # each engine's id_last
        for e, s in zip(engines, samplers):
            if e.id_last is None:
                raise GgufMtpError("nothing to decode: feed a prompt first")
            if e.n_ctx - len(e.tokens) - 1 < 1:
                raise ContextFull(e.n_ctx)
            e.use_sampler(s)  # a new job's sampler starts from its seed; the same one carries on
            lasts.append(e.id_last)
        n_past = [len(e.tokens) for e in engines]
        shared = self.adaptive.next(_pooled(engines)) if self.adaptive is not None else None
        ks = [min(e._next_k() if shared is None else shared, e.n_ctx - n - 2) if e.mtp is not None else 0
              for e, n in zip(engines, n_past)]
        for e, k in zip(engines, ks):
            if k > 0:  # a plain step (k=0) leaves its engine's MTP queue and cache alone (see the feed below)
                e.before_batched_step()
        drafts, draft_t = self._draft(engines, ks, n_past, lasts)
        # verify: every sequence's [id_last, drafts] in one target batch
        tb = self.tbatch
        tb.clear()
        offs, pres = [], []
        for e, n, d, last in zip(engines, n_past, drafts, lasts):
            pres.append(len(pre := e.rollback.prefix(e.tokens, drafts=bool(d))))  # accepted tokens to decode again
            for i, t in enumerate(pre):
                tb.add(t, n - len(pre) + i, logits=False, seq=e.seq)
            offs.append(tb.n)
            tb.add(last, n, logits=True, seq=e.seq)
            for i, t in enumerate(d):
                tb.add(t, n + 1 + i, logits=True, seq=e.seq)
        tv = self._decode(self.tgt, tb)
        out: list[list[int]] = []
        accepted: list[int] = []
        for e, d, o in zip(engines, drafts, offs):
            emitted: list[int] = []
            for i in range(len(d) + 1):
                t = e.tsampler.sample(o + i)
                emitted.append(t)
                if i >= len(d) or t != d[i]:
                    break
            out.append(emitted)
            accepted.append(len(emitted) - 1)
        share = 1.0 / len(engines)
        feed_t = 0.0
        if self.mtp is not None:
            h_all = self.tgt.h_rows(tb.n)
            rows = [h_all[o: o + len(d) + 1].copy() for o, d in zip(offs, drafts)]
            mb = self.mbatch
            assert mb is not None and mb.embd is not None
            mb.clear()
            for e, n, d, r, last, k in zip(engines, n_past, drafts, rows, lasts, ks):
                if k == 0:  # a plain step: into the engine's own queue, out with its next draft (Engine.step)
                    e._feed_mtp([last], n, r, e.pending_h)
                    continue
                for i, t in enumerate([last] + d):  # the MTP context gets (x_p, h_{p-1})
                    mb.add(t, n + i, logits=False, embd=e.pending_h if i == 0 else r[i - 1], seq=e.seq)
            if mb.n:
                feed_t = self._decode(self.mtp, mb)
            for e, n, d, r, j, k in zip(engines, n_past, drafts, rows, accepted, ks):
                e._remember_h(n, r[: j + 1])
                e.pending_h = r[j].copy()
                if d:
                    e.stats.record(len(d), j)
                elif k == 0:
                    e.stats.plain_steps += 1
        for e, n, d, emitted, j, p, last in zip(engines, n_past, drafts, out, accepted, pres, lasts):
            if j < len(d) and self.mtp is not None:
                self.mtp.seq_rm(n + j + 1, seq=e.seq)
            e.tokens.extend(([last] + d)[: j + 1])
            spent, replayed = e.rollback.settle(e.tokens, n + len(d) + 1)
            e.stats.rollback_seconds += spent
            e.stats.replayed_tokens += replayed + p
            e.id_last = emitted[-1]
            e.stats.steps += 1
            e.stats.llama_seconds += (draft_t + tv + feed_t) * share + spent
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
        h = [e.pending_h for e in engines]
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
                d = engines[s]._pick_draft(r)  # that sequence's greedy chain (p_min: None below it)
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
