"""GLM-4.5 / 4.6 / 4.7 (``Glm4MoeForCausalLM`` -> ``glm4moe``): GQA attention with biases and optional q/k
norms, leading dense layers, sigmoid-routed MoE with a correction bias and shared experts, one MTP layer at
``model.layers.{num_hidden_layers}`` that carries its own ``embed_tokens`` and ``shared_head.head`` copies.
Norms are plain weights (no +1); no q/k permutation (NEOX rope on the first ``head_dim * 0.5`` dims).
Facts: docs/facts/glm4moe.md."""

from __future__ import annotations


from ..ggufio import keys as K
from ..ggufio.format import KV
from . import register
from .base import PlannedTensor

#: GLM tokenizers' special tokens beyond tokenizer_config's (<|endoftext|> as eot makes generation endless)
GLM_SPECIALS = (("bos", "[gMASK]"), ("eot", "<|user|>"), ("unk", "<|endoftext|>"), ("eom", "<|observation|>"))
from .nextn_layer import NextnLayerFamily



@register
class Glm4Moe(NextnLayerFamily):
    arch = "glm4moe"
    hf_architectures = ("Glm4MoeForCausalLM",)
    tokenizer_pre = "glm4"
    #: as llama.cpp's converter (_set_vocab_glm) adds them where the tokenizer files leave them unset
    extra_specials = GLM_SPECIALS

    def __init__(self, ck) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ck)
        hp = self.hp
        self.read_attention_dims()
        self.dense = int(hp.get("first_k_dense_replace", 0))
        self.vocab = int(ck.tensor("model.embed_tokens.weight").shape[0])
        rope = hp.get("rope_parameters") or hp.get("rope_scaling") or {}
        self.rope_theta = float(rope.get("rope_theta", hp.get("rope_theta", 10000.0)))
        self.rope_dims = int(self.hd * float(hp.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.5))))

    # -- metadata ---------------------------------------------------------------------------
    def arch_kvs(self, n_mtp: int) -> list[KV]:
        a, hp = self.arch, self.hp
        k = lambda t: K.arch_key(t, a)  # noqa: E731
        kvs = [
            KV.u32(k(K.K_BLOCK_COUNT), self.L + n_mtp),
            KV.u32(k(K.K_CONTEXT_LENGTH), int(hp.get("max_position_embeddings", 4096))),
            KV.u32(k(K.K_EMBEDDING_LENGTH), self.H),
            KV.u32(k(K.K_FEED_FORWARD_LENGTH), int(self.need("intermediate_size"))),
            KV.u32(k(K.K_HEAD_COUNT), self.nh),
            KV.u32(k(K.K_HEAD_COUNT_KV), self.nkv),
            KV.u32(k(K.K_KEY_LENGTH), self.hd),
            KV.u32(k(K.K_VALUE_LENGTH), self.hd),
            KV.f32(k(K.K_RMS_EPS), float(hp.get("rms_norm_eps", 1e-5))),
            KV.f32(k(K.K_ROPE_FREQ_BASE), self.rope_theta),
            KV.u32(k(K.K_ROPE_DIM_COUNT), self.rope_dims),
            KV.u32(k(K.K_EXPERT_COUNT), int(self.need("n_routed_experts"))),
            KV.u32(k(K.K_EXPERT_USED_COUNT), int(self.need("num_experts_per_tok"))),
            KV.u32(k(K.K_EXPERT_GROUP_COUNT), int(hp.get("n_group", 1))),
            KV.u32(k(K.K_EXPERT_GROUP_USED_COUNT), int(hp.get("topk_group", 1))),
            KV.u32(k(K.K_EXPERT_FF_LENGTH), int(self.need("moe_intermediate_size"))),
            KV.u32(k(K.K_EXPERT_SHARED_COUNT), int(hp.get("n_shared_experts", 1))),
            KV.u32(k(K.K_LEADING_DENSE_BLOCK_COUNT), self.dense),
            KV.u32(k(K.K_EXPERT_GATING_FUNC), 2),  # sigmoid
            KV.f32(k(K.K_EXPERT_WEIGHTS_SCALE), float(hp.get("routed_scaling_factor", 1.0))),
            KV.boolean(k(K.K_EXPERT_WEIGHTS_NORM), bool(hp.get("norm_topk_prob", True))),
        ]
        if n_mtp:
            kvs.append(KV.u32(k(K.K_NEXTN), n_mtp))
        return kvs

    # -- tensors ----------------------------------------------------------------------------
    def _block(self, out: list[PlannedTensor], il: int, mtp: bool) -> None:
        p, b, H, hd = f"model.layers.{il}.", f"blk.{il}.", self.H, self.hd
        q, kv = self.nh * hd, self.nkv * hd
        self._put(out, p + "input_layernorm.weight", b + "attn_norm.weight", (H,), mtp)
        for proj, gg, rows in (("q_proj", "attn_q", q), ("k_proj", "attn_k", kv), ("v_proj", "attn_v", kv)):
            self._put(out, f"{p}self_attn.{proj}.weight", f"{b}{gg}.weight", (rows, H), mtp)
            self._opt(out, f"{p}self_attn.{proj}.bias", f"{b}{gg}.bias", (rows,), mtp)
        self._put(out, p + "self_attn.o_proj.weight", b + "attn_output.weight", (H, q), mtp)
        self._opt(out, p + "self_attn.q_norm.weight", b + "attn_q_norm.weight", (hd,), mtp)
        self._opt(out, p + "self_attn.k_norm.weight", b + "attn_k_norm.weight", (hd,), mtp)
        self._put(out, p + "post_attention_layernorm.weight", b + "post_attention_norm.weight", (H,), mtp)
        self._ffn(out, p, b, il, mtp, default_shared=1)
