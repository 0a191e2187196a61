"""Step-3.5 (``Step3p5ForCausalLM`` -> ``step35``): sliding-window and full attention layers with their own head
counts (per-layer arrays), q/k norms, a head-wise sigmoid attention gate (``g_proj``), sigmoid-routed MoE with a
router bias and a shared expert, optional per-layer SwiGLU clamps, and ``num_nextn_predict_layers`` MTP heads
appended as ``model.layers.{L+k}`` (each with its own ``transformer.shared_head``). Norms are zero-centred:
every ``*norm.weight`` is written as ``w + 1``. Full layers rotate ``head_dim / 2`` dims, which llama.cpp derives
itself, so no ``rope.dimension_count`` is written. Llama 3 RoPE scaling becomes a generated ``rope_freqs.weight``
(full layers only). Facts: docs/facts/step35.md."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
from gguf import GGUFValueType, Keys

from ..checkpoint.folder import Checkpoint
from ..checkpoint.shards import ArrayRef
from ..errors import FormatError, UnsupportedError
from ..ggufio.format import KV
from ..ggufio.names import MT, in_block, tensor_name
from .base import PlannedTensor, Source
from .multihead import MultiHeadFamily
from .rope import llama3_freq_factors

FULL, SLIDING = "full_attention", "sliding_attention"
#: the rotated share of head_dim that llama.cpp hard-codes per attention type (checked against the config)
ROTARY = {FULL: 0.5, SLIDING: 1.0}
#: the rope_parameters keys of Llama 3 scaling (transformers requires all four too)
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


class Step35(MultiHeadFamily):
    arch = "step35"
    context_keys = ("max_position_embeddings", "max_seq_len")
    head_tensors = (("eh_proj.weight", MT.NEXTN_EH_PROJ, "EH", True),
                    ("enorm.weight", MT.NEXTN_ENORM, "E", True),
                    ("hnorm.weight", MT.NEXTN_HNORM, "E", True),
                    # released: transformer.shared_head.{norm,output}; vLLM's and llama.cpp's loaders also read the
                    # names they rename them to (docs/facts/step35.md, "Sources")
                    (("transformer.shared_head.norm.weight", "shared_head.norm.weight"),
                     MT.NEXTN_SHARED_HEAD_NORM, "E", False),
                    (("transformer.shared_head.output.weight", "transformer.shared_head.head.weight",
                      "shared_head.head.weight"), MT.NEXTN_SHARED_HEAD_HEAD, "VE", False),
                    ("embed_tokens.weight", MT.NEXTN_EMBED_TOKENS, "VE", False))
    skip = re.compile(r"(^|\.)(vision_model|vision_tower|visual)\.|rotary_emb\.inv_freq$|weight_scale_inv$")

    def __init__(self, ck: Checkpoint) -> None:
        super().__init__(ck)
        hp = self.hp
        where = ck.root / "config.json"
        self.read_attention_dims()
        self.hd = int(self.need("head_dim"))
        self.nkv = int(self.need("num_attention_groups"))  # Step's name for the KV head count
        other = hp.get("attention_other_setting") or {}
        self.heads = {FULL: (self.nh, self.nkv),
                      SLIDING: (int(other.get("num_attention_heads", self.nh)),
                                int(other.get("num_attention_groups", self.nkv)))}
        self.types = list(hp.get("layer_types") or [])  # has entries for the MTP layers too
        bad = sorted({t for t in self.types if t not in ROTARY})
        if bad:
            raise UnsupportedError(f"{where}: layer_types {bad} are not attention types llama.cpp's step35 knows")
        for il, f in enumerate(hp.get("partial_rotary_factors") or []):
            if float(f) != ROTARY[self.layer_type(il)]:
                raise UnsupportedError(f"{where}: partial_rotary_factors[{il}]={f} for a {self.layer_type(il)} "
                                       f"layer; llama.cpp's step35 rotates {ROTARY[self.layer_type(il)]} of head_dim")
        rope = hp.get("rope_parameters") or hp.get("rope_scaling") or {}
        self.rope = rope.get(FULL, rope)
        self.scaling = str(self.rope.get("rope_type") or self.rope.get("type") or "default").lower()
        if self.scaling not in ("default", "llama3"):
            raise UnsupportedError(f"{where}: rope scaling {self.scaling!r} is not supported for step35 "
                                   "(llama.cpp's step35 takes llama3 scaling only, as rope_freqs.weight)")
        swa_rope = rope.get(SLIDING) or {}
        if str(swa_rope.get("rope_type") or swa_rope.get("type") or "default") != "default":
            # the graph passes no frequency factors to sliding-window layers (s35.cpp:245, 453)
            raise UnsupportedError(f"{where}: rope scaling on sliding_attention layers is not supported by "
                                   "llama.cpp's step35")
        if self.scaling == "llama3":
            absent = [k for k in LLAMA3_KEYS if k not in self.rope]
            if absent:
                raise FormatError(f"{where}: llama3 rope scaling without {', '.join(absent)}")
            if float(self.rope["high_freq_factor"]) <= float(self.rope["low_freq_factor"]):
                raise FormatError(f"{where}: llama3 rope scaling needs high_freq_factor > low_freq_factor")
        self.vocab = int(ck.tensor("model.embed_tokens.weight").shape[0])

    def head_prefix(self, k: int) -> str:
        return f"model.layers.{self.L + k}."

    def layer_type(self, il: int) -> str:
        return self.types[il] if il < len(self.types) else FULL  # upstream pads with full attention

    def rope_bases(self) -> tuple[float, float | None]:
        """(full, sliding) RoPE bases: ``rope_theta`` is a scalar, a [full, sliding] pair or one per layer."""
        theta: Any = self.hp.get("rope_theta", self.rope.get("rope_theta", 10000.0))
        if not isinstance(theta, list):
            return float(theta), self.hp.get("local_rope_theta")
        if len(theta) >= self.L and len(theta) > 2:
            pick = lambda t: next((float(x) for il, x in enumerate(theta) if self.layer_type(il) == t), None)  # noqa: E731
            return pick(FULL) or float(theta[0]), pick(SLIDING)
        return float(theta[0]), float(theta[1]) if len(theta) > 1 else None

    def rope_freqs(self) -> ArrayRef | None:
        """llama3 scaling's ``rope_freqs.weight``: ``n_rot_max / 2`` divisors, where ``n_rot_max`` is the largest
        rotary dim over the trunk layers (s35.cpp:61-67: head_dim with any SWA layer, else head_dim / 2). Only
        full layers read it, and only their first ``head_dim / 4`` entries; the rest are 1 (neutral)."""
        if self.scaling != "llama3":
            return None
        rot_full = int(self.hd * ROTARY[FULL])
        n_rot_max = max(int(self.hd * ROTARY[self.layer_type(il)]) for il in range(self.L))
        r = self.rope
        # the full layers' base: they are the only ones that apply the factors
        ff = llama3_freq_factors(self.rope_bases()[0], rot_full, float(r["factor"]), float(r["low_freq_factor"]),
                                 float(r["high_freq_factor"]), int(r["original_max_position_embeddings"]))
        out = np.ones(n_rot_max // 2, dtype=np.float32)
        out[: ff.size] = ff
        return ArrayRef(tensor_name(MT.ROPE_FREQS), out)

    def generated(self) -> list[PlannedTensor]:
        ref = self.rope_freqs()
        return [] if ref is None else [PlannedTensor(ref.name, ref.shape, [Source(ref)])]

    def hparam_kvs(self, n_mtp: int) -> list[KV]:
        k, hp, bc = self.key, self.hp, self.L + n_mtp
        types = [self.layer_type(il) for il in range(bc)]
        base, base_swa = self.rope_bases()
        moe = [int(x) for x in str(hp.get("moe_layers_enum") or "").split(",") if x.strip()]
        kvs = [
            KV.u32(k(Keys.LLM.FEED_FORWARD_LENGTH), int(hp.get("intermediate_size", 0))),
            self.per_layer(Keys.Attention.HEAD_COUNT, GGUFValueType.INT32, [self.heads[t][0] for t in types]),
            self.per_layer(Keys.Attention.HEAD_COUNT_KV, GGUFValueType.INT32, [self.heads[t][1] for t in types]),
            KV.u32(k(Keys.Attention.KEY_LENGTH), self.hd),
            KV.u32(k(Keys.Attention.VALUE_LENGTH), self.hd),
            KV.f32(k(Keys.Attention.LAYERNORM_RMS_EPS), float(hp.get("rms_norm_eps", 1e-5))),
            KV.f32(k(Keys.Rope.FREQ_BASE), base),
            KV.u32(k(Keys.Attention.SLIDING_WINDOW), int(self.need("sliding_window"))),
            self.per_layer(Keys.Attention.SLIDING_WINDOW_PATTERN, GGUFValueType.BOOL, [t == SLIDING for t in types]),
            KV.u32(k(Keys.LLM.EXPERT_COUNT), int(self.need("moe_num_experts"))),
            KV.u32(k(Keys.LLM.EXPERT_USED_COUNT), int(self.need("moe_top_k"))),
            KV.u32(k(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), int(self.need("moe_intermediate_size"))),
            KV.u32(k(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), int(hp.get("share_expert_dim", 0))),
            KV.u32(k(Keys.LLM.EXPERT_GATING_FUNC), self.gating("moe_router_activation", "scoring_func")),
            KV.u32(k(Keys.LLM.LEADING_DENSE_BLOCK_COUNT), min(moe) if moe else 0),  # not read by step35; as upstream
        ]
        if hp.get("moe_every_n_layer") is not None:  # not read by step35 either; written as llama.cpp's converter
            kvs.append(KV.u32(k(Keys.LLM.MOE_EVERY_N_LAYERS), int(hp["moe_every_n_layer"])))
        optional: tuple[tuple[str, Any, Callable[[str, Any], KV]], ...] = (
                   (Keys.Rope.FREQ_BASE_SWA, base_swa, KV.f32),
                    (Keys.LLM.EXPERT_WEIGHTS_SCALE, hp.get("moe_router_scaling_factor"), KV.f32),
                    (Keys.LLM.EXPERT_WEIGHTS_NORM, hp.get("norm_expert_weight"), KV.boolean))
        kvs += [make(k(key), value) for key, value, make in optional if value is not None]
        # SwiGLU clamps per layer; None (no clamp) and the MTP layers are 0.0
        for key, cfg in ((Keys.LLM.SWIGLU_CLAMP_EXP, "swiglu_limits"),
                         (Keys.LLM.SWIGLU_CLAMP_SHEXP, "swiglu_limits_shared")):
            if hp.get(cfg) is not None:
                vals = [0.0 if v is None else float(v) for v in hp[cfg]][: self.L] + [0.0] * bc
                kvs.append(self.per_layer(key, GGUFValueType.FLOAT32, vals[:bc]))
        return kvs

    def _block(self, out: list[PlannedTensor], il: int, mtp: bool) -> None:
        p, b, H, D = f"model.layers.{il}.", f"blk.{il}.", self.H, self.hd
        nh, nkv = self.heads[self.layer_type(il)]
        put, opt = self.put, self.opt
        put(out, p + "input_layernorm.weight", b + in_block(MT.ATTN_NORM), (H,), mtp)
        for proj, t, rows in (("q_proj", MT.ATTN_Q, nh * D), ("k_proj", MT.ATTN_K, nkv * D),
                              ("v_proj", MT.ATTN_V, nkv * D)):
            put(out, f"{p}self_attn.{proj}.weight", b + in_block(t), (rows, H), mtp)
        put(out, p + "self_attn.o_proj.weight", b + in_block(MT.ATTN_OUT), (H, nh * D), mtp)
        opt(out, p + "self_attn.q_norm.weight", b + in_block(MT.ATTN_Q_NORM), (D,), mtp)
        opt(out, p + "self_attn.k_norm.weight", b + in_block(MT.ATTN_K_NORM), (D,), mtp)
        opt(out, p + "self_attn.g_proj.weight", b + in_block(MT.ATTN_GATE), (nh, H), mtp)
        put(out, p + "post_attention_layernorm.weight", b + in_block(MT.FFN_NORM), (H,), mtp)
        if not self.ck.has(p + "moe.gate.weight"):  # llama.cpp builds a layer as MoE iff it has a router
            self.dense_ffn(out, p, b, mtp)
            return
        X, Fe, Fs = int(self.need("moe_num_experts")), int(self.need("moe_intermediate_size")), \
            int(self.hp.get("share_expert_dim", 0))
        put(out, p + "moe.gate.weight", b + in_block(MT.FFN_GATE_INP), (X, H), mtp)
        opt(out, p + "moe.router_bias", b + in_block(MT.FFN_EXP_PROBS_B, ".bias"), (X,), mtp)
        # experts come stacked already: [X, Fe, H] / [X, H, Fe]
        for proj, t, shape in (("gate_proj", MT.FFN_GATE_EXP, (X, Fe, H)), ("up_proj", MT.FFN_UP_EXP, (X, Fe, H)),
                               ("down_proj", MT.FFN_DOWN_EXP, (X, H, Fe))):
            put(out, f"{p}moe.{proj}.weight", b + in_block(t), shape, mtp)
        if Fs:  # the graph always adds the shared expert on MoE layers
            self.shared_expert(out, p + "share_expert.", b, Fs, mtp)
