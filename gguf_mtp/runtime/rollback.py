"""Undoing rejected drafts in the target context: one strategy object per context, chosen at load time.

- ``kv``: attention-only models; ``seq_rm`` drops the rejected positions.
- ``native``: hybrid models whose recurrent state llama.cpp snapshots (``n_rs_seq`` >= draft length); the
  same ``seq_rm`` also steps the recurrent state back.
- ``replay``: hybrid models without those snapshots (qwen3next in this llama.cpp). The recurrent state of the
  last point where every token was accepted is kept; after a rejection it is restored, the attention KV cache
  drops everything after that point, and the accepted tokens are decoded again, either at once or
  (``merge``) ahead of the next verify batch, where on a GPU they cost next to nothing. Options:
  ``store``: ``seq`` keeps the copy in a spare sequence through llama.cpp's copy-on-write of recurrent cells
  (saving is bookkeeping; the copy is a row gather inside the next decode's graph; it needs a unified KV cache,
  so sessions with several slots use ``state-device``), ``state`` and ``state-device`` through
  ``llama_state_seq_get/set_data_ext(PARTIAL_ONLY [| ON_DEVICE])``;
  ``every``: save only every n-th step (a rejection then re-decodes back to the last save);
  ``merge``: re-decode up to this many tokens with the next verify batch instead of in a decode of their own.

The engine calls ``prefix`` before it builds a verify batch (tokens to decode ahead of it), ``settle`` once it
knows the accepted prefix, ``flush`` before it feeds more tokens, ``truncate`` to rewind a chat, ``reset`` on
a cleared context. Spec strings (``SessionConfig.rollback``): ``auto``, ``native``, ``replay`` or
``replay:store=state,every=4,merge=8``.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..errors import GgufMtpError
from .arch_facts import arch_facts
from .config import RollbackChoice, parse_rollback
from .llama import Batch, Context, Model, _ll
from .patches import rs_rollback_archs

PARTIAL = _ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY  # hybrid memory: the recurrent part only, not the attention KV
ON_DEVICE = _ll.LLAMA_STATE_SEQ_FLAGS_ON_DEVICE  # tensor bytes stay in a device buffer of llama.cpp's


class Rollback:
    """``kv`` / ``native``: the target's memory steps back by itself. One per sequence (server slot)."""

    max_prefix = 0  # the most tokens ``prefix`` returns (room the verify batches keep for them)

    def __init__(self, ctx: Context, name: str, seq: int = 0) -> None:
        self.ctx, self.name, self.seq = ctx, name, seq

    def prefix(self, tokens: Sequence[int], drafts: bool = True) -> Sequence[int]:
        """Tokens of ``tokens``' tail the target does not hold yet: decode them ahead of the next verify batch,
        which holds drafts unless ``drafts`` is False (a plain step: nothing of it can be rejected)."""
        return ()

    def settle(self, tokens: Sequence[int], n_end: int) -> tuple[float, int]:
        """The target decoded up to ``n_end``; keep ``len(tokens)``. Returns the seconds this step spent saving,
        restoring and re-decoding, and how many tokens were decoded again (tokens merged into a verify batch are
        not counted here: they are the next ``prefix``)."""
        if n_end > len(tokens) and not self.ctx.seq_rm(len(tokens), seq=self.seq):
            raise GgufMtpError("the target context cannot roll back rejected drafts (recurrent state without "
                               "snapshots); run with --no-mtp")
        return 0.0, 0

    def flush(self, tokens: Sequence[int]) -> None:
        """Make the target hold every token of ``tokens``."""

    def truncate(self, tokens: Sequence[int], n_keep: int) -> bool:
        """Keep the first ``n_keep`` of ``tokens``; False when the state cannot go back that far."""
        return self.ctx.seq_rm(n_keep, seq=self.seq)

    def reset(self) -> None:
        """The context was cleared."""


class SeqStore:
    """The recurrent state kept in a spare sequence: ``seq_cp`` makes both sequences share the cell, and the next
    decode of ``seq`` reads the shared cell and writes its new state to a free one (llama.cpp's copy-on-write),
    so saving costs no copy of its own. The empty position range leaves the attention KV alone, which holds only
    in a unified KV cache (across streams llama.cpp copies whole buffers)."""

    def __init__(self, ctx: Context, seq: int, spare: int) -> None:
        self.ctx, self.seq, self.spare = ctx, seq, spare

    def save(self) -> None:
        self.ctx.seq_cp(self.seq, self.spare, 0, 0)

    def restore(self) -> None:
        self.ctx.seq_cp(self.spare, self.seq, 0, 0)


