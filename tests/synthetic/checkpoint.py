"""Small synthetic Hugging Face checkpoints with the exact tensor names, shapes and config keys of real
releases of each arch gguf-mtp converts (random weights), for tests and benchmarks. ``WRITERS`` holds one
writer (config, tensor shapes, tokenizer) per family.

Example:
    >>> from tests.synthetic import SyntheticSpec, write_checkpoint
    >>> write_checkpoint("tiny-qwen35", SyntheticSpec("qwen35"))        # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from gguf_mtp.ggml_types import f32_to_bf16

from .kimi import kimi_config, write_tiktoken
from .multihead import mimo_config, mimo_shapes, step_config, step_shapes
from .safetensors_writer import write_safetensors
from .tokenizer import write_tokenizer

Entry = tuple[str, tuple[int, ...], str, object]
#: (name, shape, kind) of every tensor, in file order; kind picks the random init
Shapes = list[tuple[str, tuple[int, ...], str]]


@dataclass(frozen=True)
class SyntheticSpec:
    """Sizes of a synthetic checkpoint. Defaults give a ~1 MB model that converts in well under a second."""

    family: str = "qwen35"  # a key of WRITERS: a GGUF arch (qwen35, deepseek2, ...) or a release (glm47flash, kimik2)
    layers: int = 4
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    intermediate: int = 128
    lin_k_heads: int = 2
    lin_v_heads: int = 4
    lin_head_dim: int = 32
    conv_kernel: int = 4
    experts: int = 4
    experts_used: int = 2
    moe_intermediate: int = 64
    shared_intermediate: int = 64
    vocab_size: int = 512
    mtp: bool = True                 # ship MTP weights
    declare_mtp: bool = True         # config says mtp_num_hidden_layers=1 (even when weights are dropped)
    fused_experts: bool = True       # qwen35moe trunk: experts.gate_up_proj (as real Qwen3.5-MoE)
    tie_embeddings: bool = False
    n_shards: int = 2
    seed: int = 0
    attention_interval: int = 4      # every n-th trunk layer is full attention (Qwen hybrids); 1: all of them
    std: float = 0.02
    # A head whose answer is known: with trunk_scale=0 the trunk passes the token embedding straight to the
    # LM head (a bigram model), and the MTP head computes exactly the same function of the next token, so
    # it is always right (100% acceptance). 0 < trunk_scale < 1 gives a head that is often right.
    oracle_head: bool = False
    trunk_scale: float = 1.0
    head_noise: float = 0.0  # oracle head: scale of random output projections in the MTP block (lowers acceptance)
    q_lora: int = 96      # deepseek2 MLA dims (distinct, so shape bugs fail loudly)
    kv_lora: int = 64
    qk_nope: int = 32
    qk_rope: int = 16
    v_dim: int = 48
    fp8: bool = False  # matrices as block-scaled float8 e4m3 + weight_scale_inv (as DeepSeek / Qwen FP8 releases)
    mtp_heads: int = 3       # mimo2 / step35: MTP heads shipped (step35's config declares this many)
    fused_qkv: bool = False  # mimo2: self_attn.qkv_proj (as V2.5) instead of q/k/v_proj (as V2-Flash)
    sliding_window: int = 8  # mimo2 / step35
    llama3_rope: bool = False  # step35: Llama 3 RoPE scaling in rope_scaling (a short original context, so it bites)
    extra: dict = field(default_factory=dict)

    def scaled(self, **kw: object) -> "SyntheticSpec":
        return replace(self, **kw)  # type: ignore[arg-type]


class _Rand:
    """Cheap reproducible random bf16/f32 data: slices of one random pool (fast enough for GB-sized fixtures)."""

    def __init__(self, seed: int, std: float) -> None:
        rng = np.random.default_rng(seed)
        self.pool = (rng.standard_normal(1 << 22) * std).astype(np.float32)
        self.rng = rng

    def f32(self, n: int) -> np.ndarray:
        start = int(self.rng.integers(0, self.pool.size))
        reps = -(-(start + n) // self.pool.size)
        if reps == 1:
            return self.pool[start:start + n].copy()
        # Longer than the pool: each further copy rotated by one more element. Plain repeats would make rows
        # of a large matrix identical (an LM head with rows repeating every pool/hidden tokens), so logits tie
        # exactly, and which of the tied tokens greedy decoding picks is decided by tie-breaking, not the model.
        return np.concatenate([np.roll(self.pool, c) for c in range(reps)])[start:start + n]


def _qwen_text(s: SyntheticSpec, vocab_tokens: int) -> dict:
    """The text-model keys every Qwen hybrid shares."""
    L, H = s.layers, s.hidden
    return {
        "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim, "full_attention_interval": s.attention_interval,
        "layer_types": ["linear_attention" if (i + 1) % s.attention_interval else "full_attention" for i in range(L)],
        "linear_conv_kernel_dim": s.conv_kernel, "linear_key_head_dim": s.lin_head_dim,
        "linear_value_head_dim": s.lin_head_dim, "linear_num_key_heads": s.lin_k_heads,
        "linear_num_value_heads": s.lin_v_heads, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "vocab_size": s.vocab_size, "hidden_act": "silu", "attn_output_gate": True, "attention_bias": False,
        "bos_token_id": vocab_tokens - 5, "eos_token_id": vocab_tokens - 3,
    }


def _qwen_moe(s: SyntheticSpec) -> dict:
    return {"num_experts": s.experts, "num_experts_per_tok": s.experts_used,
            "moe_intermediate_size": s.moe_intermediate, "shared_expert_intermediate_size": s.shared_intermediate,
            "norm_topk_prob": True}


def _qwen35_config(s: SyntheticSpec, vocab_tokens: int, *, moe: bool) -> dict:
    """Qwen3.5 (dense or MoE): the text model under ``text_config`` beside a vision tower's."""
    text = _qwen_text(s, vocab_tokens)
    rope_dims = s.head_dim // 4
    sections = [rope_dims // 2 - 2 * (rope_dims // 6), rope_dims // 6, rope_dims // 6]
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                               "mrope_section": sections, "mrope_interleaved": True}
    if s.declare_mtp:
        text["mtp_num_hidden_layers"] = 1
    text["mtp_use_dedicated_embeddings"] = False
    text.update(_qwen_moe(s) if moe else {"intermediate_size": s.intermediate})
    arch, mt = ("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe") if moe else ("Qwen3_5ForConditionalGeneration",
                                                                                 "qwen3_5")
    return {"architectures": [arch], "model_type": mt, "tie_word_embeddings": s.tie_embeddings,
            "text_config": {"model_type": mt + "_text", **text},
            "vision_config": {"depth": 1, "hidden_size": 32, "num_heads": 2, "out_hidden_size": s.hidden},
            "image_token_id": vocab_tokens - 2, "torch_dtype": "bfloat16", **s.extra}


