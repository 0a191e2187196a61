"""DeepSeek-V3 / R1 (``DeepseekV3ForCausalLM`` -> ``deepseek2``): multi-head latent attention (MLA), leading
dense layers, sigmoid-routed grouped MoE with a correction bias and shared experts, YaRN RoPE, and one MTP
layer at ``model.layers.{num_hidden_layers}``. Upstream's converter drops that layer; llama.cpp's loader has
an MTP graph for it, which this module feeds. ``kv_b_proj`` is split into ``attn_k_b`` (transposed per head)
and ``attn_v_b`` for the absorbed-MLA graph. Norms are plain weights; no q/k permutation.
Facts: docs/facts/deepseek2.md."""

from __future__ import annotations

from typing import Any, ClassVar

from gguf import Keys

from ..checkpoint.folder import Checkpoint
from ..errors import FormatError, UnsupportedError
from ..ggufio.format import KV
from ..ggufio.names import MT, in_block
from .base import PlannedTensor, Transform
from .glm4moe import GLM_SPECIALS
from .nextn_layer import NextnLayerFamily


def k_b(H: int, dn: int, dv: int, kl: int) -> Transform:
    """``kv_b_proj`` [H*(dn+dv), kl] -> per-head ``W_kb^T`` [H, kl, dn] (absorbed MLA)."""
    return lambda x: x.reshape(H, dn + dv, kl)[:, :dn, :].transpose(0, 2, 1)


def v_b(H: int, dn: int, dv: int, kl: int) -> Transform:
    """``kv_b_proj`` [H*(dn+dv), kl] -> per-head ``W_vb`` [H, dv, kl]."""
    return lambda x: x.reshape(H, dn + dv, kl)[:, dn:, :]


def rope_param(hp: dict[str, Any], key: str, default: float) -> Any:
    """A RoPE setting from ``rope_parameters`` (transformers 5 configs) or the top level (older configs)."""
    return (hp.get("rope_parameters") or {}).get(key, hp.get(key, default))


def leading_dense(hp: dict[str, Any]) -> int:
    """Leading dense-FFN layers: ``first_k_dense_replace``, else the run of ``"dense"`` at the start of
    ``mlp_layer_types`` (transformers' Glm4MoeLite config spells it that way), else 0 (all MoE)."""
    if hp.get("first_k_dense_replace") is not None:
        return int(hp["first_k_dense_replace"])
    n = 0
    for t in hp.get("mlp_layer_types") or []:
        if t != "dense":
            break
        n += 1
    return n


