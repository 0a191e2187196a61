"""The config.json fields gguf-mtp reads, with their types and sane ranges, checked before any family reads them.

A checkpoint comes from anyone's repository: ``num_hidden_layers: 1e9`` would allocate per-layer lists until the
machine runs out, a string where a number belongs ends in a traceback deep inside a family. :func:`check_config`
refuses such a config with one line naming the file and key; a ``null`` counts as absent (transformers' own
reading: its defaults apply), so families see a key either missing or of the right kind. Limits are llama.cpp's
where it has one (512 layers, 1024 experts) and generous sanity caps elsewhere; only the keys present are checked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FormatError
from ..ggufio.validate import LLAMA_MAX_EXPERTS, LLAMA_MAX_LAYERS, MAX_VOCAB, U32_MAX

DIM = 1 << 20  # widths (hidden, FFN): the largest released models are near 2^15
HEADS = 1 << 12
HEAD_DIM = 1 << 14


@dataclass(frozen=True)
class Field:
    """One config value: ``kind`` is int, float, str, bool, list or dict; ``item`` checks list items;
    ``fields`` a dict's own keys. ``alt`` is a second kind the value may take (e.g. a per-layer list)."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    item: Field | None = None
    fields: dict[str, Field] | None = None
    alt: Field | None = None
    max_len: int = 1 << 16
    nullable_items: bool = False
    pattern: str | None = None


def I(lo: float = 0, hi: float = U32_MAX) -> Field:  # noqa: E743 - a table reads better with short names
    return Field("int", lo, hi)


def F(lo: float | None = None, hi: float | None = None) -> Field:
    return Field("float", lo, hi)


S = Field("str")
B = Field("bool")
TOKEN_ID = Field("int", 0, MAX_VOCAB - 1, alt=Field("list", item=Field("int", 0, MAX_VOCAB - 1), max_len=256))


def L(item: Field, max_len: int = 1 << 16, nullable_items: bool = False) -> Field:
    return Field("list", item=item, max_len=max_len, nullable_items=nullable_items)


ROPE: dict[str, Field] = {
    "rope_theta": F(0, 1e12), "partial_rotary_factor": F(0, 1), "mrope_section": L(I(0, HEAD_DIM), 4),
    "type": S, "rope_type": S, "factor": F(0, 1e6), "original_max_position_embeddings": I(1),
    "beta_fast": F(-1e6, 1e6), "beta_slow": F(-1e6, 1e6), "mscale": F(-1e6, 1e6), "mscale_all_dim": F(-1e6, 1e6),
    "low_freq_factor": F(0, 1e6), "high_freq_factor": F(0, 1e6),
}
# Step-3.5 keeps a rope dict per attention type
ROPE_DICT = Field("dict", fields={**ROPE, "full_attention": Field("dict", fields=ROPE),
                                  "sliding_attention": Field("dict", fields=ROPE)})