def _qwen3next_config(s: SyntheticSpec, vocab_tokens: int) -> dict:
    text = _qwen_text(s, vocab_tokens)
    del text["layer_types"]
    text.update(_qwen_moe(s))
    text.update({"rope_theta": 10000000.0, "partial_rotary_factor": 0.25, "intermediate_size": s.intermediate,
                 "decoder_sparse_step": 1, "mlp_only_layers": []})
    return {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
            "tie_word_embeddings": s.tie_embeddings, "torch_dtype": "bfloat16", **text, **s.extra}


def _glm_config(s: SyntheticSpec, vocab_tokens: int) -> dict:
    return {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": s.hidden,
            "num_hidden_layers": s.layers, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
            "head_dim": s.head_dim, "partial_rotary_factor": 0.5, "rope_theta": 1000000.0, "rms_norm_eps": 1e-5,
            "intermediate_size": s.intermediate, "moe_intermediate_size": s.moe_intermediate,
            "n_routed_experts": s.experts, "num_experts_per_tok": s.experts_used, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.5,
            "norm_topk_prob": True, "use_qk_norm": True, "attention_bias": True, "num_nextn_predict_layers": 1,
            "max_position_embeddings": 4096, "vocab_size": s.vocab_size, "tie_word_embeddings": s.tie_embeddings,
            "eos_token_id": [vocab_tokens - 10, vocab_tokens - 3], "pad_token_id": vocab_tokens - 10,
            "torch_dtype": "bfloat16", **s.extra}


