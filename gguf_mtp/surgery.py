"""GGUF -> GGUF: take the MTP head out (extract), drop it (strip), or put it on another quant (graft).

Tensor bytes are copied exactly (any ggml type, including ones we cannot decode); only the bytes that end
up in the output are read. Split sets are accepted everywhere and graft/strip keep the target's sharding.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from .errors import CompatibilityError, GgufMtpError, MissingTensorError, UnsupportedError
from .ggml_types import can_decode, choose_type, dequantize, encode, type_name
from .ggml_types import parse_type as parse_outtype
from .ggufio import keys as K
from .ggufio.atomic import atomic_paths, check_output
from .ggufio.format import KV
from .ggufio.model import GGUFModel, Tensor, model_stem, split_path, split_prefix
from .ggufio.shape import ggml_shape, same_ggml_shape
from .ggufio.validate import LLAMA_MAX_LAYERS, check_tensor_types
from .ggufio.writer import OutTensor, Progress, copy_range, write_all, write_gguf
from .layout import EMBEDDING_TENSORS, MODEL_TENSORS, block_index, borrowed_tensors
from .progress import Progress as Bar

_BLK = re.compile(r"^blk\.(\d+)\.(.*)$")

#: hparams a head and its target must share (beside the vocabulary and tensor shapes)
COMPAT_KEYS = (
    K.K_EMBEDDING_LENGTH, K.K_HEAD_COUNT, K.K_HEAD_COUNT_KV, K.K_KEY_LENGTH, K.K_VALUE_LENGTH, K.K_RMS_EPS,
    K.K_ROPE_DIM_COUNT, K.K_ROPE_FREQ_BASE, K.K_EXPERT_COUNT, K.K_EXPERT_USED_COUNT, K.K_EXPERT_FF_LENGTH,
    K.K_EXPERT_SHARED_FF_LENGTH, K.K_FEED_FORWARD_LENGTH,
)
#: arrays whose length is fixed by the format, never per-layer (even when it happens to equal block_count)
FIXED_LENGTH_ARRAYS = (K.K_ROPE_DIM_SECTIONS,)
#: value of a per-layer array for an MTP layer when the head's file does not say
MTP_LAYER_DEFAULTS = {K.K_RECURRENT_LAYERS: False}


@dataclass
class SurgeryResult:
    """What an operation wrote and how much it read."""

    op: str
    paths: list[Path]
    n_tensors: int
    bytes_read: int
    bytes_written: int
    seconds: float
    notes: list[str] = field(default_factory=list)


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


def find_head(m: GGUFModel) -> Head | None:
    n_mtp = int(m.arch_get(K.K_NEXTN, 0) or 0)
    if n_mtp <= 0:
        return None
    n_trunk = int(m.arch_get(K.K_BLOCK_COUNT, 0) or 0) - n_mtp
    ts = [t for name, t in m.tensors.items() if (b := block_index(name)) is not None and b >= n_trunk]
    if not ts:
        raise GgufMtpError(f"{m.path}: nextn_predict_layers={n_mtp} but the file has no MTP block tensors "
                           f"(blk.{n_trunk}.*); the file is inconsistent")
    return Head(m, n_trunk, n_mtp, ts)


def _has_trunk(m: GGUFModel, n_trunk: int) -> bool:
    return any((b := block_index(n)) is not None and b < n_trunk for n in m.tensors)


def _per_layer_keys(m: GGUFModel, block_count: int) -> set[str]:
    """Metadata arrays with one entry per block (llama.cpp's get_key_or_arr keys)."""
    pre = m.arch + "."
    fixed = {K.arch_key(t, m.arch) for t in FIXED_LENGTH_ARRAYS}
    return {k for k, kv in m.kv.items() if k.startswith(pre) and k not in fixed and kv.vtype == GGUFValueType.ARRAY
            and kv.item_type != GGUFValueType.STRING and len(kv.value) == block_count}


def _with_array(kv: KV, values: list[object]) -> KV:
    return KV.array(kv.key, kv.item_type, values)  # type: ignore[arg-type]


# -- tensors to write -------------------------------------------------------------------------
def _copy(t: Tensor, name: str | None = None) -> OutTensor:
    info, path = t.info, t.file.path

    def write(fh: BinaryIO, progress: Progress) -> None:
        copy_range(path, info.offset, info.nbytes, fh, progress)

    return OutTensor(name or info.name, info.shape, info.ggml_type, write, source=(path, info.offset))


def _requant(t: Tensor, ggml_type: int, name: str | None = None) -> OutTensor:
    info = t.info

    def write(fh: BinaryIO, progress: Progress) -> None:
        x = dequantize(t.file.read_tensor_bytes(info.name), info.ggml_type, info.shape)
        write_all(fh, encode(x.reshape(-1), ggml_type))
        progress(info.nbytes)

    return OutTensor(name or info.name, info.shape, ggml_type, write)


def _head_tensor(t: Tensor, mtp_type: GGMLQuantizationType | None, name: str | None = None) -> OutTensor:
    """A head tensor, byte-copied, or re-encoded to ``mtp_type`` (norms and 1-D tensors stay F32)."""
    want = None if mtp_type is None else choose_type(t.name, t.info.shape, mtp_type)
    if want is None or want == t.info.ggml_type:
        return _copy(t, name)
    if not can_decode(t.info.ggml_type):
        raise UnsupportedError(f"{t.file.path}: tensor {t.name!r} is {t.info.type_name}, which gguf-mtp cannot "
                               "decode to re-quantize; drop --mtp-type to copy it as is")
    return _requant(t, want, name)


# -- writing one file or a split set ----------------------------------------------------------
def _output_paths(out: Path, n: int) -> list[Path]:
    if n == 1:
        return [out]
    prefix = split_prefix(out) or Path(str(out).removesuffix(".gguf"))
    return [split_path(prefix, i, n) for i in range(n)]


def _write(out: Path, kvs: list[KV], groups: list[list[OutTensor]], *, alignment: int, force: bool,
           inputs: list[Path], label: str, progress: bool) -> tuple[list[Path], int]:
    groups = [groups[0]] + [g for g in groups[1:] if g]
    paths = _output_paths(out, len(groups))
    for p in paths:
        check_output(p, force=force, inputs=inputs)
    total = sum(t.nbytes for g in groups for t in g)
    bar = Bar(label, total, sum(len(g) for g in groups), enabled=progress)
    n_total = sum(len(g) for g in groups)
    with atomic_paths(paths, force=force) as temps:
        for i, (tmp, group) in enumerate(zip(temps, groups)):
            shard_kvs = list(kvs) if i == 0 else []
            if len(groups) > 1:
                shard_kvs += [KV.u16(K.SPLIT_NO, i), KV.u16(K.SPLIT_COUNT, len(groups)),
                              KV.i32(K.SPLIT_TENSORS_COUNT, n_total)]
            write_gguf(tmp, shard_kvs, group, alignment=alignment, progress=bar.advance, on_tensor=bar.tensor_done)
    bar.close()
    return paths, total


def _header_bytes(m: GGUFModel) -> int:
    return sum(s.data_offset for s in m.shards)


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
            diffs.append(f"{K.arch_key(tmpl, target.arch).split('.', 1)[1]} {b} (target) vs {a} (head)")
    ta, tb = src.get(K.TOK_TOKENS), target.get(K.TOK_TOKENS)
    if ta is not None and tb is not None:
        if len(ta) != len(tb):  # type: ignore[arg-type]
            diffs.append(f"vocabulary {len(tb)} tokens (target) vs {len(ta)} (head)")  # type: ignore[arg-type]
        elif ta != tb:
            first = next(i for i, (x, y) in enumerate(zip(ta, tb)) if x != y)  # type: ignore[arg-type]
            diffs.append(f"token {first} is {tb[first]!r} (target) vs {ta[first]!r} (head)")  # type: ignore[index]
    # each head tensor must have the shape of the target's tensor of the same kind
    # (several shapes per kind where layer types differ, e.g. step35's sliding-window layers have more heads)
    # compared as ggml compares them: llama.cpp's converter writes [n, 1] where llama-quantize writes [n]
    by_suffix: dict[str, list[tuple[int, ...]]] = {}
    for name, t in target.tensors.items():
        m = _BLK.match(name)
        if m:
            by_suffix.setdefault(m.group(2), []).append(ggml_shape(t.info.shape))
    for t in head.tensors:
        m = _BLK.match(t.name)
        if m and m.group(2) in by_suffix and ggml_shape(t.info.shape) not in by_suffix[m.group(2)]:
            diffs.append(f"{m.group(2)} shape {list(by_suffix[m.group(2)][0])} (target) vs "
                         f"{list(ggml_shape(t.info.shape))} (head)")
            break
    for name in ("token_embd.weight", "output.weight"):
        if name in src.tensors and name in target.tensors and \
                not same_ggml_shape(src.tensors[name].info.shape, target.tensors[name].info.shape):
            diffs.append(f"{name} shape {list(ggml_shape(target.tensors[name].info.shape))} (target) vs "
                         f"{list(ggml_shape(src.tensors[name].info.shape))} (head)")
    # model-level tensors (rope_freqs): a self-contained head carries its own, a head-only one lists what it borrows
    head_only = "token_embd.weight" not in src.tensors
    borrowed = src.arch_get(K.K_SHARED_TARGET_TENSORS)
    for name in MODEL_TENSORS:
        if head_only and not isinstance(borrowed, list):
            break  # an unmarked head-only file says nothing about them
        has = name in borrowed if head_only else name in src.tensors  # type: ignore[operator]
        b = target.tensors.get(name)
        if has != (b is not None):
            said = ("borrowed" if has else "not used") if head_only else ("present" if has else "absent")
            diffs.append(f"{name} {'absent' if b is None else 'present'} (target) vs {said} (head)")
        elif has and not head_only and src.tensors[name].file.read_tensor_bytes(name) != b.file.read_tensor_bytes(name):
            diffs.append(f"{name} values differ (RoPE scaling)")  # a few hundred bytes
    if diffs:
        raise CompatibilityError(f"{src.path} does not fit {target.path}: " + "; ".join(diffs)
                                 + ". A head only fits the model it was trained with")


# -- the operations ---------------------------------------------------------------------------
def _open(path: str | os.PathLike[str]) -> GGUFModel:
    return GGUFModel(path)


def _require_head(m: GGUFModel, role: str) -> Head:
    head = find_head(m)
    if head is None:
        raise MissingTensorError(f"{m.path}: {role} has no MTP head ({m.arch}.nextn_predict_layers is absent); "
                                 "use a bundled model or an MTP sidecar")
    return head


def _check_types(m: GGUFModel, names: list[str], role: str) -> None:
    """A head is only copied or grafted when llama.cpp can run it (a norm stored as Q4_K aborts its first decode)."""
    check_tensor_types(m.path, ((n, m.tensors[n].info.ggml_type) for n in names), role)


def extract(source: str | os.PathLike[str], outfile: str | os.PathLike[str] | None = None, *,
            head_only: bool = False, mtp_type: str | None = None, force: bool = False,
            progress: bool = True) -> SurgeryResult:
    """Write the MTP head of ``source`` (bundled model or sidecar, single file or split set) as a sidecar.

    The self-contained sidecar also carries ``token_embd``/``output_norm``/``output`` (stock llama.cpp can
    load it); ``head_only`` leaves them out and marks the file as borrowing them from its target.

    Example:
        >>> extract("Qwen3.5-27B-Q4_K_M.gguf")     # -> Qwen3.5-27B-Q4_K_M-MTP.gguf   # doctest: +SKIP
    """
    t0 = time.perf_counter()
    m = _open(source)
    head = _require_head(m, "SOURCE")
    _check_types(m, [t.name for t in head.tensors] + [n for n in EMBEDDING_TENSORS + MODEL_TENSORS if n in m.tensors],
                 "SOURCE")
    marker = K.arch_key(K.K_SHARED_TARGET_TENSORS, m.arch)
    mt = parse_outtype(mtp_type, "--mtp-type") if mtp_type else None
    tensors = [_head_tensor(t, mt) for t in head.tensors]
    if not head_only:
        missing = [n for n in ("token_embd.weight", "output_norm.weight") if n not in m.tensors]
        if missing:
            raise MissingTensorError(f"{m.path}: has no {missing[0]} (a head-only sidecar?); extract with "
                                     "--head-only, or from a bundled model")
        tensors = [_copy(m.tensors[n]) for n in EMBEDDING_TENSORS + MODEL_TENSORS if n in m.tensors] + tensors
    kvs = [kv for kv in m.model_kvs() if kv.key != marker]
    if head_only:
        kvs.append(KV.array(marker, GGUFValueType.STRING, borrowed_tensors(m.tensors)))
    out = Path(outfile) if outfile else Path.cwd() / f"{model_stem(m.path)}-MTP.gguf"
    paths, written = _write(out, kvs, [tensors], alignment=m.alignment, force=force,
                            inputs=m.files, label=f"extract {out.name}", progress=progress)
    return SurgeryResult("extract", paths, len(tensors), _header_bytes(m) + written,
                         sum(p.stat().st_size for p in paths), time.perf_counter() - t0)


def strip(source: str | os.PathLike[str], outfile: str | os.PathLike[str] | None = None, *,
          force: bool = False, progress: bool = True) -> SurgeryResult:
    """Write ``source`` without its MTP head (block_count, nextn key and per-layer arrays fixed).

    Example:
        >>> strip("Qwen3.5-27B-Q8_0.gguf", "Qwen3.5-27B-Q8_0-trunk.gguf")   # doctest: +SKIP
    """
    t0 = time.perf_counter()
    m = _open(source)
    head = _require_head(m, "SOURCE")
    if not _has_trunk(m, head.n_trunk):
        raise GgufMtpError(f"{m.path}: is an MTP sidecar, not a model; there is no trunk to keep")
    bc_key, nextn_key = K.arch_key(K.K_BLOCK_COUNT, m.arch), K.arch_key(K.K_NEXTN, m.arch)
    per_layer = _per_layer_keys(m, head.n_trunk + head.n_mtp)
    kvs: list[KV] = []
    for kv in m.model_kvs():
        if kv.key == nextn_key or kv.key == K.arch_key(K.K_SHARED_TARGET_TENSORS, m.arch):
            continue
        if kv.key == bc_key:
            kv = KV(kv.key, kv.vtype, head.n_trunk)
        elif kv.key in per_layer:
            kv = _with_array(kv, kv.scalar()[: head.n_trunk])
        kvs.append(kv)
    drop = {t.name for t in head.tensors}
    groups = [[_copy(t) for t in (Tensor(i, s) for i in s.tensors.values()) if t.name not in drop] for s in m.shards]
    out = Path(outfile) if outfile else Path.cwd() / f"{model_stem(m.path)}-trunk.gguf"
    paths, written = _write(out, kvs, groups, alignment=m.alignment, force=force,
                            inputs=m.files, label=f"strip {out.name}", progress=progress)
    return SurgeryResult("strip", paths, sum(len(g) for g in groups), _header_bytes(m) + written,
                         sum(p.stat().st_size for p in paths), time.perf_counter() - t0)


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
               replace: bool = False, mtp_type: str | None = None) -> GraftPlan:
    """Check compatibility and compute the grafted model's metadata and tensor list (no I/O beyond headers)."""
    src = source if isinstance(source, GGUFModel) else _open(source)
    tgt = target if isinstance(target, GGUFModel) else _open(target)
    head = _require_head(src, "SOURCE")
    _check_types(src, [t.name for t in head.tensors], "SOURCE")
    notes: list[str] = []
    old = find_head(tgt)
    tgt_bc = int(tgt.arch_get(K.K_BLOCK_COUNT, 0) or 0)
    tgt_trunk = old.n_trunk if old else tgt_bc
    if not _has_trunk(tgt, tgt_trunk):
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
    bc_key, nextn_key = K.arch_key(K.K_BLOCK_COUNT, a), K.arch_key(K.K_NEXTN, a)
    src_per_layer = _per_layer_keys(src, head.n_trunk + head.n_mtp)
    # an array is per-layer when its length follows block_count in both files
    tgt_per_layer = {k for k in _per_layer_keys(tgt, tgt_bc)
                     if k in src_per_layer or k not in src.kv or src.kv[k].vtype != GGUFValueType.ARRAY}
    nextn_kv = src.kv[K.arch_key(K.K_NEXTN, src.arch)]
    kvs: list[KV] = []
    for kv in tgt.model_kvs():
        if kv.key in (nextn_key, K.arch_key(K.K_SHARED_TARGET_TENSORS, a)):
            continue
        if kv.key == bc_key:
            kv = KV(kv.key, kv.vtype, new_bc)
        elif kv.key in tgt_per_layer:
            kv = _with_array(kv, kv.scalar()[:tgt_trunk] + _head_entries(kv.key, src, head, src_per_layer, a))
        kvs.append(kv)
        if kv.key == bc_key:
            kvs.append(KV(nextn_key, nextn_kv.vtype, head.n_mtp))
    if nextn_key not in {kv.key for kv in kvs}:
        kvs.append(KV(nextn_key, nextn_kv.vtype, head.n_mtp))

    mt = parse_outtype(mtp_type, "--mtp-type") if mtp_type else None
    drop = {t.name for t in old.tensors} if old else set()
    groups = [[_copy(Tensor(i, s)) for i in s.tensors.values() if i.name not in drop] for s in tgt.shards]
    shift = tgt_trunk - head.n_trunk

    def renamed(name: str) -> str:
        m = _BLK.match(name)
        return f"blk.{int(m.group(1)) + shift}.{m.group(2)}" if m else name

    groups[-1].extend(_head_tensor(t, mt, renamed(t.name)) for t in head.tensors)
    return GraftPlan(kvs, groups, tgt.alignment, src, tgt, notes)


