"""The MTP head of a GGUF file: finding it, checking that it fits a target, and planning a graft.

Shared by :mod:`gguf_mtp.surgery` (which writes the plans) and the runtime (which pairs a model with a head and
serves a grafted model from memory, :mod:`gguf_mtp.runtime.virtual`). Reads headers only; no tensor bytes move
until a plan's tensors are written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, Keys

from . import draft_vocab
from .draft_head import draft_head_tensors, keeps_type, lm_head, parse_draft_type
from .errors import CompatibilityError, GgufMtpError, MissingTensorError, UnsupportedError
from .ggml_types import MTP_TYPES, can_decode, choose_type, dequantize, encode, parse_type
from .ggufio.format import KV
from .ggufio.keys import K_RECURRENT_LAYERS, K_SHARED_TARGET_TENSORS, arch_key
from .ggufio.model import GGUFModel, Tensor
from .ggufio.shape import ggml_shape, same_ggml_shape
from .ggufio.validate import LLAMA_MAX_LAYERS, check_tensor_types
from .ggufio.writer import OutTensor, Progress, copy_tensor, write_all
from .layout import (
    MODEL_TENSORS,
    OUTPUT,
    TOKEN_EMBD,
    Layout,
    block_index,
    block_parts,
    has_trunk_blocks,
    renumber_block,
    sidecar_layout,
)

__all__ = ["Head", "find_head", "require_head", "check_compatible", "GraftPlan", "plan_graft",
           "head_tensor", "per_layer_keys", "with_array", "COMPAT_KEYS"]

#: hparams a head and its target must share (beside the vocabulary and tensor shapes)
COMPAT_KEYS = (
    Keys.LLM.EMBEDDING_LENGTH, Keys.Attention.HEAD_COUNT, Keys.Attention.HEAD_COUNT_KV, Keys.Attention.KEY_LENGTH,
    Keys.Attention.VALUE_LENGTH, Keys.Attention.LAYERNORM_RMS_EPS, Keys.Rope.DIMENSION_COUNT, Keys.Rope.FREQ_BASE,
    Keys.LLM.EXPERT_COUNT, Keys.LLM.EXPERT_USED_COUNT, Keys.LLM.EXPERT_FEED_FORWARD_LENGTH,
    Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, Keys.LLM.FEED_FORWARD_LENGTH,
)
#: arrays whose length is fixed by the format, never per-layer (even when it happens to equal block_count)
FIXED_LENGTH_ARRAYS = (Keys.Rope.DIMENSION_SECTIONS,)
#: value of a per-layer array for an MTP layer when the head's file does not say
MTP_LAYER_DEFAULTS = {K_RECURRENT_LAYERS: False}


@dataclass(frozen=True)
class Head:
    """The MTP blocks of a model file."""

    model: GGUFModel
    n_trunk: int
    n_mtp: int
    tensors: list[Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.info.nbytes for t in self.tensors)

    @property
    def sidecar(self) -> Layout | None:
        """The sidecar layout of the head's file (:func:`gguf_mtp.layout.sidecar_layout`), None for a model."""
        return sidecar_layout(self.model.tensors.keys(), self.n_trunk)


def find_head(m: GGUFModel) -> Head | None:
    """The MTP blocks of ``m`` (``nextn_predict_layers`` of them after the trunk), or None when it has no head."""
    n_mtp = int(m.arch_get(Keys.LLM.NEXTN_PREDICT_LAYERS, 0) or 0)
    if n_mtp <= 0:
        return None
    n_trunk = int(m.arch_get(Keys.LLM.BLOCK_COUNT, 0) or 0) - n_mtp
    ts = [t for name, t in m.tensors.items() if (b := block_index(name)) is not None and b >= n_trunk]
    if not ts:
        raise GgufMtpError(f"{m.path}: nextn_predict_layers={n_mtp} but the file has no MTP block tensors "
                           f"(blk.{n_trunk}.*); the file is inconsistent")
    return Head(m, n_trunk, n_mtp, ts)