def _ds_config(s: SyntheticSpec, vocab_tokens: int) -> dict:
    groups = 4 if s.experts % 4 == 0 and s.experts >= 8 else 1
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": s.hidden,
            "num_hidden_layers": s.layers, "num_attention_heads": s.heads, "num_key_value_heads": s.heads,
            "q_lora_rank": s.q_lora, "kv_lora_rank": s.kv_lora, "qk_nope_head_dim": s.qk_nope,
            "qk_rope_head_dim": s.qk_rope, "v_head_dim": s.v_dim, "intermediate_size": s.intermediate,
            "moe_intermediate_size": s.moe_intermediate, "n_routed_experts": s.experts,
            "num_experts_per_tok": s.experts_used, "n_shared_experts": 1, "first_k_dense_replace": 1,
            "n_group": groups, "topk_group": max(1, groups // 2), "routed_scaling_factor": 2.5,
            "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rope_theta": 10000.0,
            "rms_norm_eps": 1e-6, "max_position_embeddings": 163840, "num_nextn_predict_layers": 1,
            "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
            "vocab_size": s.vocab_size, "tie_word_embeddings": s.tie_embeddings, "attention_bias": False,
            "torch_dtype": "bfloat16", **s.extra}


def _glm_lite_config(s: SyntheticSpec, vocab_tokens: int) -> dict:
    """GLM-4.7-Flash's config.json keys (``glm4_moe_lite``): DeepSeek-V3's MLA/MoE names, no YaRN, no scoring_func,
    GLM's special-token ids (eos = <|endoftext|>, <|user|>, <|observation|>)."""
    return {"architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite", "hidden_size": s.hidden,
            "num_hidden_layers": s.layers, "num_attention_heads": s.heads, "num_key_value_heads": s.heads,
            "q_lora_rank": s.q_lora, "kv_lora_rank": s.kv_lora, "qk_nope_head_dim": s.qk_nope,
            "qk_rope_head_dim": s.qk_rope, "v_head_dim": s.v_dim, "intermediate_size": s.intermediate,
            "moe_intermediate_size": s.moe_intermediate, "n_routed_experts": s.experts,
            "num_experts_per_tok": s.experts_used, "n_shared_experts": 1, "first_k_dense_replace": 1,
            "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc", "routed_scaling_factor": 1.8,
            "norm_topk_prob": True, "rope_theta": 1000000, "rope_scaling": None, "partial_rotary_factor": 1.0,
            "rope_interleave": True, "rms_norm_eps": 1e-5, "max_position_embeddings": 202752,
            "num_nextn_predict_layers": 1, "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
            "vocab_size": s.vocab_size, "tie_word_embeddings": s.tie_embeddings, "pad_token_id": vocab_tokens - 10,
            "eos_token_id": [vocab_tokens - 10, vocab_tokens - 3, vocab_tokens - 1], "dtype": "bfloat16",
            "use_cache": True, **s.extra}


def _mla_attn(s: SyntheticSpec, a: str) -> Shapes:
    """DeepSeek-V3's multi-head latent attention (also GLM-4.7-Flash's and Kimi-K2's)."""
    H, nh = s.hidden, s.heads
    return [(a + "q_a_proj.weight", (s.q_lora, H), "w"), (a + "q_a_layernorm.weight", (s.q_lora,), "gnorm"),
            (a + "q_b_proj.weight", (nh * (s.qk_nope + s.qk_rope), s.q_lora), "w"),
            (a + "kv_a_proj_with_mqa.weight", (s.kv_lora + s.qk_rope, H), "w"),
            (a + "kv_a_layernorm.weight", (s.kv_lora,), "gnorm"),
            (a + "kv_b_proj.weight", (nh * (s.qk_nope + s.v_dim), s.kv_lora), "w"),
            (a + "o_proj.weight", (H, nh * s.v_dim), "wout")]


def _glm_attn(s: SyntheticSpec, a: str) -> Shapes:
    """GLM-4.5's attention: biased q/k/v, per-head q/k norms."""
    H, hd = s.hidden, s.head_dim
    q, kv = s.heads * hd, s.kv_heads * hd
    return [(a + "q_proj.weight", (q, H), "w"), (a + "q_proj.bias", (q,), "w"),
            (a + "k_proj.weight", (kv, H), "w"), (a + "k_proj.bias", (kv,), "w"),
            (a + "v_proj.weight", (kv, H), "w"), (a + "v_proj.bias", (kv,), "w"),
            (a + "o_proj.weight", (H, q), "wout"),
            (a + "q_norm.weight", (hd,), "gnorm"), (a + "k_norm.weight", (hd,), "gnorm")]


