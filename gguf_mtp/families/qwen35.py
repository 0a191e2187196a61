"""Qwen3.5 / Qwen3.6, dense (``qwen35``) and MoE (``qwen35moe``)."""

from __future__ import annotations

from gguf import Keys

from ..ggufio.format import KV
from .qwen3_hybrid import QwenHybrid


class Qwen35(QwenHybrid):
    arch = "qwen35"
    moe = False
    reorder_v = True


class Qwen35Moe(QwenHybrid):
    arch = "qwen35moe"
    moe = True
    reorder_v = True

    def ffn_kvs(self) -> list[KV]:
        k = self.key
        return [
            KV.u32(k(Keys.LLM.EXPERT_COUNT), int(self.need("num_experts"))),
            KV.u32(k(Keys.LLM.EXPERT_USED_COUNT), int(self.need("num_experts_per_tok"))),
            KV.u32(k(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), int(self.need("moe_intermediate_size"))),
            KV.u32(k(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), int(self.need("shared_expert_intermediate_size"))),
        ]