#: every config.json key a family, the tokenizer or the checkpoint reader looks at
CONFIG: dict[str, Field] = {
    "architectures": L(S, 16),
    "model_type": S,
    "_name_or_path": S,
    "num_hidden_layers": I(1, LLAMA_MAX_LAYERS),
    "hidden_size": I(1, DIM),
    "intermediate_size": I(0, DIM),
    "moe_intermediate_size": I(1, DIM),
    "shared_expert_intermediate_size": I(0, DIM),
    "share_expert_dim": I(0, DIM),
    "num_attention_heads": I(1, HEADS),
    "num_key_value_heads": I(1, HEADS),
    "num_attention_groups": I(1, HEADS),
    "swa_num_attention_heads": I(1, HEADS),
    "swa_num_key_value_heads": I(1, HEADS),
    "head_dim": I(1, HEAD_DIM),
    "swa_head_dim": I(1, HEAD_DIM),
    "v_head_dim": I(1, HEAD_DIM),
    "swa_v_head_dim": I(1, HEAD_DIM),
    "qk_nope_head_dim": I(1, HEAD_DIM),
    "qk_rope_head_dim": I(1, HEAD_DIM),
    "q_lora_rank": I(0, DIM),
    "kv_lora_rank": I(1, DIM),
    "linear_num_key_heads": I(1, HEADS),
    "linear_num_value_heads": I(1, HEADS),
    "linear_key_head_dim": I(1, HEAD_DIM),
    "linear_value_head_dim": I(1, HEAD_DIM),
    "linear_conv_kernel_dim": I(1, 1024),
    "full_attention_interval": I(1, LLAMA_MAX_LAYERS),
    "layer_types": L(S, 2 * LLAMA_MAX_LAYERS),
    "mlp_layer_types": L(S, 2 * LLAMA_MAX_LAYERS),
    "hybrid_layer_pattern": L(I(0, 1), 2 * LLAMA_MAX_LAYERS),
    "moe_layers_enum": Field("str", pattern=r"[\d,\s]*"),
    "max_position_embeddings": I(1),
    "max_seq_len": I(1),
    "rms_norm_eps": F(0, 1),
    "layernorm_epsilon": F(0, 1),
    "rope_theta": Field("float", 0, 1e12, alt=L(F(0, 1e12), 2 * LLAMA_MAX_LAYERS)),
    "local_rope_theta": F(0, 1e12),
    "swa_rope_theta": F(0, 1e12),
    "partial_rotary_factor": F(0, 1),
    "partial_rotary_factors": L(F(0, 1), 2 * LLAMA_MAX_LAYERS),
    "rope_scaling": ROPE_DICT,
    "rope_parameters": ROPE_DICT,
    "num_experts": I(1, LLAMA_MAX_EXPERTS),
    "n_routed_experts": I(1, LLAMA_MAX_EXPERTS),
    "moe_num_experts": I(1, LLAMA_MAX_EXPERTS),
    "num_experts_per_tok": I(1, LLAMA_MAX_EXPERTS),
    "moe_top_k": I(1, LLAMA_MAX_EXPERTS),
    "n_shared_experts": I(0, LLAMA_MAX_EXPERTS),
    "n_group": I(1, LLAMA_MAX_EXPERTS),
    "topk_group": I(1, LLAMA_MAX_EXPERTS),
    "first_k_dense_replace": I(0, LLAMA_MAX_LAYERS),
    "moe_every_n_layer": I(0, LLAMA_MAX_LAYERS),
    "routed_scaling_factor": F(-1e6, 1e6),
    "moe_router_scaling_factor": F(-1e6, 1e6),
    "norm_topk_prob": B,
    "norm_expert_weight": B,
    "scoring_func": S,
    "moe_router_activation": S,
    "topk_method": S,
    "num_nextn_predict_layers": I(0, LLAMA_MAX_LAYERS),
    "mtp_num_hidden_layers": I(0, LLAMA_MAX_LAYERS),
    "sliding_window": I(1),
    "attention_value_scale": F(-1e6, 1e6),
    "attention_other_setting": Field("dict", fields={"num_attention_heads": I(1, HEADS),
                                                     "num_attention_groups": I(1, HEADS)}),
    "swiglu_limits": L(F(0, 1e6), 2 * LLAMA_MAX_LAYERS, nullable_items=True),
    "swiglu_limits_shared": L(F(0, 1e6), 2 * LLAMA_MAX_LAYERS, nullable_items=True),
    "vocab_size": I(1, MAX_VOCAB),
    "bos_token_id": TOKEN_ID,
    "eos_token_id": TOKEN_ID,
    "pad_token_id": TOKEN_ID,
    "quantization_config": Field("dict", fields={"quant_method": S, "weight_block_size": L(I(1, 1 << 16), 2)}),
}
CONFIG["text_config"] = Field("dict", fields=CONFIG)


def _fail(where: Path, key: str, value: Any, what: str) -> FormatError:
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return FormatError(f"{where}: {key} = {shown} {what}")


def _num(x: float | None) -> str:
    if x is None:
        return "any"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


_KIND_WORDS = {"int": "a whole number", "float": "a number", "str": "a string", "bool": "true or false",
               "list": "a list", "dict": "an object"}


def _kind_ok(kind: str, v: Any) -> bool:
    if kind == "int":
        return not isinstance(v, bool) and (isinstance(v, int) or isinstance(v, float) and v.is_integer())
    if kind == "float":
        return not isinstance(v, bool) and isinstance(v, (int, float))
    return isinstance(v, {"str": str, "bool": bool, "list": list, "dict": dict}[kind])