def _nextn_shapes(s: SyntheticSpec, *, attn: Callable[[SyntheticSpec, str], Shapes], router_bias: str) -> Shapes:
    """DeepSeek-V3's layout (GLM-4.5 and GLM-4.7-Flash, Kimi-K2 alike): a dense first layer, then MoE layers with
    per-expert matrices and shared experts; the MTP block is ``model.layers.{L}`` with its own embedding and
    shared head (copies of the trunk's). ``attn`` gives a layer's attention tensors, ``router_bias`` the init
    of the router's score-correction bias."""
    H, V = s.hidden, s.vocab_size
    E, Ie = s.experts, s.moe_intermediate
    out: Shapes = [("model.embed_tokens.weight", (V, H), "w")]

    def block(il: int) -> None:
        p = f"model.layers.{il}."
        out.extend([(p + "input_layernorm.weight", (H,), "gnorm"),
                    (p + "post_attention_layernorm.weight", (H,), "gnorm"), *attn(s, p + "self_attn.")])
        if il < 1:
            out.extend([(p + "mlp.gate_proj.weight", (s.intermediate, H), "w"),
                        (p + "mlp.up_proj.weight", (s.intermediate, H), "w"),
                        (p + "mlp.down_proj.weight", (H, s.intermediate), "wout")])
            return
        out.extend([(p + "mlp.gate.weight", (E, H), "w"), (p + "mlp.gate.e_score_correction_bias", (E,), router_bias)])
        for e in range(E):
            out.extend([(f"{p}mlp.experts.{e}.gate_proj.weight", (Ie, H), "w"),
                        (f"{p}mlp.experts.{e}.up_proj.weight", (Ie, H), "w"),
                        (f"{p}mlp.experts.{e}.down_proj.weight", (H, Ie), "wout")])
        out.extend([(p + "mlp.shared_experts.gate_proj.weight", (Ie, H), "w"),
                    (p + "mlp.shared_experts.up_proj.weight", (Ie, H), "w"),
                    (p + "mlp.shared_experts.down_proj.weight", (H, Ie), "wout")])

    for il in range(s.layers):
        block(il)
    out.append(("model.norm.weight", (H,), "goutnorm"))
    if not s.tie_embeddings:
        out.append(("lm_head.weight", (V, H), "w"))
    if s.mtp:
        p = f"model.layers.{s.layers}."
        out.extend([(p + "eh_proj.weight", (H, 2 * H), "fc"), (p + "enorm.weight", (H,), "genorm"),
                    (p + "hnorm.weight", (H,), "gnorm"), (p + "shared_head.norm.weight", (H,), "goutnorm"),
                    (p + "embed_tokens.weight", (V, H), "copy:model.embed_tokens.weight"),
                    (p + "shared_head.head.weight", (V, H),
                     "copy:" + ("model.embed_tokens.weight" if s.tie_embeddings else "lm_head.weight"))])
        block(s.layers)
    return out