def graft(source: str | os.PathLike[str], target: str | os.PathLike[str],
          outfile: str | os.PathLike[str] | None = None, *, replace: bool = False, mtp_type: str | None = None,
          force: bool = False, progress: bool = True) -> SurgeryResult:
    """Put the MTP head of ``source`` (bundled model or sidecar) onto ``target`` (a model without one).

    ``target``'s metadata is kept (file type, quantization and imatrix keys, chat template, names); only
    block_count, nextn_predict_layers and per-layer arrays change; the head's blocks are renumbered to
    follow ``target``'s trunk. A split target gives a split output with the head in the last shard.

    Example:
        >>> graft("Qwen3.5-27B-Q8_0-MTP.gguf", "Qwen3.5-27B-UD-Q4_K_XL.gguf", "Qwen3.5-27B-Q4_K_XL-MTP-bundled.gguf")  # doctest: +SKIP
    """
    t0 = time.perf_counter()
    plan = plan_graft(source, target, replace=replace, mtp_type=mtp_type)
    src, tgt = plan.source, plan.target
    out = Path(outfile) if outfile else Path.cwd() / f"{model_stem(tgt.path)}-with-MTP.gguf"
    inputs = tgt.files + src.files
    paths, written = _write(out, plan.kvs, plan.groups, alignment=plan.alignment, force=force, inputs=inputs,
                            label=f"graft {out.name}", progress=progress)
    return SurgeryResult("graft", paths, sum(len(g) for g in plan.groups),
                         _header_bytes(tgt) + _header_bytes(src) + written,
                         sum(p.stat().st_size for p in paths), time.perf_counter() - t0, plan.notes)