def require_head(m: GGUFModel, role: str) -> Head:
    """:func:`find_head`, or an error naming ``role`` (SOURCE, TARGET) when ``m`` has none."""
    head = find_head(m)
    if head is None:
        raise MissingTensorError(f"{m.path}: {role} has no MTP head ({m.arch}.nextn_predict_layers is absent); "
                                 "use a bundled model or an MTP sidecar")
    return head


def per_layer_keys(m: GGUFModel, block_count: int) -> set[str]:
    """Metadata arrays with one entry per block (llama.cpp's get_key_or_arr keys)."""
    pre = m.arch + "."
    fixed = {arch_key(t, m.arch) for t in FIXED_LENGTH_ARRAYS}
    return {k for k, kv in m.kv.items() if k.startswith(pre) and k not in fixed and kv.vtype == GGUFValueType.ARRAY
            and kv.item_type != GGUFValueType.STRING and len(kv.value) == block_count}


def with_array(kv: KV, values: list[object]) -> KV:
    if kv.item_type is None:
        raise ValueError(f"{kv.key} is not an array")
    return KV.array(kv.key, kv.item_type, values)


# -- compatibility ----------------------------------------------------------------------------
def check_compatible(head: Head, target: GGUFModel) -> None:
    """Refuse a graft when the head was not made for ``target``'s model, saying what differs."""
    src = head.model
    diffs: list[str] = []
    if src.arch != target.arch:
        raise CompatibilityError(f"{src.path} is {src.arch!r} but {target.path} is {target.arch!r}; "
                                 "a head only fits a model of the same architecture")
    for tmpl in COMPAT_KEYS:
        a, b = src.arch_get(tmpl), target.arch_get(tmpl)
        if a is None or b is None:
            continue
        if isinstance(a, list) and isinstance(b, list):  # per-layer (mimo2, step35): the layers both describe
            n = min(head.n_trunk, len(b))
            a, b = a[:n], b[:n]
        if isinstance(a, float) or isinstance(b, float):
            same = np.float32(a) == np.float32(b)
        else:
            same = a == b
        if not same:
            diffs.append(f"{arch_key(tmpl, target.arch).split('.', 1)[1]} {b} (target) vs {a} (head)")
    ta, tb = src.get(Keys.Tokenizer.LIST), target.get(Keys.Tokenizer.LIST)
    if ta is not None and tb is not None:
        if len(ta) != len(tb):
            diffs.append(f"vocabulary {len(tb)} tokens (target) vs {len(ta)} (head)")
        elif ta != tb:
            first = next(i for i, (x, y) in enumerate(zip(ta, tb)) if x != y)
            diffs.append(f"token {first} is {tb[first]!r} (target) vs {ta[first]!r} (head)")
    # each head tensor must have the shape of the target's tensor of the same kind
    # (several shapes per kind where layer types differ, e.g. step35's sliding-window layers have more heads)
    # compared as ggml compares them: llama.cpp's converter writes [n, 1] where llama-quantize writes [n]
    by_suffix: dict[str, list[tuple[int, ...]]] = {}
    for name, t in target.tensors.items():
        if (parts := block_parts(name)) is not None:
            by_suffix.setdefault(parts[1], []).append(ggml_shape(t.info.shape))
    for t in head.tensors:
        parts = block_parts(t.name)
        if parts and parts[1] in by_suffix and ggml_shape(t.info.shape) not in by_suffix[parts[1]]:
            diffs.append(f"{parts[1]} shape {list(by_suffix[parts[1]][0])} (target) vs "
                         f"{list(ggml_shape(t.info.shape))} (head)")
            break
    for name in (TOKEN_EMBD, OUTPUT):
        if name in src.tensors and name in target.tensors and \
                not same_ggml_shape(src.tensors[name].info.shape, target.tensors[name].info.shape):
            diffs.append(f"{name} shape {list(ggml_shape(target.tensors[name].info.shape))} (target) vs "
                         f"{list(ggml_shape(src.tensors[name].info.shape))} (head)")
    # model-level tensors (rope_freqs): a self-contained head carries its own, a head-only one lists what it borrows
    head_only = TOKEN_EMBD not in src.tensors
    borrowed = src.arch_get(K_SHARED_TARGET_TENSORS)
    for name in MODEL_TENSORS:
        if head_only and not isinstance(borrowed, list):
            break  # an unmarked head-only file says nothing about them
        has = name in borrowed if head_only else name in src.tensors
        b = target.tensors.get(name)
        if has != (b is not None):
            said = ("borrowed" if has else "not used") if head_only else ("present" if has else "absent")
            diffs.append(f"{name} {'absent' if b is None else 'present'} (target) vs {said} (head)")
        elif (has and not head_only and b is not None
              and src.tensors[name].file.read_tensor_bytes(name) != b.file.read_tensor_bytes(name)):
            diffs.append(f"{name} values differ (RoPE scaling)")  # a few hundred bytes
    if diffs:
        raise CompatibilityError(f"{src.path} does not fit {target.path}: " + "; ".join(diffs)
                                 + ". A head only fits the model it was trained with")