class Deepseek2(NextnLayerFamily):
    arch = "deepseek2"
    #: ``model_type`` -> llama.cpp pre-tokenizer, for releases that share this architecture name
    PRE_BY_MODEL_TYPE: ClassVar[dict[str, str]] = {"kimi_k2": "kimi-k2"}

    def __init__(self, ck: Checkpoint) -> None:
        super().__init__(ck)
        self.read_attention_dims()
        hp = self.hp
        # [type: ignore] a per-instance override of the family's class-level pre-tokenizer
        self.tokenizer_pre = self.PRE_BY_MODEL_TYPE.get(str(hp.get("model_type")), self.tokenizer_pre)  # type: ignore[misc]
        if hp.get("q_lora_rank") in (None, 0):
            raise UnsupportedError(f"{ck.root / 'config.json'}: q_lora_rank is null (a DeepSeek-V2-Lite-style model); "
                                   "only DeepSeek-V3-style MLA with q_lora is supported")
        if self.L in (26, 27):
            raise UnsupportedError(f"{ck.root / 'config.json'}: llama.cpp treats {self.L}-layer deepseek2 models as "
                                   "'lite' (no q_lora); this checkpoint would not load")
        self.ql, self.kl = int(hp["q_lora_rank"]), int(hp.get("kv_lora_rank", 512))
        self.dn, self.dr, self.dv = (int(self.need("qk_nope_head_dim")), int(self.need("qk_rope_head_dim")),
                                     int(self.need("v_head_dim")))
        self.dense = leading_dense(hp)
        self.vocab = int(ck.tensor("model.embed_tokens.weight").shape[0])

    def hparam_kvs(self, n_mtp: int) -> list[KV]:
        k, hp = self.key, self.hp
        kvs = [
            KV.u32(k(Keys.LLM.FEED_FORWARD_LENGTH), int(self.need("intermediate_size"))),
            KV.u32(k(Keys.Attention.HEAD_COUNT), self.nh),
            KV.u32(k(Keys.Attention.HEAD_COUNT_KV), 1),  # MLA runs as MQA over the latent cache
            KV.u32(k(Keys.Attention.Q_LORA_RANK), self.ql),
            KV.u32(k(Keys.Attention.KV_LORA_RANK), self.kl),
            KV.u32(k(Keys.Attention.KEY_LENGTH), self.kl + self.dr),
            KV.u32(k(Keys.Attention.VALUE_LENGTH), self.kl),
            KV.u32(k(Keys.Attention.KEY_LENGTH_MLA), self.dn + self.dr),
            KV.u32(k(Keys.Attention.VALUE_LENGTH_MLA), self.dv),
            KV.u32(k(Keys.Rope.DIMENSION_COUNT), self.dr),
            KV.f32(k(Keys.Rope.FREQ_BASE), float(rope_param(hp, "rope_theta", 10000.0))),
            KV.f32(k(Keys.Attention.LAYERNORM_RMS_EPS), float(hp.get("rms_norm_eps", 1e-6))),
            *self.routed_kvs(shared=0, gating=2 if hp.get("scoring_func", "sigmoid") == "sigmoid" else 1, norm=False),
            KV.u32(k(Keys.LLM.VOCAB_SIZE), self.vocab),
        ]
        rs = hp.get("rope_scaling") or hp.get("rope_parameters") or {}
        if (rs.get("type") or rs.get("rope_type")) == "yarn":
            absent = [key for key in ("factor", "original_max_position_embeddings") if key not in rs]
            if absent:
                raise FormatError(f"{self.ck.root / 'config.json'}: yarn rope scaling without {absent[0]}")
            kvs += [KV.string(k(Keys.Rope.SCALING_TYPE), "yarn"),
                    KV.f32(k(Keys.Rope.SCALING_FACTOR), float(rs["factor"])),
                    KV.u32(k(Keys.Rope.SCALING_ORIG_CTX_LEN), int(rs["original_max_position_embeddings"])),
                    KV.f32(k(Keys.Rope.SCALING_YARN_LOG_MUL), 0.1 * float(rs.get("mscale_all_dim", 0.0))),
                    KV.f32(k(Keys.Rope.SCALING_YARN_BETA_FAST), float(rs.get("beta_fast", 32.0))),
                    KV.f32(k(Keys.Rope.SCALING_YARN_BETA_SLOW), float(rs.get("beta_slow", 1.0)))]
        return kvs

    def _block(self, out: list[PlannedTensor], il: int, mtp: bool) -> None:
        p, b, H, nh = f"model.layers.{il}.", f"blk.{il}.", self.H, self.nh
        ql, kl, dn, dr, dv = self.ql, self.kl, self.dn, self.dr, self.dv
        a = p + "self_attn."
        self.put(out, p + "input_layernorm.weight", b + in_block(MT.ATTN_NORM), (H,), mtp)
        self.put(out, a + "q_a_proj.weight", b + in_block(MT.ATTN_Q_A), (ql, H), mtp)
        self.put(out, a + "q_a_layernorm.weight", b + in_block(MT.ATTN_Q_A_NORM), (ql,), mtp)
        self.put(out, a + "q_b_proj.weight", b + in_block(MT.ATTN_Q_B), (nh * (dn + dr), ql), mtp)
        self.put(out, a + "kv_a_proj_with_mqa.weight", b + in_block(MT.ATTN_KV_A_MQA), (kl + dr, H), mtp)
        self.put(out, a + "kv_a_layernorm.weight", b + in_block(MT.ATTN_KV_A_NORM), (kl,), mtp)
        kvb = (nh * (dn + dv), kl)
        self.put(out, a + "kv_b_proj.weight", b + in_block(MT.ATTN_K_B), kvb, mtp, (nh, kl, dn), k_b(nh, dn, dv, kl))
        self.put(out, a + "kv_b_proj.weight", b + in_block(MT.ATTN_V_B), kvb, mtp, (nh, dv, kl), v_b(nh, dn, dv, kl))
        self.put(out, a + "o_proj.weight", b + in_block(MT.ATTN_OUT), (H, nh * dv), mtp)
        self.put(out, p + "post_attention_layernorm.weight", b + in_block(MT.FFN_NORM), (H,), mtp)
        self._ffn(out, p, b, il, mtp, default_shared=0)


class Glm4MoeLite(Deepseek2):
    """GLM-4.7-Flash (``Glm4MoeLiteForCausalLM``): DeepSeek-V3's tensors and math (MLA with q_lora, sigmoid MoE
    with correction bias, one shared expert, one MTP layer at ``model.layers.{num_hidden_layers}``) under GLM's
    tokenizer; llama.cpp converts it to ``deepseek2`` and keeps the MTP layer. No YaRN, no ``scoring_func`` key
    (the router is always sigmoid). Facts: docs/facts/glm47flash.md."""

    tokenizer_pre = "glm4"
    extra_specials = GLM_SPECIALS
