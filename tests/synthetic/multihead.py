"""Synthetic MiMo-V2 (``mimo2``) and Step-3.5 (``step35``) checkpoints: real tensor names, shapes and config
keys, several MTP heads (``SyntheticSpec.mtp_heads``), random weights. Used by :mod:`.checkpoint`.

Both mix full and sliding-window layers: layer 0 is full attention with a dense MLP, later layers alternate,
and the MoE layers use the family's own expert layout (per-expert for MiMo, pre-stacked for Step)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .checkpoint import SyntheticSpec

Shapes = list[tuple[str, tuple[int, ...], str]]


def _swa(il: int) -> bool:
    return il % 2 == 1  # trunk: full, sliding, full, sliding, ...


def _kv(s: "SyntheticSpec", swa: bool) -> int:
    return s.kv_heads if swa else max(1, s.kv_heads // 2)  # the two attention types differ, as in the real models


def mimo_config(s: "SyntheticSpec", vocab_tokens: int) -> dict:
    L = s.layers
    return {"architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash", "hidden_size": s.hidden,
            "num_hidden_layers": L, "num_attention_heads": s.heads, "swa_num_attention_heads": s.heads,
            "num_key_value_heads": _kv(s, False), "swa_num_key_value_heads": _kv(s, True),
            "head_dim": s.head_dim, "swa_head_dim": s.head_dim, "v_head_dim": s.v_dim, "swa_v_head_dim": s.v_dim,
            "partial_rotary_factor": 0.5, "rope_theta": 5000000.0, "swa_rope_theta": 10000.0,
            "sliding_window": s.sliding_window, "hybrid_layer_pattern": [int(_swa(i)) for i in range(L)],
            "moe_layer_freq": [int(i > 0) for i in range(L)], "layernorm_epsilon": 1e-5,
            "intermediate_size": s.intermediate, "moe_intermediate_size": s.moe_intermediate,
            "n_routed_experts": s.experts, "num_experts_per_tok": s.experts_used, "n_group": 1, "topk_group": 1,
            "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True,
            "attention_value_scale": 0.707, "add_full_attention_sink_bias": False,
            "add_swa_attention_sink_bias": True, "max_position_embeddings": 4096, "vocab_size": s.vocab_size,
            "tie_word_embeddings": s.tie_embeddings, "eos_token_id": vocab_tokens - 3,
            "torch_dtype": "bfloat16", **s.extra}


def mimo_shapes(s: "SyntheticSpec") -> Shapes:
    H, V, nh, hd, dv = s.hidden, s.vocab_size, s.heads, s.head_dim, s.v_dim
    out: Shapes = [("model.embed_tokens.weight", (V, H), "w")]

    def mlp(p: str, moe: bool) -> None:
        if not moe:
            out.extend([(p + "mlp.gate_proj.weight", (s.intermediate, H), "w"),
                        (p + "mlp.up_proj.weight", (s.intermediate, H), "w"),
                        (p + "mlp.down_proj.weight", (H, s.intermediate), "wout")])
            return
        E, Ie = s.experts, s.moe_intermediate
        out.extend([(p + "mlp.gate.weight", (E, H), "w"), (p + "mlp.gate.e_score_correction_bias", (E,), "w")])
        for e in range(E):
            out.extend([(f"{p}mlp.experts.{e}.gate_proj.weight", (Ie, H), "w"),
                        (f"{p}mlp.experts.{e}.up_proj.weight", (Ie, H), "w"),
                        (f"{p}mlp.experts.{e}.down_proj.weight", (H, Ie), "wout")])

    def block(p: str, swa: bool, moe: bool, head: bool = False) -> None:
        kv, a = _kv(s, swa), p + "self_attn."
        # the released MTP heads name their FFN norm pre_mlp_layernorm (vLLM's mimo_v2_mtp.py, SGLang's
        # mimo_v2_flash_nextn.py); the trunk's is post_attention_layernorm
        ffn_norm = "pre_mlp_layernorm.weight" if head else "post_attention_layernorm.weight"
        out.extend([(p + "input_layernorm.weight", (H,), "gnorm"), (p + ffn_norm, (H,), "gnorm")])
        if s.fused_qkv:
            out.append((a + "qkv_proj.weight", (nh * hd + kv * hd + kv * dv, H), "w"))
        else:
            out.extend([(a + "q_proj.weight", (nh * hd, H), "w"), (a + "k_proj.weight", (kv * hd, H), "w"),
                        (a + "v_proj.weight", (kv * dv, H), "w")])
        out.append((a + "o_proj.weight", (H, nh * dv), "wout"))
        if swa:  # MiMo puts attention sinks on the sliding-window layers only
            out.append((a + "attention_sink_bias", (nh,), "w"))
        mlp(p, moe)

    for il in range(s.layers):
        block(f"model.layers.{il}.", _swa(il), il > 0)
    out.append(("model.norm.weight", (H,), "gnorm"))
    if not s.tie_embeddings:
        out.append(("lm_head.weight", (V, H), "w"))
    for k in range(s.mtp_heads if s.mtp else 0):
        p = f"model.mtp.layers.{k}."
        out.extend([(p + "eh_proj.weight", (H, 2 * H), "fc"), (p + "enorm.weight", (H,), "gnorm"),
                    (p + "hnorm.weight", (H,), "gnorm"), (p + "final_layernorm.weight", (H,), "gnorm")])
        block(p, True, False, head=True)  # heads: sliding-window, dense
    return out


def _step_types(s: "SyntheticSpec") -> list[str]:
    heads = ["full_attention" if k % 2 == 0 else "sliding_attention" for k in range(s.mtp_heads)]
    return ["sliding_attention" if _swa(i) else "full_attention" for i in range(s.layers)] + heads


def step_config(s: "SyntheticSpec", vocab_tokens: int) -> dict:
    L, types = s.layers, _step_types(s)
    limits = [None] + [7.0 if i % 2 else None for i in range(1, L)]
    return {"architectures": ["Step3p5ForCausalLM"], "model_type": "step3p5", "hidden_size": s.hidden,
            "num_hidden_layers": L, "num_attention_heads": s.heads, "num_attention_groups": _kv(s, False),
            "attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 2 * s.heads,
                                        "num_attention_groups": _kv(s, True), "head_dim": s.head_dim},
            "head_dim": s.head_dim, "intermediate_size": s.intermediate, "layer_types": types,
            "partial_rotary_factors": [1.0 if t == "sliding_attention" else 0.5 for t in types],
            "rope_theta": [5000000.0, 10000.0], "sliding_window": s.sliding_window, "use_head_wise_attn_gate": True,
            "moe_num_experts": s.experts, "moe_top_k": s.experts_used, "moe_intermediate_size": s.moe_intermediate,
            "share_expert_dim": s.shared_intermediate, "moe_layers_enum": ",".join(str(i) for i in range(1, L)),
            "moe_every_n_layer": 1, "moe_router_activation": "sigmoid", "moe_router_scaling_factor": 3.0,
            "norm_expert_weight": True, "use_moe_router_bias": True, "swiglu_limits": limits,
            "swiglu_limits_shared": [None] + [16.0] * (L - 1), "rms_norm_eps": 1e-5,
            "num_nextn_predict_layers": s.mtp_heads, "max_position_embeddings": 4096,
            "vocab_size": s.vocab_size, "tie_word_embeddings": s.tie_embeddings,
            "torch_dtype": "bfloat16", **(_LLAMA3 if s.llama3_rope else {}), **s.extra}


#: Llama 3.1's factors with an original context of 64 tokens: with the full layers' 16 frequencies (base 5e6)
#: the first is unscaled, two are blended and the rest divided by 8, so a short prompt already sees the change
_LLAMA3 = {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64}}


def step_shapes(s: "SyntheticSpec") -> Shapes:
    H, V, D, L = s.hidden, s.vocab_size, s.head_dim, s.layers
    E, Ie, Is = s.experts, s.moe_intermediate, s.shared_intermediate
    types = _step_types(s)
    out: Shapes = [("model.embed_tokens.weight", (V, H), "w")]

    def block(il: int) -> None:
        p, a = f"model.layers.{il}.", f"model.layers.{il}.self_attn."
        swa = types[il] == "sliding_attention"
        nh, kv = (2 * s.heads if swa else s.heads), _kv(s, swa)
        # "norm" kinds are zero-centred offsets, as Step stores them
        out.extend([(p + "input_layernorm.weight", (H,), "norm"), (p + "post_attention_layernorm.weight", (H,), "norm"),
                    (a + "q_proj.weight", (nh * D, H), "w"), (a + "k_proj.weight", (kv * D, H), "w"),
                    (a + "v_proj.weight", (kv * D, H), "w"), (a + "o_proj.weight", (H, nh * D), "wout"),
                    (a + "q_norm.weight", (D,), "norm"), (a + "k_norm.weight", (D,), "norm"),
                    (a + "g_proj.weight", (nh, H), "w")])
        if il == 0:
            out.extend([(p + "mlp.gate_proj.weight", (s.intermediate, H), "w"),
                        (p + "mlp.up_proj.weight", (s.intermediate, H), "w"),
                        (p + "mlp.down_proj.weight", (H, s.intermediate), "wout")])
            return
        out.extend([(p + "moe.gate.weight", (E, H), "w"), (p + "moe.router_bias", (E,), "w"),
                    (p + "moe.gate_proj.weight", (E, Ie, H), "w"), (p + "moe.up_proj.weight", (E, Ie, H), "w"),
                    (p + "moe.down_proj.weight", (E, H, Ie), "wout"),
                    (p + "share_expert.gate_proj.weight", (Is, H), "w"), (p + "share_expert.up_proj.weight", (Is, H), "w"),
                    (p + "share_expert.down_proj.weight", (H, Is), "wout")])

    for il in range(L):
        block(il)
    out.append(("model.norm.weight", (H,), "outnorm"))
    if not s.tie_embeddings:
        out.append(("lm_head.weight", (V, H), "w"))
    lm = "model.embed_tokens.weight" if s.tie_embeddings else "lm_head.weight"
    for k in range(s.mtp_heads if s.mtp else 0):
        p = f"model.layers.{L + k}."
        # head 0's shared head is a copy of the LM head (the converter leaves it out), the others their own
        # (all copies for an oracle head, whose every head must compute the trunk's function)
        own = "copy:" + lm if k == 0 or s.oracle_head else "w"
        out.extend([(p + "eh_proj.weight", (H, 2 * H), "fc"), (p + "enorm.weight", (H,), "enorm"),
                    (p + "hnorm.weight", (H,), "norm"), (p + "transformer.shared_head.norm.weight", (H,), "outnorm"),
                    (p + "transformer.shared_head.output.weight", (V, H), own)])
        block(L + k)
    return out
