"""Several conversations stepped together: engines on the same contexts, each in its own sequence, share every
llama_decode of the step (the i-th draft of every sequence in one MTP batch, each sequence's queue with its
first draft, all verifications in one target batch), as llama-server batches its slots. The step is
:func:`~.speculative.batch_step`, the one :meth:`Engine.step` takes for a batch of one; this module holds what
a session's engines share for it: batches sized for all of them and, under ``auto``, one draft length.

The result for each engine is what :meth:`Engine.step` would have emitted: the same drafts are proposed, the
target's sampler picks every token from that sequence's own rows, and each sequence rolls back its own
rejected drafts through its engine's rollback (per-sequence KV cells and recurrent snapshots, or a saved
recurrent state whose accepted tokens ride ahead of that sequence's next verify). Each sequence samples with its
engine's llama.cpp sampler chains (one per sequence and context, inside the decode graph where the back-end can).
A sequence whose draft length is 0 this step only joins the verify batch: its token waits in its engine's MTP
queue for its next draft.
"""

from __future__ import annotations

from collections.abc import Sequence

from .adaptive import DraftLength
from .llama import Batch
from .sampling import Sampler
from .speculative import Engine, batch_step


class MultiStep:
    """Batches for the engines of one session (sized for all of them drafting ``n_draft_max`` tokens).

    With ``auto`` the batched step has one draft length for every sequence, chosen from the step's wall time
    and the sequences' pooled acceptance. Lengths chosen per sequence, each timed by the whole shared step,
    gave a different batch shape on most steps (a graph rebuild and a CUDA graph capture each time) and
    measured each other's costs: on an H100 with 8 clients, 0.37x the throughput of plain decoding."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        e0 = engines[0]
        # no shadow drafts here: a batched step drafts and verifies the same length for every sequence
        self.adaptive = DraftLength(e0.n_draft_max, shadows=False) if e0.adaptive is not None else None
        for e in engines:  # a slot stepping alone pads its head's decodes to the shared choice
            e.head.lengths = self.adaptive
        n = len(engines) * (e0.n_draft_max + 1)
        self.tbatch = Batch(n + sum(e.rollback.max_prefix for e in engines))  # + tokens re-decoded (rollback.py)
        self.mbatch = e0.head.shared_batch(len(engines))

    def step(self, engines: Sequence[Engine], samplers: Sequence[Sampler]) -> list[list[int]]:
        """One step of every engine (distinct sequences, in increasing sequence order); returns the tokens each
        emitted."""
        return batch_step(engines, samplers, lengths=self.adaptive, tbatch=self.tbatch, mbatch=self.mbatch)
