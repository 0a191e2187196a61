"""Per-architecture facts the runtime reads: how the target's memory undoes rejected drafts, and which rows the
MTP graph's hidden-row output holds.

Speculative decoding verifies ``k`` drafts in one batch and must then forget the rejected ones. An attention KV
cache drops positions (``seq_rm``). A recurrent state (Gated DeltaNet in the Qwen hybrids) cannot: it is one
running state per sequence, so llama.cpp keeps ``n_rs_seq`` per-token snapshots of it, but only for the archs
in ``llm_arch_supports_rs_rollback`` (src/llama-arch.cpp); for any other arch it clamps ``n_rs_seq`` to 0.

``rs_rollback`` records that list as of the vendored llama.cpp (llama-cpp-python 0.3.36). It is a prediction
only (it picks the context parameters that are right first time): the runtime asks the context it made
(``llama_n_rs_seq``) and uses native rollback whenever llama.cpp grants the snapshots, so a llama.cpp that
adds an arch to its list is used natively with no change here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ArchFacts:
    recurrent: bool  # the trunk has per-sequence recurrent state beside its attention KV cache
    rs_rollback: bool  # llama.cpp keeps n_rs_seq rollback snapshots of that state (llm_arch_supports_rs_rollback)
    why: str = ""  # why the runtime works around missing snapshots (shown to the user)
    # the MTP graph's hidden-row output (t_h_nextn) holds every token of the batch: it is set before the output
    # rows are picked, so llama.cpp's masked copy (the first n_outputs rows) gives the batch's first tokens, not
    # its outputs, and the runtime reads such heads unmasked; the others pick the rows first and are read masked
    mtp_rows_per_token: bool = False


ARCHS: dict[str, ArchFacts] = {
    "qwen35": ArchFacts(recurrent=True, rs_rollback=True, mtp_rows_per_token=True),
    "qwen35moe": ArchFacts(recurrent=True, rs_rollback=True, mtp_rows_per_token=True),
    # the same Gated DeltaNet graph code as qwen35 (llm_build_delta_net_base), but not on llama.cpp's list;
    # docs/upstream/qwen3next-rs-rollback.md shows that adding it there is all that is missing
    "qwen3next": ArchFacts(recurrent=True, rs_rollback=False,
                           why="llama.cpp keeps no rollback snapshots of qwen3next's recurrent state "
                               "(not in llm_arch_supports_rs_rollback)"),
    "glm4moe": ArchFacts(recurrent=False, rs_rollback=False, mtp_rows_per_token=True),
    "deepseek2": ArchFacts(recurrent=False, rs_rollback=False, mtp_rows_per_token=True),
    "mimo2": ArchFacts(recurrent=False, rs_rollback=False),
    "step35": ArchFacts(recurrent=False, rs_rollback=False),
}


def arch_facts(arch: str, recurrent: bool) -> ArchFacts:
    """The table's entry, or (an arch gguf-mtp does not convert) what the loaded model says, assuming snapshots."""
    return ARCHS.get(arch) or ArchFacts(recurrent=recurrent, rs_rollback=recurrent,
                                        why=f"llama.cpp keeps no rollback snapshots of {arch}'s recurrent state")
