"""The runtime's view of :mod:`gguf_mtp.archs`: how the target's memory undoes rejected drafts, and which rows the
MTP graph's hidden-row output holds.

Speculative decoding verifies ``k`` drafts in one batch and must then forget the rejected ones. An attention KV
cache drops positions (``seq_rm``). A recurrent state (Gated DeltaNet in the Qwen hybrids) cannot: it is one
running state per sequence, so llama.cpp keeps ``n_rs_seq`` per-token snapshots of it, but only for the archs
in ``llm_arch_supports_rs_rollback``; for any other arch it clamps ``n_rs_seq`` to 0. The facts (``recurrent``,
``rs_rollback``, ``why``, ``mtp_rows_per_token``) live in the arch table; this module only reads them.
"""

from __future__ import annotations

from .. import archs as _table  # read at each call: tests patch the table (monkeypatch)
from ..archs import Arch as ArchFacts

__all__ = ["ArchFacts", "arch_facts"]


def arch_facts(arch: str, recurrent: bool) -> ArchFacts:
    """The table's entry, or (an arch gguf-mtp does not convert) what the loaded model says, assuming snapshots."""
    return _table.ARCHS.get(arch) or ArchFacts(recurrent=recurrent, rs_rollback=recurrent,
                                        why=f"llama.cpp keeps no rollback snapshots of {arch}'s recurrent state")