# -- the graft plan ---------------------------------------------------------------------------
def _requant(t: Tensor, ggml_type: int, name: str | None = None) -> OutTensor:
    info = t.info

    def write(fh: BinaryIO, progress: Progress) -> None:
        x = dequantize(t.file.read_tensor_bytes(info.name), info.ggml_type, info.shape)
        write_all(fh, encode(x.reshape(-1), ggml_type))
        progress(info.nbytes)

    return OutTensor(name or info.name, info.shape, ggml_type, write)


def head_tensor(t: Tensor, mtp_type: GGMLQuantizationType | None, name: str | None = None) -> OutTensor:
    """A head tensor, byte-copied, or re-encoded to ``mtp_type`` (norms and 1-D tensors stay F32; a quantized draft
    head keeps its type, which only ``--draft-head-type`` changes)."""
    want = None if mtp_type is None or keeps_type(t) else choose_type(t.name, t.info.shape, mtp_type)
    if want is None or want == t.info.ggml_type:
        return copy_tensor(t, name)
    if not can_decode(t.info.ggml_type):
        raise UnsupportedError(f"{t.file.path}: tensor {t.name!r} is {t.info.type_name}, which gguf-mtp cannot "
                               "decode to re-quantize; drop --mtp-type to copy it as is")
    return _requant(t, want, name)


@dataclass
class GraftPlan:
    """Metadata and tensors of TARGET with SOURCE's head, ready to write (or to serve, see runtime.virtual)."""

    kvs: list[KV]
    groups: list[list[OutTensor]]  # one list per output shard
    alignment: int
    source: GGUFModel
    target: GGUFModel
    notes: list[str]