def _qwen_shapes(s: SyntheticSpec, *, qwen35: bool, moe: bool) -> Shapes:
    """The Qwen hybrids (Qwen3.5 dense and MoE, Qwen3-Next): linear-attention layers with every
    ``attention_interval``-th one full attention, the MTP block under ``mtp.``. ``qwen35``: Qwen3.5's names
    (``model.language_model.``, split in_proj, a few vision tensors), else Qwen3-Next's."""
    H, V, L = s.hidden, s.vocab_size, s.layers
    nh, nkv, hd = s.heads, s.kv_heads, s.head_dim
    nk, nv, dh = s.lin_k_heads, s.lin_v_heads, s.lin_head_dim
    key_dim, value_dim = nk * dh, nv * dh
    conv_dim = 2 * key_dim + value_dim
    pre = "model.language_model." if qwen35 else "model."
    out: Shapes = [(pre + "embed_tokens.weight", (V, H), "w")]

    def attn(p: str) -> None:
        out.extend([
            (p + "input_layernorm.weight", (H,), "norm"), (p + "post_attention_layernorm.weight", (H,), "norm"),
            (p + "self_attn.q_proj.weight", (2 * nh * hd, H), "w"), (p + "self_attn.k_proj.weight", (nkv * hd, H), "w"),
            (p + "self_attn.v_proj.weight", (nkv * hd, H), "w"), (p + "self_attn.o_proj.weight", (H, nh * hd), "wout"),
            (p + "self_attn.q_norm.weight", (hd,), "norm"), (p + "self_attn.k_norm.weight", (hd,), "norm"),
        ])

    def linear(p: str) -> None:
        out.extend([(p + "input_layernorm.weight", (H,), "norm"), (p + "post_attention_layernorm.weight", (H,), "norm")])
        la = p + "linear_attn."
        if qwen35:
            out.extend([(la + "in_proj_qkv.weight", (conv_dim, H), "w"), (la + "in_proj_z.weight", (value_dim, H), "w"),
                        (la + "in_proj_b.weight", (nv, H), "w"), (la + "in_proj_a.weight", (nv, H), "w")])
        else:
            out.extend([(la + "in_proj_qkvz.weight", (2 * key_dim + 2 * value_dim, H), "w"),
                        (la + "in_proj_ba.weight", (2 * nv, H), "w")])
        out.extend([(la + "conv1d.weight", (conv_dim, 1, s.conv_kernel), "conv"), (la + "dt_bias", (nv,), "ones"),
                    (la + "A_log", (nv,), "alog"), (la + "norm.weight", (dh,), "ones"),
                    (la + "out_proj.weight", (H, value_dim), "wout")])

    def mlp(p: str, fused: bool) -> None:
        if not moe:
            I = s.intermediate
            out.extend([(p + "mlp.gate_proj.weight", (I, H), "w"), (p + "mlp.up_proj.weight", (I, H), "w"),
                        (p + "mlp.down_proj.weight", (H, I), "wout")])
            return
        E, Ie, Is = s.experts, s.moe_intermediate, s.shared_intermediate
        out.append((p + "mlp.gate.weight", (E, H), "w"))
        if fused:
            out.extend([(p + "mlp.experts.gate_up_proj", (E, 2 * Ie, H), "w"), (p + "mlp.experts.down_proj", (E, H, Ie), "wout")])
        else:
            for e in range(E):
                out.extend([(f"{p}mlp.experts.{e}.gate_proj.weight", (Ie, H), "w"),
                            (f"{p}mlp.experts.{e}.up_proj.weight", (Ie, H), "w"),
                            (f"{p}mlp.experts.{e}.down_proj.weight", (H, Ie), "wout")])
        out.extend([(p + "mlp.shared_expert.gate_proj.weight", (Is, H), "w"),
                    (p + "mlp.shared_expert.up_proj.weight", (Is, H), "w"),
                    (p + "mlp.shared_expert.down_proj.weight", (H, Is), "wout"),
                    (p + "mlp.shared_expert_gate.weight", (1, H), "w")])

    trunk_fused = s.fused_experts and qwen35 and moe
    for il in range(L):
        p = f"{pre}layers.{il}."
        if (il + 1) % s.attention_interval:
            linear(p)
        else:
            attn(p)
        mlp(p, trunk_fused)
    out.append((pre + "norm.weight", (H,), "outnorm"))
    if not s.tie_embeddings:
        out.append(("lm_head.weight", (V, H), "w"))
    if s.mtp:
        out.extend([("mtp.fc.weight", (H, 2 * H), "fc"), ("mtp.pre_fc_norm_embedding.weight", (H,), "enorm"),
                    ("mtp.pre_fc_norm_hidden.weight", (H,), "norm"), ("mtp.norm.weight", (H,), "outnorm")])
        attn("mtp.layers.0.")
        mlp("mtp.layers.0.", False)
    if qwen35:  # a few vision-tower tensors, which the converter must skip
        out.extend([("model.visual.patch_embed.proj.weight", (32, 3, 2, 16, 16), "w"),
                    ("model.visual.blocks.0.attn.qkv.weight", (96, 32), "w")])
    return out


@dataclass(frozen=True)
class Writer:
    """How the checkpoint of one family is written."""

    #: config.json from the spec and the tokenizer's size
    config: Callable[[SyntheticSpec, int], dict]
    #: (name, shape, kind) of every tensor, in file order
    shapes: Callable[[SyntheticSpec], Shapes]
    #: write_tokenizer's style (qwen | glm | deepseek), or "tiktoken": Kimi's rank file (write_tiktoken)
    tokenizer: str = "qwen"
    #: the MTP block is ``model.layers.{L}`` (DeepSeek-V3's layout): an oracle head zeroes its output projections
    #: there, as under ``mtp.`` in the Qwen hybrids
    head_is_layer: bool = False


_DS = partial(_nextn_shapes, attn=_mla_attn, router_bias="ones")