def reshard(source: str | os.PathLike[str], outfile: str | os.PathLike[str], *, shards: int,
            force: bool = False, progress: bool = False) -> SurgeryResult:
    """Rewrite a model as a split set of ``shards`` files (tensors in order, sizes balanced), as gguf-split does."""
    t0 = time.perf_counter()
    m = _open(source)
    ts = [_copy(t) for t in m.tensors.values()]
    per = -(-sum(t.nbytes for t in ts) // max(1, shards))
    groups: list[list[OutTensor]] = [[]]
    acc = 0
    for t in ts:
        if acc >= per and len(groups) < shards:
            groups.append([])
            acc = 0
        groups[-1].append(t)
        acc += t.nbytes
    paths, written = _write(Path(outfile), m.model_kvs(), groups, alignment=m.alignment, force=force,
                            inputs=m.files, label="reshard", progress=progress)
    return SurgeryResult("reshard", paths, len(ts), _header_bytes(m) + written,
                         sum(p.stat().st_size for p in paths), time.perf_counter() - t0)


def _head_entries(key: str, src: GGUFModel, head: Head, src_per_layer: set[str], arch: str) -> list[object]:
    """Values of per-layer array ``key`` for the grafted MTP layers (both files share the architecture)."""
    if key in src_per_layer:
        return src.kv[key].scalar()[head.n_trunk: head.n_trunk + head.n_mtp]
    scalar = src.get(key)
    if scalar is not None and not isinstance(scalar, list):
        return [scalar] * head.n_mtp
    for tmpl, value in MTP_LAYER_DEFAULTS.items():
        if key == K.arch_key(tmpl, arch):
            return [value] * head.n_mtp
    raise CompatibilityError(f"{src.path}: TARGET has the per-layer array {key!r} but the head's file does not "
                             "say its value for the MTP layers; graft from a bundled model or a sidecar that has it")


__all__ = ["extract", "strip", "graft", "plan_graft", "GraftPlan", "check_compatible", "find_head", "SurgeryResult", "type_name"]