def plan_graft(source: str | os.PathLike[str] | GGUFModel, target: str | os.PathLike[str] | GGUFModel, *,
               replace: bool = False, mtp_type: str | None = None, draft_head_type: str | None = None) -> GraftPlan:
    """Check compatibility and compute the grafted model's metadata and tensor list (no I/O beyond headers).

    ``draft_head_type``: give the head a draft LM head of that type (see :mod:`gguf_mtp.draft_head`), made from
    its own one if it has one, else from SOURCE's LM head, else TARGET's."""
    src = source if isinstance(source, GGUFModel) else GGUFModel(source)
    tgt = target if isinstance(target, GGUFModel) else GGUFModel(target)
    head = require_head(src, "SOURCE")
    check_tensor_types(src.path, ((t.name, t.info.ggml_type) for t in head.tensors), "SOURCE")
    notes: list[str] = []
    old = find_head(tgt)
    tgt_bc = int(tgt.arch_get(Keys.LLM.BLOCK_COUNT, 0) or 0)
    tgt_trunk = old.n_trunk if old else tgt_bc
    if not has_trunk_blocks(tgt.tensors, tgt_trunk):
        raise GgufMtpError(f"{tgt.path}: TARGET is an MTP sidecar, not a model; graft onto a model file")
    if old is not None and not replace:
        raise GgufMtpError(f"{tgt.path}: TARGET already has an MTP head ({old.n_mtp} layer); pass --replace to "
                           "swap it, or strip it first")
    check_compatible(head, tgt)
    new_bc = tgt_trunk + head.n_mtp
    if new_bc > LLAMA_MAX_LAYERS:
        raise UnsupportedError(f"{tgt.path}: {tgt_trunk} trunk layers + {head.n_mtp} MTP layers from {src.path} make "
                               f"{new_bc} blocks, more than llama.cpp's {LLAMA_MAX_LAYERS}")
    if tgt_trunk != head.n_trunk:
        notes.append(f"head renumbered from blk.{head.n_trunk} to blk.{tgt_trunk} (target has {tgt_trunk} trunk "
                     f"layers, the head's model {head.n_trunk})")
    a = tgt.arch
    bc_key, nextn_key = arch_key(Keys.LLM.BLOCK_COUNT, a), arch_key(Keys.LLM.NEXTN_PREDICT_LAYERS, a)
    src_per_layer = per_layer_keys(src, head.n_trunk + head.n_mtp)
    # an array is per-layer when its length follows block_count in both files
    tgt_per_layer = {k for k in per_layer_keys(tgt, tgt_bc)
                     if k in src_per_layer or k not in src.kv or src.kv[k].vtype != GGUFValueType.ARRAY}
    nextn_kv = src.kv[arch_key(Keys.LLM.NEXTN_PREDICT_LAYERS, src.arch)]
    kvs: list[KV] = []
    for kv in tgt.model_kvs():
        if kv.key in (nextn_key, arch_key(K_SHARED_TARGET_TENSORS, a)):
            continue
        if kv.key == bc_key:
            kv = KV(kv.key, kv.vtype, new_bc)
        elif kv.key in tgt_per_layer:
            kv = with_array(kv, kv.scalar()[:tgt_trunk] + _head_entries(kv.key, src, head, src_per_layer, a))
        kvs.append(kv)
        if kv.key == bc_key:
            kvs.append(KV(nextn_key, nextn_kv.vtype, head.n_mtp))
    if nextn_key not in {kv.key for kv in kvs}:
        kvs.append(KV(nextn_key, nextn_kv.vtype, head.n_mtp))
    # the draft vocabulary belongs to the head: SOURCE's, checked against the vocabulary it now serves
    kvs = draft_vocab.apply(kvs, draft_vocab.of(src.model_kvs(), src.path), None, None, tgt.path)
    draft_vocab.of(kvs, tgt.path)

    mt = parse_type(mtp_type, "--mtp-type", choices=MTP_TYPES) if mtp_type else None
    dt = parse_draft_type(draft_head_type) if draft_head_type else None
    drop = {t.name for t in old.tensors} if old else set()
    groups = [[copy_tensor(Tensor(i, s)) for i in s.tensors.values() if i.name not in drop] for s in tgt.shards]
    shift = tgt_trunk - head.n_trunk
    drafts: list[OutTensor] = []
    replaced: set[str] = set()
    if dt is not None:
        drafts, replaced = draft_head_tensors(src, head.tensors, head.n_trunk, head.n_mtp, dt,
                                              lm=lm_head(src) or lm_head(tgt), shift=shift)
    groups[-1].extend(head_tensor(t, mt, renumber_block(t.name, shift)) for t in head.tensors
                      if t.name not in replaced)
    groups[-1].extend(drafts)
    return GraftPlan(kvs, groups, tgt.alignment, src, tgt, notes)


def _head_entries(key: str, src: GGUFModel, head: Head, src_per_layer: set[str], arch: str) -> list[object]:
    """Values of per-layer array ``key`` for the grafted MTP layers (both files share the architecture)."""
    if key in src_per_layer:
        return src.kv[key].scalar()[head.n_trunk: head.n_trunk + head.n_mtp]
    scalar = src.get(key)
    if scalar is not None and not isinstance(scalar, list):
        return [scalar] * head.n_mtp
    for tmpl, value in MTP_LAYER_DEFAULTS.items():
        if key == arch_key(tmpl, arch):
            return [value] * head.n_mtp
    raise CompatibilityError(f"{src.path}: TARGET has the per-layer array {key!r} but the head's file does not "
                             "say its value for the MTP layers; graft from a bundled model or a sidecar that has it")
