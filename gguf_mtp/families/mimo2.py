"""MiMo-V2-Flash / V2.5 (``MiMoV2FlashForCausalLM``, ``MiMoV2ForCausalLM`` -> ``mimo2``): hybrid sliding-window
and full attention (per-layer KV head counts, attention sinks, a value scale), K and V of different widths,
sigmoid-routed MoE without shared experts, and three MTP heads under ``model.mtp.layers.{0,1,2}`` (the count is
not in config.json). Each head is a dense, sliding-window block whose attention must be one fused ``attn_qkv``
(llama.cpp's MTP graph asserts it), so split q/k/v heads are concatenated. Norms are plain weights.
Facts: docs/facts/mimo2.md."""

from __future__ import annotations

import re

from gguf import GGUFValueType, Keys

from ..checkpoint.folder import Checkpoint
from ..errors import UnsupportedError
from ..ggufio.format import KV
from ..ggufio.keys import K_VALUE_SCALE
from ..ggufio.names import MT, in_block
from .base import PlannedTensor, Source
from .multihead import MultiHeadFamily


class Mimo2(MultiHeadFamily):
    arch = "mimo2"
    default_heads = 3  # V2-Flash, V2.5 and V2.5-Pro all ship three; upstream hard-codes the count too
    # released heads: model.mtp.layers.{k}.{eh_proj,enorm,hnorm,final_layernorm,...} (docs/facts/mimo2.md, "Sources")
    head_tensors = (("eh_proj.weight", MT.NEXTN_EH_PROJ, "EH", True),
                    ("enorm.weight", MT.NEXTN_ENORM, "E", True),
                    ("hnorm.weight", MT.NEXTN_HNORM, "E", True),
                    ("final_layernorm.weight", MT.LAYER_OUT_NORM, "E", False))
    #: the FFN norm: ``pre_mlp_layernorm`` in the released MTP heads, ``post_attention_layernorm`` in the trunk
    #: (and in SGLang's renamed heads); llama.cpp's tensor map reads both as ffn_norm
    FFN_NORM = ("post_attention_layernorm.weight", "pre_mlp_layernorm.weight")
    # V2.5 checkpoints also hold the vision/audio towers (an mmproj's business)
    skip = re.compile(r"(^|\.)(visual|vision_model|vision_tower|audio_tower|audio_model)\.|rotary_emb\.inv_freq$"
                      r"|weight_scale_inv$")

    def __init__(self, ck: Checkpoint) -> None:
        super().__init__(ck)
        hp = self.hp
        self.read_attention_dims()
        for swa_key, key in (("swa_head_dim", "head_dim"), ("swa_num_attention_heads", "num_attention_heads"),
                             ("swa_v_head_dim", "v_head_dim")):
            if swa_key in hp and hp[swa_key] != hp.get(key):
                raise UnsupportedError(f"{ck.root / 'config.json'}: {swa_key}={hp[swa_key]} differs from {key}="
                                       f"{hp.get(key)}; llama.cpp's mimo2 has one value for both")
        if hp.get("topk_method", "noaux_tc") != "noaux_tc":
            raise UnsupportedError(f"{ck.root / 'config.json'}: topk_method {hp['topk_method']!r}; llama.cpp's mimo2 "
                                   "routes with noaux_tc")
        self.dv = int(hp.get("v_head_dim", self.hd))
        self.nkv_swa = int(hp.get("swa_num_key_value_heads", self.nkv))
        pattern = list(hp.get("hybrid_layer_pattern") or [0] * self.L)
        if len(pattern) < self.L:
            raise UnsupportedError(f"{ck.root / 'config.json'}: hybrid_layer_pattern has {len(pattern)} entries "
                                   f"for {self.L} layers")
        self.swa = [bool(x) for x in pattern[: self.L]]
        rope = hp.get("rope_parameters") or hp.get("rope_scaling") or {}
        self.rope_theta = float(hp.get("rope_theta", rope.get("rope_theta", 10000.0)))
        self.rope_dims = int(self.hd * float(hp.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0))))
        if self.rope_dims % 2:
            raise UnsupportedError(f"{ck.root / 'config.json'}: head_dim x partial_rotary_factor = {self.rope_dims} "
                                   "rotated dims; ggml's rope needs an even count")
        self.vocab = int(ck.tensor("model.embed_tokens.weight").shape[0])

    def head_prefix(self, k: int) -> str:
        return f"model.mtp.layers.{k}."

    def is_swa(self, il: int) -> bool:
        return il >= self.L or self.swa[il]  # every MTP head is a sliding-window block

    def kv_heads(self, il: int) -> int:
        return self.nkv_swa if self.is_swa(il) else self.nkv

    def hparam_kvs(self, n_mtp: int) -> list[KV]:
        k, hp, bc = self.key, self.hp, self.L + n_mtp
        kvs = [
            KV.u32(k(Keys.LLM.FEED_FORWARD_LENGTH), int(self.need("intermediate_size"))),  # dense layers and MTP heads
            KV.u32(k(Keys.Attention.HEAD_COUNT), self.nh),
            # per-layer counts as INT32 arrays, as llama.cpp's converter writes them (gguf-py's int lists)
            self.per_layer(Keys.Attention.HEAD_COUNT_KV, GGUFValueType.INT32, [self.kv_heads(il) for il in range(bc)]),
            KV.u32(k(Keys.Attention.KEY_LENGTH), self.hd),
            KV.u32(k(Keys.Attention.VALUE_LENGTH), self.dv),
            KV.u32(k(Keys.Rope.DIMENSION_COUNT), self.rope_dims),
            KV.f32(k(Keys.Rope.FREQ_BASE), self.rope_theta),
            KV.u32(k(Keys.Attention.SLIDING_WINDOW), int(self.need("sliding_window"))),
            self.per_layer(Keys.Attention.SLIDING_WINDOW_PATTERN, GGUFValueType.INT32,
                           [int(self.is_swa(il)) for il in range(bc)]),
            KV.f32(k(Keys.Attention.LAYERNORM_RMS_EPS), float(hp.get("layernorm_epsilon", 1e-5))),
            KV.u32(k(Keys.LLM.EXPERT_COUNT), int(self.need("n_routed_experts"))),
            KV.u32(k(Keys.LLM.EXPERT_USED_COUNT), int(self.need("num_experts_per_tok"))),
            KV.u32(k(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), int(self.need("moe_intermediate_size"))),
            KV.u32(k(Keys.LLM.EXPERT_GATING_FUNC), self.gating("scoring_func")),  # the graph routes sigmoid regardless
        ]
        swa_theta = hp.get("swa_rope_theta", hp.get("local_rope_theta"))
        optional = ((Keys.Rope.FREQ_BASE_SWA, swa_theta, KV.f32),
                    (Keys.LLM.EXPERT_GROUP_COUNT, hp.get("n_group"), KV.u32),
                    (Keys.LLM.EXPERT_GROUP_USED_COUNT, hp.get("topk_group"), KV.u32),
                    (Keys.LLM.EXPERT_WEIGHTS_SCALE, hp.get("routed_scaling_factor"), KV.f32),
                    (K_VALUE_SCALE, hp.get("attention_value_scale"), KV.f32))
        kvs += [make(k(key), value) for key, value, make in optional if value is not None]
        return kvs

    def _block(self, out: list[PlannedTensor], il: int, mtp: bool) -> None:
        p = f"model.layers.{il}." if il < self.L else self.head_prefix(il - self.L)
        b, H, hd, dv, nh, kv = f"blk.{il}.", self.H, self.hd, self.dv, self.nh, self.kv_heads(il)
        rows = (("q_proj", MT.ATTN_Q, nh * hd), ("k_proj", MT.ATTN_K, kv * hd), ("v_proj", MT.ATTN_V, kv * dv))
        self.put(out, p + "input_layernorm.weight", b + in_block(MT.ATTN_NORM), (H,), mtp)
        fused = p + "self_attn.qkv_proj.weight"
        if self.ck.has(fused):
            if self.ck.tensor(fused).dtype == "F8_E4M3":
                # V2.5 / V2.5-Pro shard the fused FP8 qkv per tensor-parallel rank: plain block dequant is wrong
                raise UnsupportedError(f"{self.ck.root}: {fused!r} is a tensor-parallel-sharded FP8 fused QKV "
                                       "(MiMo-V2.5); convert from a bf16 checkpoint")
            self.put(out, fused, b + in_block(MT.ATTN_QKV), (sum(r for _, _, r in rows), H), mtp)
        elif mtp:  # the MTP graph reads one fused attn_qkv: stack the rows [Q | K | V]
            srcs = [Source(self.tensor(f"{p}self_attn.{proj}.weight", (r, H))) for proj, _, r in rows]
            out.append(PlannedTensor(b + in_block(MT.ATTN_QKV), (sum(r for _, _, r in rows), H), srcs, mtp))
        else:
            for proj, t, r in rows:
                self.put(out, f"{p}self_attn.{proj}.weight", b + in_block(t), (r, H), mtp)
        self.put(out, p + "self_attn.o_proj.weight", b + in_block(MT.ATTN_OUT), (H, nh * dv), mtp)
        self.opt(out, p + "self_attn.attention_sink_bias", b + in_block(MT.ATTN_SINKS), (nh,), mtp)
        self.put(out, self.spelled(p, self.FFN_NORM[::-1] if mtp else self.FFN_NORM), b + in_block(MT.FFN_NORM),
                 (H,), mtp)
        if self.ck.has(p + "mlp.gate.weight"):  # llama.cpp builds a layer as MoE iff it has a router
            X, Fe = int(self.need("n_routed_experts")), int(self.need("moe_intermediate_size"))
            self.put(out, p + "mlp.gate.weight", b + in_block(MT.FFN_GATE_INP), (X, H), mtp)
            self.opt(out, p + "mlp.gate.e_score_correction_bias", b + in_block(MT.FFN_EXP_PROBS_B, ".bias"), (X,), mtp)
            out.extend(self.expert_tensors(p, b, X, Fe, mtp))
            return
        self.dense_ffn(out, p, b, mtp)