def check_value(where: Path, key: str, v: Any, f: Field) -> Any:
    """``v`` checked against ``f`` (ints given as ``4096.0`` become ``4096``; nulls inside dicts are dropped)."""
    if not _kind_ok(f.kind, v):
        if f.alt is not None:
            return check_value(where, key, v, f.alt)
        want = _KIND_WORDS[f.kind] + (f" or {_KIND_WORDS[f.alt.kind]}" if f.alt else "")
        raise _fail(where, key, v, f"is not {want}")
    if f.kind in ("int", "float"):
        if isinstance(v, float) and not math.isfinite(v):
            raise _fail(where, key, v, "is not a finite number")
        if (f.lo is not None and v < f.lo) or (f.hi is not None and v > f.hi):
            raise _fail(where, key, v, f"is out of range ({_num(f.lo)} to {_num(f.hi)})")
        return int(v) if f.kind == "int" else v
    if f.kind == "str" and f.pattern and not re.fullmatch(f.pattern, v):
        raise _fail(where, key, v, "is not in the expected form")
    if f.kind == "list":
        if len(v) > f.max_len:
            raise _fail(where, key, f"[{len(v)} items]", f"has more than {f.max_len} items")
        assert f.item is not None
        return [None if x is None and f.nullable_items else check_value(where, f"{key}[{i}]", x, f.item)
                for i, x in enumerate(v)]
    if f.kind == "dict" and f.fields is not None:
        return check_dict(where, v, f.fields, prefix=f"{key}.")
    return v


def check_dict(where: Path, d: dict[str, Any], fields: dict[str, Field], prefix: str = "") -> dict[str, Any]:
    """A copy of ``d`` with known keys checked and nulls dropped (unknown keys are kept as they are)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if v is None:
            continue  # null = absent: the reader's default applies, as in transformers
        out[k] = check_value(where, prefix + k, v, fields[k]) if k in fields else v
    return out


def _hparams(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, **(config.get("text_config") or {})}


#: relations between fields, as (check on the merged text hparams, message)
CROSS: list[tuple[Callable[[dict[str, Any]], bool], str]] = [
    (lambda hp: "layer_types" not in hp or len(hp["layer_types"]) >= hp.get("num_hidden_layers", 0),
     "layer_types has fewer entries than num_hidden_layers"),
    (lambda hp: "hybrid_layer_pattern" not in hp or len(hp["hybrid_layer_pattern"]) >= hp.get("num_hidden_layers", 0),
     "hybrid_layer_pattern has fewer entries than num_hidden_layers"),
    (lambda hp: hp.get("num_experts_per_tok", 0) <= max(hp.get("num_experts", 0), hp.get("n_routed_experts", 0),
                                                        hp.get("moe_num_experts", 0)) or not any(
        k in hp for k in ("num_experts", "n_routed_experts", "moe_num_experts")),
     "num_experts_per_tok is larger than the expert count"),
    (lambda hp: hp.get("first_k_dense_replace", 0) <= hp.get("num_hidden_layers", LLAMA_MAX_LAYERS),
     "first_k_dense_replace is larger than num_hidden_layers"),
    (lambda hp: hp.get("num_nextn_predict_layers", 0) + hp.get("mtp_num_hidden_layers", 0)
     + hp.get("num_hidden_layers", 0) <= LLAMA_MAX_LAYERS,
     f"the trunk and MTP layers together exceed llama.cpp's {LLAMA_MAX_LAYERS} layers"),
    (lambda hp: "num_key_value_heads" not in hp or "num_attention_heads" not in hp
     or hp["num_attention_heads"] % hp["num_key_value_heads"] == 0,
     "num_attention_heads is not a multiple of num_key_value_heads"),
]


def check_config(config: dict[str, Any], where: Path) -> dict[str, Any]:
    """``config`` (config.json's object) with every field gguf-mtp reads checked; raises :class:`FormatError`
    naming ``where`` and the key. Returns the cleaned copy (nulls dropped, integral floats made ints)."""
    out = check_dict(where, config, CONFIG)
    hp = _hparams(out)
    for ok, msg in CROSS:
        if not ok(hp):
            raise FormatError(f"{where}: {msg}; the config is damaged or not for this model")
    return out


__all__ = ["check_config", "check_dict", "check_value", "Field", "CONFIG"]