#: ``SyntheticSpec.family`` -> its writer: one per GGUF arch of gguf_mtp.archs.ARCHS, named alike, and releases
#: whose config and tokenizer differ from their arch's first one (glm47flash and kimik2 are deepseek2 models)
WRITERS: Mapping[str, Writer] = {
    "qwen35": Writer(partial(_qwen35_config, moe=False), partial(_qwen_shapes, qwen35=True, moe=False)),
    "qwen35moe": Writer(partial(_qwen35_config, moe=True), partial(_qwen_shapes, qwen35=True, moe=True)),
    "qwen3next": Writer(_qwen3next_config, partial(_qwen_shapes, qwen35=False, moe=True)),
    "glm4moe": Writer(_glm_config, partial(_nextn_shapes, attn=_glm_attn, router_bias="w"), "glm",
                      head_is_layer=True),
    "deepseek2": Writer(_ds_config, _DS, "deepseek", head_is_layer=True),
    "mimo2": Writer(mimo_config, mimo_shapes),
    "step35": Writer(step_config, step_shapes, "deepseek"),
    "glm47flash": Writer(_glm_lite_config, _DS, "glm", head_is_layer=True),
    "kimik2": Writer(kimi_config, _DS, "tiktoken", head_is_layer=True),
}


def _e4m3_grid() -> tuple[np.ndarray, np.ndarray]:
    """Every finite non-negative float8 e4m3fn value (ascending) and its bit pattern."""
    codes = np.arange(0x7F, dtype=np.uint8)  # 0x7f is NaN
    e, m = codes >> 3, codes & 7
    vals = np.where(e == 0, np.ldexp(m.astype(np.float64), -9), np.ldexp(8.0 + m, e.astype(np.int64) - 10))
    order = np.argsort(vals, kind="stable")
    return vals[order].astype(np.float32), codes[order]


