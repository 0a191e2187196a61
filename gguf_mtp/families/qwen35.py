"""Qwen3.5 / Qwen3.6, dense (``qwen35``) and MoE (``qwen35moe``)."""

from __future__ import annotations

from ..ggufio import keys as K
from ..ggufio.format import KV
from . import register
from .qwen3_hybrid import QwenHybrid


@register
class Qwen35(QwenHybrid):
    arch = "qwen35"
    hf_architectures = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
    tokenizer_pre = "qwen35"
    moe = False
    reorder_v = True


@register
class Qwen35Moe(QwenHybrid):
    arch = "qwen35moe"
    hf_architectures = ("Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM")
    tokenizer_pre = "qwen35"
    moe = True
    reorder_v = True

    def ffn_kvs(self) -> list[KV]:
        a = self.arch
        return [
            KV.u32(K.arch_key(K.K_EXPERT_COUNT, a), int(self.need("num_experts"))),
            KV.u32(K.arch_key(K.K_EXPERT_USED_COUNT, a), int(self.need("num_experts_per_tok"))),
            KV.u32(K.arch_key(K.K_EXPERT_FF_LENGTH, a), int(self.need("moe_intermediate_size"))),
            KV.u32(K.arch_key(K.K_EXPERT_SHARED_FF_LENGTH, a), int(self.need("shared_expert_intermediate_size"))),
        ]
