"""What we hand to llama.cpp, checked first: GGUF metadata types and ranges, and tensor types per op.

Every model gguf-mtp opens (inspect, extract, strip, graft, pairing, run, quantize) goes through
:func:`check_metadata` when :class:`~gguf_mtp.ggufio.model.GGUFModel` is built, so the rest of the code can
read ``block_count`` & co. as the plain numbers llama.cpp would read. The rules are llama.cpp's own
(``src/llama-model.cpp``, ``src/llama-model-loader.cpp``): a value of the wrong GGUF type makes its loader
throw, and the ranges below are ``GGML_ASSERT``s there, which abort the process instead of failing the load.

Tensor types (:func:`check_tensor_types`): weights of element-wise ops (norms, biases, ``ssm_a``, RoPE factors,
...; llama.cpp's ``LLM_TENSOR_INFOS``) must be F32, because ggml's CPU binary ops take F32 activations with F32
weights only and abort on anything else at the first decode; matrix weights need a type with a CPU dot product.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gguf import MODEL_TENSOR, GGMLQuantizationType, GGUFValueType, Keys

from ..archs import arch as arch_row
from ..errors import FormatError, UnsupportedError
from ..ggml_types import type_name
from ..layout import block_parts, has_trunk_blocks
from .format import KV
from .keys import K_RECURRENT_LAYERS, K_SHARED_TARGET_TENSORS, K_VALUE_SCALE, arch_key
from .names import in_block

V = GGUFValueType
T = GGMLQuantizationType

#: llama.cpp's limits (src/llama-hparams.h)
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 1024
#: token ids are int32 in llama.cpp; no released vocabulary is near this (the largest are ~260k)
MAX_VOCAB = 1 << 24
U32_MAX = (1 << 32) - 1
#: llama.cpp's rope scaling names (llama_rope_scaling_type_from_string); anything else aborts the load
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")


@dataclass(frozen=True)
class Rule:
    """A key's GGUF type(s) as llama.cpp reads them, and its range.

    ``per_layer``: llama.cpp's ``get_key_or_arr``: a scalar, or an array of exactly ``block_count`` entries
    of ``items``. ``items`` alone (no ``types``): the key must be an array of those.
    """

    types: tuple[GGUFValueType, ...] = ()
    lo: float | None = None
    hi: float | None = None
    per_layer: bool = False
    items: tuple[GGUFValueType, ...] = ()
    max_len: int | None = None


_INT_ITEMS = (V.UINT32, V.INT32)
_u32 = lambda lo=0, hi=U32_MAX: Rule((V.UINT32,), lo, hi)  # noqa: E731
_f32 = lambda lo=None, hi=None: Rule((V.FLOAT32,), lo, hi)  # noqa: E731
_layers = lambda lo=0, hi=U32_MAX: Rule((V.UINT32,), lo, hi, per_layer=True, items=_INT_ITEMS)  # noqa: E731

#: ``<arch>.*`` keys gguf-mtp reads or writes, as llama.cpp's loader reads them
ARCH_RULES: dict[str, Rule] = {
    Keys.LLM.BLOCK_COUNT: _u32(1, LLAMA_MAX_LAYERS),
    Keys.LLM.NEXTN_PREDICT_LAYERS: _u32(0, LLAMA_MAX_LAYERS),  # and <= block_count, below
    Keys.LLM.CONTEXT_LENGTH: _u32(),
    Keys.LLM.EMBEDDING_LENGTH: _u32(1),
    Keys.LLM.FEED_FORWARD_LENGTH: _layers(),
    Keys.Attention.HEAD_COUNT: _layers(),
    Keys.Attention.HEAD_COUNT_KV: _layers(),
    Keys.Attention.KEY_LENGTH: _u32(),
    Keys.Attention.VALUE_LENGTH: _u32(),
    Keys.Attention.KEY_LENGTH_MLA: _u32(),
    Keys.Attention.VALUE_LENGTH_MLA: _u32(),
    Keys.Attention.Q_LORA_RANK: _u32(),
    Keys.Attention.KV_LORA_RANK: _u32(),
    Keys.Attention.LAYERNORM_RMS_EPS: _f32(0),
    Keys.Rope.FREQ_BASE: _f32(0),
    Keys.Rope.FREQ_BASE_SWA: _f32(0),
    Keys.Rope.DIMENSION_COUNT: _u32(),
    Keys.Rope.DIMENSION_SECTIONS: Rule(items=_INT_ITEMS, max_len=4),
    Keys.Rope.SCALING_TYPE: Rule((V.STRING,)),
    Keys.Rope.SCALING_FACTOR: _f32(0),
    Keys.Rope.SCALING_ORIG_CTX_LEN: _u32(),
    Keys.Rope.SCALING_YARN_LOG_MUL: _f32(),
    Keys.Rope.SCALING_YARN_BETA_FAST: _f32(),
    Keys.Rope.SCALING_YARN_BETA_SLOW: _f32(),
    Keys.LLM.EXPERT_COUNT: _u32(0, LLAMA_MAX_EXPERTS),
    Keys.LLM.EXPERT_USED_COUNT: _layers(0, LLAMA_MAX_EXPERTS),
    Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: _layers(),
    Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH: _u32(),
    Keys.LLM.EXPERT_SHARED_COUNT: _u32(),
    Keys.LLM.EXPERT_GROUP_COUNT: _u32(),
    Keys.LLM.EXPERT_GROUP_USED_COUNT: _u32(),
    Keys.LLM.EXPERT_WEIGHTS_SCALE: _f32(),
    Keys.LLM.EXPERT_WEIGHTS_NORM: Rule((V.BOOL,)),
    Keys.LLM.EXPERT_GATING_FUNC: _u32(),
    Keys.LLM.LEADING_DENSE_BLOCK_COUNT: _u32(0, LLAMA_MAX_LAYERS),
    Keys.LLM.VOCAB_SIZE: _u32(0, MAX_VOCAB),
    K_RECURRENT_LAYERS: Rule((V.BOOL, V.UINT32, V.INT32), per_layer=True, items=(V.BOOL, *_INT_ITEMS)),
    Keys.LLM.FULL_ATTENTION_INTERVAL: _u32(),
    Keys.SSM.CONV_KERNEL: _u32(),
    Keys.SSM.STATE_SIZE: _u32(),
    Keys.SSM.GROUP_COUNT: _u32(),
    Keys.SSM.TIME_STEP_RANK: _u32(),
    Keys.SSM.INNER_SIZE: _u32(),
    Keys.Attention.SLIDING_WINDOW: _u32(),
    Keys.Attention.SLIDING_WINDOW_PATTERN: Rule((V.UINT32,), items=(V.BOOL, *_INT_ITEMS), max_len=LLAMA_MAX_LAYERS),
    K_VALUE_SCALE: _f32(),
    Keys.LLM.SWIGLU_CLAMP_EXP: Rule((V.FLOAT32,), per_layer=True, items=(V.FLOAT32,)),
    Keys.LLM.SWIGLU_CLAMP_SHEXP: Rule((V.FLOAT32,), per_layer=True, items=(V.FLOAT32,)),
    K_SHARED_TARGET_TENSORS: Rule(items=(V.STRING,)),
}

#: keys outside the architecture's namespace
GLOBAL_RULES: dict[str, Rule] = {
    Keys.General.ARCHITECTURE: Rule((V.STRING,)),
    Keys.General.FILE_TYPE: _u32(),
    Keys.Tokenizer.MODEL: Rule((V.STRING,)),
    Keys.Tokenizer.PRE: Rule((V.STRING,)),
    Keys.Tokenizer.LIST: Rule(items=(V.STRING,), max_len=MAX_VOCAB),
    Keys.Tokenizer.TOKEN_TYPE: Rule(items=(V.INT32,), max_len=MAX_VOCAB),
    Keys.Tokenizer.MERGES: Rule(items=(V.STRING,)),
    Keys.Tokenizer.BOS_ID: _u32(),
    Keys.Tokenizer.EOS_ID: _u32(),
    Keys.Tokenizer.PAD_ID: _u32(),
    Keys.Tokenizer.EOT_ID: _u32(),
    Keys.Tokenizer.ADD_BOS: Rule((V.BOOL,)),
    Keys.Tokenizer.ADD_EOS: Rule((V.BOOL,)),
    Keys.Tokenizer.CHAT_TEMPLATE: Rule((V.STRING,)),
}


def _type_of(kv: KV) -> str:
    if kv.vtype == V.ARRAY:
        return f"an array of {kv.item_type.name if kv.item_type is not None else '?'}"
    return kv.vtype.name


def _bad(path: Path, key: str, what: str) -> FormatError:
    return FormatError(f"{path}: metadata key {key!r} {what}; the file is damaged or was written for another "
                       "program (llama.cpp would refuse or crash on it)")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _check_number(path: Path, key: str, v: float, rule: Rule) -> None:
    if isinstance(v, float) and not math.isfinite(v):
        raise _bad(path, key, f"is {v}, not a finite number")
    if rule.lo is not None and v < rule.lo:
        raise _bad(path, key, f"is {v}, below {_num(rule.lo)}")
    if rule.hi is not None and v > rule.hi:
        raise _bad(path, key, f"is {v}, above llama.cpp's limit {_num(rule.hi)}")


def _check_kv(path: Path, kv: KV, rule: Rule, block_count: int | None) -> None:
    if kv.vtype == V.ARRAY:
        if not rule.items:
            raise _bad(path, kv.key, f"is {_type_of(kv)}, expected a single {rule.types[0].name}")
        if kv.item_type not in rule.items:
            items = " or ".join(t.name for t in rule.items)
            raise _bad(path, kv.key, f"is {_type_of(kv)}, expected an array of {items}")
        n = len(kv.value)
        if rule.per_layer and block_count is not None and n != block_count:
            raise _bad(path, kv.key, f"has {n} entries but block_count is {block_count}; per-layer arrays need "
                                     "one entry per block")
        if rule.max_len is not None and n > rule.max_len:
            raise _bad(path, kv.key, f"has {n} entries, more than llama.cpp reads ({rule.max_len})")
        if kv.item_type != V.STRING and kv.item_type != V.BOOL:
            for v in kv.scalar():
                _check_number(path, kv.key, v, rule)
        return
    if not rule.types or kv.vtype not in rule.types:
        want = " or ".join(t.name for t in rule.types) if rule.types else f"an array of {rule.items[0].name}"
        shown = f" ({kv.value!r:.40})" if kv.vtype == V.STRING else ""
        raise _bad(path, kv.key, f"is {_type_of(kv)}{shown}, expected {want}")
    if kv.vtype not in (V.STRING, V.BOOL):
        _check_number(path, kv.key, kv.value, rule)


def _int(kv: Mapping[str, KV], key: str, default: int = 0) -> int:
    e = kv.get(key)
    if e is None or e.vtype == V.ARRAY:
        return default
    return int(e.value)


def _layer_max(kv: Mapping[str, KV], key: str) -> int:
    e = kv.get(key)
    if e is None:
        return 0
    return int(max(e.value, default=0)) if e.vtype == V.ARRAY else int(e.value)


def check_metadata(path: Path, kv: Mapping[str, KV]) -> None:
    """Refuse metadata llama.cpp would refuse, or abort on, naming the key; a no-op on sane files.

    Only keys that are present are checked (which keys an architecture needs is llama.cpp's business).
    """
    for key, rule in GLOBAL_RULES.items():
        if key in kv:
            _check_kv(path, kv[key], rule, None)
    arch_kv = kv.get(Keys.General.ARCHITECTURE)
    if arch_kv is None:
        return
    arch = str(arch_kv.value)
    if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", arch):
        raise _bad(path, Keys.General.ARCHITECTURE, f"is {arch!r:.70}, not an architecture name")
    a = lambda t: arch_key(t, arch)  # noqa: E731
    bc_key, nextn_key = a(Keys.LLM.BLOCK_COUNT), a(Keys.LLM.NEXTN_PREDICT_LAYERS)
    if bc_key in kv:
        _check_kv(path, kv[bc_key], ARCH_RULES[Keys.LLM.BLOCK_COUNT], None)
    block_count = _int(kv, bc_key) if bc_key in kv else None
    for tmpl, rule in ARCH_RULES.items():
        if tmpl != Keys.LLM.BLOCK_COUNT and a(tmpl) in kv:
            _check_kv(path, kv[a(tmpl)], rule, block_count)
    if nextn_key in kv:
        if block_count is None:
            raise _bad(path, nextn_key, f"is set but {bc_key} is missing")
        n = _int(kv, nextn_key)
        if n > block_count:
            raise _bad(path, nextn_key, f"is {n}, more than block_count {block_count}")
    # llama.cpp's expert asserts (llama_model::load_hparams)
    n_expert, used = _int(kv, a(Keys.LLM.EXPERT_COUNT)), _layer_max(kv, a(Keys.LLM.EXPERT_USED_COUNT))
    groups, group_used = _int(kv, a(Keys.LLM.EXPERT_GROUP_COUNT)), _int(kv, a(Keys.LLM.EXPERT_GROUP_USED_COUNT))
    ek = a(Keys.LLM.EXPERT_COUNT)
    if used > n_expert:
        raise _bad(path, a(Keys.LLM.EXPERT_USED_COUNT), f"is {used}, more than {ek} = {n_expert}")
    if n_expert > 0:
        if used == 0:
            raise _bad(path, a(Keys.LLM.EXPERT_USED_COUNT), f"is 0 or missing although {ek} = {n_expert}")
        if groups >= n_expert:
            raise _bad(path, a(Keys.LLM.EXPERT_GROUP_COUNT), f"is {groups}, not below {ek} = {n_expert}")
        if groups > 1 and (n_expert % groups or not 0 < group_used < groups):
            raise _bad(path, a(Keys.LLM.EXPERT_GROUP_USED_COUNT),
                       f"is {group_used} with {groups} groups of {n_expert} experts; llama.cpp needs the experts "
                       "to split evenly into groups and 0 < used groups < groups")
    elif groups:
        raise _bad(path, a(Keys.LLM.EXPERT_GROUP_COUNT), f"is {groups} but the model has no experts")
    st = kv.get(a(Keys.Rope.SCALING_TYPE))
    if st is not None and st.value not in ROPE_SCALING_TYPES:
        raise _bad(path, st.key, f"is {st.value!r:.40}; llama.cpp knows {', '.join(ROPE_SCALING_TYPES)}")
    swa = kv.get(a(Keys.Attention.SLIDING_WINDOW_PATTERN))
    row = arch_row(arch)
    if row is not None and row.swa and swa is not None and swa.vtype == V.ARRAY and not any(swa.scalar()):
        raise _bad(path, swa.key, "marks no layer as sliding-window; llama.cpp's cache for this architecture needs "
                                  "at least one (it asserts)")
    tokens, types = kv.get(Keys.Tokenizer.LIST), kv.get(Keys.Tokenizer.TOKEN_TYPE)
    if tokens is not None and types is not None and len(types.value) < len(tokens.value):
        raise _bad(path, Keys.Tokenizer.TOKEN_TYPE, f"has {len(types.value)} entries for {len(tokens.value)} tokens")


# -- tensors the graph needs ----------------------------------------------------------------------
# per-block tensor sets llama.cpp's loader leaves optional but its graph then uses (a file without them loads and
# crashes at the first decode, src/models/<arch>.cpp) are the arch table's ``recurrent_needs`` and ``ffn_by_router``
_FFN = {True: ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"),
        False: ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")}
_EH_PROJ = in_block(MODEL_TENSOR.NEXTN_EH_PROJ)  # the tensor llama.cpp probes to tell an MTP block


def _recurrent(kv: Mapping[str, KV], arch: str, n: int) -> list[bool]:
    """Which of the first ``n`` blocks are recurrent, as llama.cpp's qwen3.5 / qwen3-next loaders decide."""
    arr = kv.get(arch_key(K_RECURRENT_LAYERS, arch))
    if arr is not None and arr.vtype == V.ARRAY:
        return [bool(x) for x in arr.scalar()[:n]]
    interval = _int(kv, arch_key(Keys.LLM.FULL_ATTENTION_INTERVAL, arch), 4) or 4
    return [(il + 1) % interval != 0 for il in range(n)]


def check_tensor_set(path: Path, kv: Mapping[str, KV], names: Iterable[str]) -> None:
    """Refuse tensor sets llama.cpp would load and then crash on (it only probes one tensor to tell a model from
    a sidecar, and leaves some tensors optional that its graph needs)."""
    arch_kv = kv.get(Keys.General.ARCHITECTURE)
    bc_kv = kv.get(arch_key(Keys.LLM.BLOCK_COUNT, str(arch_kv.value))) if arch_kv is not None else None
    if arch_kv is None or bc_kv is None:
        return
    arch, names = str(arch_kv.value), set(names)
    n_mtp = _int(kv, arch_key(Keys.LLM.NEXTN_PREDICT_LAYERS, arch))
    n_trunk = int(bc_kv.value) - n_mtp
    blocks: dict[int, set[str]] = {}
    for name in names:
        parts = block_parts(name)
        if parts and parts[1]:
            blocks.setdefault(parts[0], set()).add(parts[1])
    missing = lambda il, what: FormatError(  # noqa: E731
        f"{path}: block {il} has no {what}; llama.cpp would load this file and crash when it runs it "
        "(the file is incomplete: download or convert it again)")
    if n_mtp > 0 and has_trunk_blocks(names, n_trunk) and "blk.0.attn_norm.weight" not in names:
        # llama.cpp takes a file without it for an MTP sidecar and stops checking the trunk's tensors
        raise missing(0, "attn_norm.weight, but other trunk tensors")
    if n_mtp > 0 and any(b >= n_trunk for b in blocks):
        # llama.cpp probes blk.{n_trunk}.nextn.eh_proj: without it every MTP tensor is optional (and then used);
        # with it, all declared heads are loaded
        for il in range(n_trunk, n_trunk + n_mtp):
            if _EH_PROJ not in blocks.get(il, ()):
                raise missing(il, f"{_EH_PROJ}, but the file has MTP tensors and declares {n_mtp} MTP "
                                  "layers")
    row = arch_row(arch)
    needs = row.recurrent_needs if row is not None else ()
    if row is not None and row.recurrent and any(b < n_trunk for b in blocks) and all(_recurrent(kv, arch, n_trunk)):
        # ggml cannot allocate the empty KV cache of a trunk without attention: llama.cpp aborts the process
        raise FormatError(f"{path}: none of the {n_trunk} trunk blocks is an attention block (full_attention_interval "
                          "or recurrent_layers make every one recurrent); llama.cpp aborts on such a file")
    if needs:
        for il, recurrent in enumerate(_recurrent(kv, arch, n_trunk)):
            if recurrent and il in blocks and not any(set(alt) <= blocks[il] for alt in needs):
                raise missing(il, " + ".join(needs[0]) + " (a linear-attention block)")
    if row is not None and row.ffn_by_router:
        for il, have in blocks.items():
            need = _FFN["ffn_gate_inp.weight" in have]
            if not set(need) <= have:
                raise missing(il, next(n for n in need if n not in have))


# -- tensor types -------------------------------------------------------------------------------
#: weights llama.cpp uses in element-wise ops (MUL, ADD, DIV, SCALE, ROPE, SSM_CONV, SSM_SCAN: LLM_TENSOR_INFOS),
#: matched on the name without ``blk.N.`` and ``.weight``; every ``.bias`` is an ADD
ELEMENTWISE = re.compile(
    r"^(.*norm(_\d+|_exps)?|ssm_[ad]|ssm_conv1d(_[qkv])?|shortconv\.conv|ple_conv1d|rope_freqs|"
    r"rope_factors_(long|short)|attn_sinks|layer_output_scale|altup_correct_scale|exp_probs_b(_vl)?|ffn\.act|"
    r"(attn|ffn|output)_res_score|(attn|ffn)_conv_base|hc_(attn|ffn)_(base|scale)|output_hc_(base|scale)|"
    r"time_mix_(lerp_\w+|decay|[wav]0|k_k|k_a|r_k|ln|first)|channel_mix_lerp_[kr]|convnext\.\d+\.gamma)$")
#: types ggml's CPU backend has no dot product (or row getter) for: unusable as a weight matrix
NOT_A_MATRIX_TYPE = {T.Q8_1, T.Q8_K, T.I8, T.I16, T.I32, T.I64, T.F64}


def _in_block(name: str) -> str:
    """``blk.3.attn_norm.weight`` -> ``attn_norm.weight``; other names as they are."""
    parts = block_parts(name)
    return parts[1] if parts else name


def tensor_type_problem(name: str, ggml_type: int) -> str | None:
    """Why llama.cpp cannot use tensor ``name`` stored as ``ggml_type`` (None when it can)."""
    if name.endswith(".bias"):
        base = _in_block(name)
        elementwise = True
    else:
        base = _in_block(name).removesuffix(".weight")
        elementwise = bool(ELEMENTWISE.match(base))
    if elementwise:
        if ggml_type != T.F32:
            return f"is {type_name(ggml_type)}, but llama.cpp multiplies or adds it element-wise, which needs F32"
        return None
    try:
        if T(ggml_type) in NOT_A_MATRIX_TYPE:
            return f"is {type_name(ggml_type)}, which llama.cpp cannot use as a weight matrix"
    except ValueError:
        return f"has unknown type {ggml_type}"
    return None


def check_tensor_types(path: Path, tensors: Iterable[tuple[str, int]], role: str = "") -> None:
    """Refuse the first ``(name, ggml type)`` llama.cpp would abort on at its first decode."""
    for name, gt in tensors:
        why = tensor_type_problem(name, gt)
        if why:
            who = f"{role} " if role else ""
            raise UnsupportedError(f"{path}: {who}tensor {name!r} {why}; the file was made by a tool that "
                                   "quantized it wrongly: convert or extract it again from a correct source")
