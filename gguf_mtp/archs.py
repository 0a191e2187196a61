"""Facts per GGUF architecture, one row each: the single place to look up what an arch is and how llama.cpp
treats it. Plain data with no imports from the rest of gguf-mtp, so inspection, pairing, validation and the
runtime read it without loading the converter.

``families`` names the converter class for each Hugging Face ``architectures`` entry that becomes this arch,
as ``"module:Class"`` under :mod:`gguf_mtp.families` (imported on demand by the registry there).

``rs_rollback`` records llama.cpp's ``llm_arch_supports_rs_rollback`` list (src/llama-arch.cpp) as of the
vendored llama.cpp (llama-cpp-python 0.3.36). It is a prediction only (it picks the context parameters that
are right first time): the runtime asks the context it made (``llama_n_rs_seq``) and uses native rollback
whenever llama.cpp grants the snapshots, so a llama.cpp that adds an arch to its list works with no change here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, kw_only=True)
class Arch:
    """One GGUF architecture. Every field has a default so a row says only what is special about its arch."""

    #: HF ``architectures`` name -> ``"module:Class"`` of the family that converts it
    families: Mapping[str, str] = field(default_factory=dict)
    #: llama.cpp pre-tokenizer name written by default (a family may refine it per release)
    tokenizer_pre: str = ""
    #: MTP layers llama.cpp's graph for the arch runs (None: any number, chained, one per draft step)
    max_heads: int | None = 1
    #: checkpoint norms are zero-centred: the converter writes ``w + 1``
    norm_offset: bool = False
    #: the trunk has per-sequence recurrent state beside its attention KV cache
    recurrent: bool = False
    #: llama.cpp keeps ``n_rs_seq`` rollback snapshots of that state (``llm_arch_supports_rs_rollback``)
    rs_rollback: bool = False
    #: why the runtime works around missing snapshots (shown to the user)
    why: str = ""
    #: the MTP graph's hidden-row output (t_h_nextn) holds every token of the batch: it is set before the output
    #: rows are picked, so llama.cpp's masked copy (the first n_outputs rows) gives the batch's first tokens, not
    #: its outputs, and the runtime reads such heads unmasked (unless the loaded library's mtp-output-rows patch
    #: picks them first for the arch: runtime/patches.py); the others pick the rows first and are read masked
    mtp_rows_per_token: bool = False
    #: llama.cpp gives the arch a sliding-window cache, which asserts that some layer uses it
    swa: bool = False
    #: blocks are MoE exactly when they have a router (``ffn_gate_inp``), dense otherwise
    ffn_by_router: bool = False
    #: per-block tensor sets a recurrent (linear-attention) block needs: any one alternative, complete
    recurrent_needs: tuple[tuple[str, ...], ...] = ()


_QWEN_LINEAR = ("attn_qkv.weight", "attn_gate.weight")

_ROWS: dict[str, Arch] = {
    "qwen35": Arch(families={"Qwen3_5ForConditionalGeneration": "qwen35:Qwen35", "Qwen3_5ForCausalLM": "qwen35:Qwen35"},
                   tokenizer_pre="qwen35", norm_offset=True, recurrent=True, rs_rollback=True, mtp_rows_per_token=True,
                   recurrent_needs=(_QWEN_LINEAR,)),
    "qwen35moe": Arch(families={"Qwen3_5MoeForConditionalGeneration": "qwen35:Qwen35Moe",
                                "Qwen3_5MoeForCausalLM": "qwen35:Qwen35Moe"},
                      tokenizer_pre="qwen35", norm_offset=True, recurrent=True, rs_rollback=True,
                      mtp_rows_per_token=True, recurrent_needs=(_QWEN_LINEAR,)),
    # the same Gated DeltaNet graph code as qwen35 (llm_build_delta_net_base), but not on llama.cpp's list;
    # docs/upstream/qwen3next-rs-rollback.md shows that adding it there is all that is missing
    "qwen3next": Arch(families={"Qwen3NextForCausalLM": "qwen3next:Qwen3Next"},
                      tokenizer_pre="qwen2", norm_offset=True, recurrent=True, rs_rollback=False,
                      why="llama.cpp keeps no rollback snapshots of qwen3next's recurrent state "
                          "(not in llm_arch_supports_rs_rollback)",
                      recurrent_needs=(_QWEN_LINEAR, ("ssm_in.weight",))),
    "glm4moe": Arch(families={"Glm4MoeForCausalLM": "glm4moe:Glm4Moe"}, tokenizer_pre="glm4", mtp_rows_per_token=True),
    "deepseek2": Arch(families={"DeepseekV3ForCausalLM": "deepseek2:Deepseek2",
                                "Glm4MoeLiteForCausalLM": "deepseek2:Glm4MoeLite"},
                      tokenizer_pre="deepseek-v3", mtp_rows_per_token=True),
    "mimo2": Arch(families={"MiMoV2FlashForCausalLM": "mimo2:Mimo2", "MiMoV2ForCausalLM": "mimo2:Mimo2"},
                  tokenizer_pre="qwen2", max_heads=None, swa=True, ffn_by_router=True),
    "step35": Arch(families={"Step3p5ForCausalLM": "step35:Step35"}, tokenizer_pre="deepseek-v3", max_heads=None,
                   norm_offset=True, swa=True, ffn_by_router=True),
}

#: every GGUF arch gguf-mtp converts and attaches MTP heads to (read-only)
ARCHS: Mapping[str, Arch] = MappingProxyType(_ROWS)

#: HF ``architectures`` name -> ``"module:Class"``, over all rows
HF_FAMILIES: Mapping[str, str] = MappingProxyType(
    {hf: where for row in _ROWS.values() for hf, where in row.families.items()})


def arch(name: str) -> Arch | None:
    """The row for GGUF arch ``name`` (None for an arch gguf-mtp does not convert)."""
    return ARCHS.get(name)


def mtp_archs() -> frozenset[str]:
    """GGUF architecture names gguf-mtp can attach heads to."""
    return frozenset(ARCHS)