def fp8_quantize(x: np.ndarray, block: int = 128) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes uint8, scale_inv float32 per block, exactly dequantized float32) of a 2-D float32 matrix."""
    vals, codes = _e4m3_grid()
    rows, cols = x.shape
    br, bc = -(-rows // block), -(-cols // block)
    scale = np.ones((br, bc), np.float32)
    deq = np.empty_like(x)
    out = np.empty(x.shape, np.uint8)
    for i in range(br):
        for j in range(bc):
            blk = x[i * block:(i + 1) * block, j * block:(j + 1) * block]
            amax = float(np.abs(blk).max())
            s = np.float32(amax / 448.0 if amax > 0 else 1.0)
            a = np.minimum(np.abs(blk) / s, 448.0)
            k = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
            k = np.where(np.abs(vals[k - 1] - a) <= np.abs(vals[k] - a), k - 1, k)
            sign = blk < 0
            out[i * block:(i + 1) * block, j * block:(j + 1) * block] = codes[k] | (sign.astype(np.uint8) << 7)
            deq[i * block:(i + 1) * block, j * block:(j + 1) * block] = np.where(sign, -vals[k], vals[k]) * s
            scale[i, j] = s
    return out, scale, deq


def write_checkpoint(root: str | Path, spec: SyntheticSpec = SyntheticSpec(), *,
                     fp8_twin: str | Path | None = None) -> Path:
    """Write config, tokenizer and sharded bf16 safetensors of ``spec`` into ``root``; returns ``root``.

    With ``spec.fp8`` the matrices are float8 e4m3 with 128x128 block scales, and ``fp8_twin`` (a folder)
    receives the same checkpoint with those matrices dequantized exactly to float32.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if spec.family not in WRITERS:
        raise ValueError(f"no synthetic checkpoint for family {spec.family!r}; known: {', '.join(WRITERS)}")
    writer = WRITERS[spec.family]
    if writer.tokenizer == "tiktoken":
        n_tok = write_tiktoken(root, spec.vocab_size)
    else:
        n_tok = write_tokenizer(root, style=writer.tokenizer)
    if n_tok > spec.vocab_size:
        raise ValueError(f"vocab_size {spec.vocab_size} is smaller than the tokenizer ({n_tok} tokens)")
    config = writer.config(spec, n_tok)
    (root / "config.json").write_text(json.dumps(config, indent=2))
    rand = _Rand(spec.seed, spec.std)
    made: dict[str, np.ndarray] = {}  # embedding/LM-head values, for the MTP layer's copies (GLM)

    def make(kind: str, shape: tuple[int, ...], name: str):  # type: ignore[no-untyped-def]
        n = int(np.prod(shape))
        mtp = name.startswith("mtp.") or name.startswith(f"model.layers.{spec.layers}.") and writer.head_is_layer
        if kind.startswith("copy:"):
            return lambda: made[kind[5:]]
        if kind.startswith("g"):  # GLM norms are plain weights around 1 (no +1 offset in the checkpoint)
            kind = "ones" if spec.oracle_head else "gnoise"
        if spec.oracle_head:
            if kind == "fc":  # [I | 0]: keep the embedding half only
                kind = "identity_left"
            elif kind in ("outnorm", "enorm"):
                kind = "zero"  # offsets 0: weight 1, the same on the trunk's and the head's output norm
            elif kind == "wout" and mtp:
                kind = "noise" if spec.head_noise else "zero"  # the MTP block adds (almost) nothing
        elif kind in ("fc", "outnorm", "enorm"):
            kind = "w" if kind == "fc" else "norm"

        def f() -> np.ndarray:
            if kind == "gnoise":
                return f32_to_bf16(1 + rand.f32(n) * 5)
            if kind == "zero":
                x = np.zeros(n, np.float32)
            elif kind == "identity_left":
                x = np.concatenate([np.eye(shape[0], dtype=np.float32), np.zeros(shape, np.float32)[:, shape[0]:]],
                                   axis=1).reshape(-1)
            elif kind == "noise":
                x = rand.f32(n) * spec.head_noise
            elif kind == "wout":
                x = rand.f32(n) * (spec.trunk_scale if spec.oracle_head else 1.0)
            elif kind == "w":
                x = rand.f32(n)
            elif kind == "norm":
                x = rand.f32(n) * 5  # stored as offsets from 1
            elif kind == "conv":
                x = rand.f32(n) * 10
            elif kind == "ones":
                x = np.ones(n, np.float32)
            else:  # A_log
                x = np.log(np.linspace(1, 16, n, dtype=np.float32))
            bits = f32_to_bf16(x)
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                made[name] = bits
            return bits
        return f

    entries = [(name, shape, "BF16", make(kind, shape, name)) for name, shape, kind in writer.shapes(spec)]
    if spec.fp8:
        config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                         "weight_block_size": [128, 128]}
        (root / "config.json").write_text(json.dumps(config, indent=2))
        entries, twin = _to_fp8(entries)
        if fp8_twin is not None:
            t = Path(fp8_twin)
            t.mkdir(parents=True, exist_ok=True)
            for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
                (t / f).write_bytes((root / f).read_bytes())
            plain = {k: v for k, v in config.items() if k != "quantization_config"}
            (t / "config.json").write_text(json.dumps(plain, indent=2))
            write_safetensors(t / "model.safetensors", twin)
    size = {"BF16": 2, "F32": 4, "F8_E4M3": 1}
    total = sum(int(np.prod(sh)) * size[dt] for _, sh, dt, _ in entries)
    per = -(-total // max(1, spec.n_shards))
    shards: list[list] = [[]]
    acc = 0
    for e in entries:
        if acc >= per and len(shards) < spec.n_shards:
            shards.append([])
            acc = 0
        shards[-1].append(e)
        acc += int(np.prod(e[1])) * size[e[2]]
    n = len(shards)
    weight_map = {}
    for i, group in enumerate(shards):
        fname = "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        write_safetensors(root / fname, group)
        weight_map.update({e[0]: fname for e in group})
    if n > 1:
        (root / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return root


def _to_fp8(entries: list) -> tuple[list, list]:
    """Matrices -> (F8_E4M3 codes, F32 weight_scale_inv); the rest unchanged. Also the exact float32 twin."""
    from gguf_mtp.ggml_types import bf16_to_f32

    out, twin = [], []
    for name, shape, dtype, make in entries:
        if name.endswith(".weight") and len(shape) == 2 and min(shape) >= 16:
            x = bf16_to_f32(make()).reshape(shape)
            q, s, deq = fp8_quantize(x)
            out.append((name, shape, "F8_E4M3", lambda q=q: q.reshape(-1)))
            out.append((name + "_scale_inv", s.shape, "F32", lambda s=s: s.reshape(-1)))
            twin.append((name, shape, "F32", lambda d=deq: d.reshape(-1)))
        else:  # draw once: both checkpoints must hold the same values
            data = make()
            out.append((name, shape, dtype, lambda d=data: d))
            twin.append((name, shape, dtype, lambda d=data: d))
    return out, twin