class StateStore:
    """The recurrent state copied out with ``llama_state_seq_get_data_ext(PARTIAL_ONLY)`` and back with
    ``set_data_ext``; ``ON_DEVICE`` keeps the tensor bytes in a device buffer (only metadata comes to the host)."""

    def __init__(self, ctx: Context, seq: int, on_device: bool = False) -> None:
        self.ctx, self.seq, self.flags = ctx, seq, PARTIAL | (ON_DEVICE if on_device else 0)
        self.buf: ctypes.Array[ctypes.c_uint8] | None = None
        self.n = 0

    def save(self) -> None:
        size = self.ctx.state_size(self.flags, self.seq)
        if self.buf is None or len(self.buf) < size:
            self.buf = (ctypes.c_uint8 * size)()
        self.n = self.ctx.state_get(self.buf, self.flags, self.seq)
        if not self.n:
            raise GgufMtpError(f"{self.ctx.model.path}: llama.cpp could not save the recurrent state")

    def restore(self) -> None:
        assert self.buf is not None
        if not self.ctx.state_set(self.buf, self.n, self.flags, self.seq):
            raise GgufMtpError(f"{self.ctx.model.path}: llama.cpp could not restore the recurrent state")


class Replay(Rollback):
    """Restore a saved recurrent state and decode the accepted tokens again (see the module docstring)."""

    PLAIN_EVERY = 32  # steps without drafts between saves

    def __init__(self, ctx: Context, k: int, store: str = "seq", every: int = 1, merge: int = 0, seq: int = 0,
                 spare: int = 1, n_seq: int = 1) -> None:
        super().__init__(ctx, "replay", seq)
        self.store: SeqStore | StateStore = (SeqStore(ctx, seq, spare) if store == "seq"
                                             else StateStore(ctx, seq, on_device=store == "state-device"))
        # merged tokens ride in the verify batch, which holds n_batch tokens for all n_seq sequences
        self.every, self.merge = max(1, every), max(0, min(merge, ctx.n_batch // n_seq - 1 - k))
        self.max_prefix = self.merge
        self.name = f"replay (store={store}, every={self.every}, merge={self.merge})"
        self.batch = Batch(ctx.n_batch, seq=seq)
        self.pending = 0  # trailing tokens the target's memory does not hold
        self.snap: int | None = None  # the saved state holds this many tokens
        self.since = 0  # steps since the save
        self.saving = 0.0  # seconds spent saving since the last settle (reported with it)

    def prefix(self, tokens: Sequence[int], drafts: bool = True) -> Sequence[int]:
        n = len(tokens)
        # A plain step rejects nothing, so it needs no save of its own (with store=state-device a save is a copy
        # of the whole recurrent state: 0.35 ms a step on the H100 of bench/reference/qwen3next-h100.txt, 14% of
        # a plain step). The older save stays valid (every token since is accepted) and ``since`` still counts,
        # so the next step with drafts saves as it would have. Plain steps still save every PLAIN_EVERY steps
        # (and when there is no save), so that a chat rewind (``truncate``) re-decodes a bounded tail.
        every = self.every if drafts else max(self.every, self.PLAIN_EVERY)
        if not self.pending and (self.snap is None or self.since >= every):
            t = time.perf_counter()
            self.store.save()
            self.saving += time.perf_counter() - t
            self.snap, self.since = n, 0
        self.since += 1
        return tokens[n - self.pending:] if self.pending else ()

    def settle(self, tokens: Sequence[int], n_end: int) -> tuple[float, int]:
        n_keep = len(tokens)
        saved, self.saving = self.saving, 0.0
        if n_end <= n_keep:  # everything accepted: the memory holds every token
            self.pending = 0
            return saved, 0
        assert self.snap is not None
        t = time.perf_counter() - saved
        self.store.restore()
        self.ctx.seq_rm(self.snap, seq=self.seq)  # the attention KV cache; the recurrent part is already back
        self.pending = n_keep - self.snap
        replayed = 0
        if self.pending > self.merge:
            replayed = self.pending
            self._decode(tokens, self.snap)
        return time.perf_counter() - t, replayed

    def flush(self, tokens: Sequence[int]) -> None:
        if self.pending:
            self._decode(tokens, len(tokens) - self.pending)
        self.snap = None  # a later rejection must not re-decode what is fed now

    def truncate(self, tokens: Sequence[int], n_keep: int) -> bool:
        held = len(tokens) - self.pending
        if n_keep >= held:  # only tokens the memory does not hold yet go
            self.pending = n_keep - held
            return True
        if self.snap is not None and self.snap <= n_keep:  # back to the saved state, re-decode from there
            self.store.restore()
            self.ctx.seq_rm(self.snap, seq=self.seq)
            self.pending = n_keep - self.snap
            return True
        return False  # before the saved state: the engine starts over

    def reset(self) -> None:
        self.pending, self.snap, self.since = 0, None, 0

    def _decode(self, tokens: Sequence[int], start: int) -> None:
        """Decode ``tokens[start:]``, which the memory lacks (no logits: the engine has read this step's)."""
        b = self.batch
        for c in range(start, len(tokens), b.capacity):
            b.fill(tokens[c:c + b.capacity], c)
            self.ctx.decode_batch(b)
        self.pending = 0


#: the parsed ``SessionConfig.rollback`` (config.py: parsed before llama.cpp loads)
Choice = RollbackChoice
parse = parse_rollback

#: what ``auto`` picks where llama.cpp keeps no snapshots. bench/qwen3next.py measures the alternatives: saving is
#: free with store=seq; merging the re-decode into the next verify batch saves a decode call per rejection
#: (CPU time per token at a ~70% head 5-15% below re-decoding at once, docs/run.md), more on a GPU, where a decode
#: of a few more tokens costs about the same; 8 bounds how far a run of rejections can grow the batch.
DEFAULT_REPLAY = Choice("replay", store="seq", every=1, merge=8)


def open_target(model: Model, arch: str, k: int, make: Callable[[int, int, bool], Context], spec: str = "auto",
                n_seq: int = 1) -> tuple[Context, list[Rollback], str]:
    """Make the target context (``make(n_rs_seq, n_seq_max, kv_unified)``) for ``n_seq`` sequences and one
    rollback per sequence, plus a note for the user when rollback needs a workaround. The fact table predicts
    whether llama.cpp keeps snapshots; the context's ``n_rs_seq`` decides, so a llama.cpp that keeps them for
    more archs is used natively."""
    want = parse(spec)
    if not model.recurrent:
        if want.kind in ("native", "replay"):
            raise GgufMtpError(f"rollback {spec!r}: {arch} has no recurrent state; its KV cache rolls back by itself")
        ctx = make(0, n_seq, False)
        return ctx, [Rollback(ctx, "kv", s) for s in range(n_seq)], ""
    facts = arch_facts(arch, model.recurrent)
    choice = want if want.kind == "replay" else DEFAULT_REPLAY
    if n_seq > 1 and choice.store == "seq" and want.kind != "replay":
        # slots keep their own KV streams, where a seq_cp copies whole buffers: save through the state API
        choice = replace(choice, store="state-device")
    spares = choice.store == "seq"  # a spare sequence per slot, in a unified KV cache

    def replay(ctx: Context) -> list[Rollback]:
        return [Replay(ctx, k, choice.store, choice.every, choice.merge, seq=s, spare=n_seq + s, n_seq=n_seq)
                for s in range(n_seq)]

    if want.kind == "replay":
        ctx = make(0, 2 * n_seq if spares else n_seq, spares)
        return ctx, replay(ctx), ""
    # a patched llama.cpp (patches/llama.cpp) may snapshot more archs than the table's stock list
    predict_native = want.kind == "native" or facts.rs_rollback or arch in rs_rollback_archs()
    ctx = make(k, n_seq if predict_native or not spares else 2 * n_seq, not predict_native and spares)
    if ctx.n_rs_seq() >= k:
        if not predict_native and spares:  # the table expected no snapshots, but this llama.cpp keeps them
            ctx.close()
            ctx = make(k, n_seq, False)
        return ctx, [Rollback(ctx, f"native (n_rs_seq={k})", s) for s in range(n_seq)], ""
    why = facts.why or f"llama.cpp keeps no rollback snapshots of {arch}'s recurrent state"
    if want.kind == "native":
        ctx.close()
        raise GgufMtpError(f"rollback 'native': {why}")
    if predict_native and spares:
        ctx.close()
        ctx = make(0, 2 * n_seq, True)
    rbs = replay(ctx)
    return ctx, rbs, (f"{arch}: {why}; rejected drafts are undone from a saved copy of that state "
                      f"(lossless, {rbs[0].name})")
