"""Shared shape of the DeepSeek-style families (``deepseek2``, ``glm4moe``): the MTP layer is an extra decoder
layer at ``model.layers.{num_hidden_layers}`` with ``eh_proj``, ``enorm``, ``hnorm``, ``shared_head.{norm,head}``
and ``embed_tokens`` beside its block; norms are plain weights. Subclasses define ``_block`` and ``hparam_kvs``."""

from __future__ import annotations

from gguf import Keys

from ..errors import UnsupportedError
from ..ggufio.format import KV
from ..ggufio.names import MT, in_block, tensor_name
from .base import Family, ModelPlan, PlannedTensor


class NextnLayerFamily(Family):
    dense: int  # leading dense layers, set by subclasses

    def _block(self, out: list[PlannedTensor], il: int, mtp: bool) -> None:
        raise NotImplementedError

    def _ffn(self, out: list[PlannedTensor], p: str, b: str, il: int, mtp: bool, default_shared: int) -> None:
        """Dense MLP for the leading layers, else sigmoid-routed MoE: router, correction bias, experts, shared."""
        H = self.H
        if il < self.dense:
            self.dense_ffn(out, p, b, mtp)
            return
        E, Ie = int(self.need("n_routed_experts")), int(self.need("moe_intermediate_size"))
        Is = Ie * int(self.hp.get("n_shared_experts", default_shared))
        self.put(out, p + "mlp.gate.weight", b + in_block(MT.FFN_GATE_INP), (E, H), mtp)
        self.opt(out, p + "mlp.gate.e_score_correction_bias", b + in_block(MT.FFN_EXP_PROBS_B, ".bias"), (E,), mtp)
        out.extend(self.expert_tensors(p, b, E, Ie, mtp))
        if Is:
            self.shared_expert(out, p + "mlp.shared_experts.", b, Is, mtp)

    def routed_kvs(self, *, shared: int, gating: int, norm: bool) -> list[KV]:
        """Grouped sigmoid routing as DeepSeek-V3 and GLM-4.5 configure it (``shared``, ``norm``: the defaults of
        ``n_shared_experts`` and ``norm_topk_prob``)."""
        k, hp = self.key, self.hp
        return [
            KV.u32(k(Keys.LLM.EXPERT_COUNT), int(self.need("n_routed_experts"))),
            KV.u32(k(Keys.LLM.EXPERT_USED_COUNT), int(self.need("num_experts_per_tok"))),
            KV.u32(k(Keys.LLM.EXPERT_GROUP_COUNT), int(hp.get("n_group", 1))),
            KV.u32(k(Keys.LLM.EXPERT_GROUP_USED_COUNT), int(hp.get("topk_group", 1))),
            KV.u32(k(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), int(self.need("moe_intermediate_size"))),
            KV.u32(k(Keys.LLM.EXPERT_SHARED_COUNT), int(hp.get("n_shared_experts", shared))),
            KV.u32(k(Keys.LLM.LEADING_DENSE_BLOCK_COUNT), self.dense),
            KV.u32(k(Keys.LLM.EXPERT_GATING_FUNC), gating),
            KV.f32(k(Keys.LLM.EXPERT_WEIGHTS_SCALE), float(hp.get("routed_scaling_factor", 1.0))),
            KV.boolean(k(Keys.LLM.EXPERT_WEIGHTS_NORM), bool(hp.get("norm_topk_prob", norm))),
        ]

    def mtp_layers(self) -> int:
        n = 0
        while self.ck.has(f"model.layers.{self.L + n}.eh_proj.weight"):
            n += 1
        return n

    def mtp_missing(self) -> str:
        declared = self.hp.get("num_nextn_predict_layers")
        say = f" although config.json declares num_nextn_predict_layers={declared}" if declared else ""
        return (f"{self.ck.root}: the checkpoint has no MTP weights (model.layers.{self.L}.eh_proj.weight and the "
                f"rest of layer {self.L} are missing){say}; convert without --mtp")

    def _head(self, out: list[PlannedTensor], i: int) -> None:
        """MTP layer ``i``: the DeepSeek-style nextn tensors beside a decoder block at ``model.layers.{L+i}``."""
        H, V = self.H, self.vocab
        il = self.L + i
        p, b = f"model.layers.{il}.", f"blk.{il}."
        self.put(out, p + "eh_proj.weight", b + in_block(MT.NEXTN_EH_PROJ), (H, 2 * H), True)
        self.put(out, p + "enorm.weight", b + in_block(MT.NEXTN_ENORM), (H,), True)
        self.put(out, p + "hnorm.weight", b + in_block(MT.NEXTN_HNORM), (H,), True)
        self.opt(out, p + "shared_head.norm.weight", b + in_block(MT.NEXTN_SHARED_HEAD_NORM), (H,), True)
        self.opt(out, p + "shared_head.head.weight", b + in_block(MT.NEXTN_SHARED_HEAD_HEAD), (V, H), True)
        self.opt(out, p + "embed_tokens.weight", b + in_block(MT.NEXTN_EMBED_TOKENS), (V, H), True)
        self._block(out, il, True)

    def _output(self, out: list[PlannedTensor]) -> None:
        """Final norm and LM head (absent when tied: llama.cpp falls back to token_embd)."""
        self.put(out, "model.norm.weight", tensor_name(MT.OUTPUT_NORM), (self.H,), False)
        if self.ck.has("lm_head.weight"):
            self.put(out, "lm_head.weight", tensor_name(MT.OUTPUT), (self.vocab, self.H), False)

    def plan(self, *, trunk: bool, mtp: bool, embeddings: bool) -> ModelPlan:
        n_mtp = self.mtp_layers() if mtp else 0
        if self.max_heads and n_mtp > self.max_heads:
            raise UnsupportedError(f"{self.ck.root}: {n_mtp} MTP layers; llama.cpp's {self.arch} MTP graph runs one")
        out: list[PlannedTensor] = []
        if embeddings:
            self.put(out, "model.embed_tokens.weight", tensor_name(MT.TOKEN_EMBD), (self.vocab, self.H), False)
        if trunk:
            for il in range(self.L):
                self._block(out, il, False)
        for i in range(n_mtp):
            self._head(out, i)
        if embeddings:
            self._output(out)
            out += self.generated()
        return ModelPlan(self.arch, self.arch_kvs(n_mtp), out, self.L, n_mtp)
