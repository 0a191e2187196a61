"""GGUF -> GGUF: take the MTP head out (extract), drop it (strip), or put it on another quant (graft).

What a head is, whether it fits a target and how a graft is laid out live in :mod:`gguf_mtp.head`; this module
writes the results.

Tensor bytes are copied exactly (any ggml type, including ones we cannot decode); only the bytes that end
up in the output are read. Split sets are accepted everywhere and graft/strip keep the target's sharding.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGUFValueType, Keys

from . import draft_vocab as draft_vocab_mod
from .draft_head import draft_head_tensors, is_draft_head, parse_draft_type
from .errors import GgufMtpError, MissingTensorError
from .ggml_types import MTP_TYPES, file_type_name, parse_type, type_name
from .ggufio.atomic import atomic_paths, check_output, scratch_path
from .ggufio.format import KV
from .ggufio.keys import K_SHARED_TARGET_TENSORS, arch_key
from .ggufio.model import GGUFModel, Tensor, model_stem, split_path, split_prefix
from .ggufio.validate import check_tensor_types
from .ggufio.writer import OutTensor, copy_tensor, write_gguf
from .head import (
    GraftPlan,
    Head,
    check_compatible,
    find_head,
    head_tensor,
    per_layer_keys,
    plan_graft,
    require_head,
    with_array,
)
from .layout import (
    EMBEDDING_TENSORS,
    MODEL_TENSORS,
    OUTPUT_NORM,
    TOKEN_EMBD,
    Layout,
    borrowed_tensors,
    default_name,
    graft_name,
    sidecar_owner,
)
from .progress import Progress as Bar


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
                shard_kvs += [KV.u16(Keys.Split.LLM_KV_SPLIT_NO, i), KV.u16(Keys.Split.LLM_KV_SPLIT_COUNT, len(groups)),
                              KV.i32(Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, n_total)]
            write_gguf(tmp, shard_kvs, group, alignment=alignment, progress=bar.advance, on_tensor=bar.tensor_done)
    bar.close()
    return paths, total


def _header_bytes(m: GGUFModel) -> int:
    return sum(s.data_offset for s in m.shards)


# -- the operations ---------------------------------------------------------------------------
def _open(path: str | os.PathLike[str]) -> GGUFModel:
    return GGUFModel(path)


def _check_types(m: GGUFModel, names: list[str], role: str) -> None:
    """A head is only copied or grafted when llama.cpp can run it (a norm stored as Q4_K aborts its first decode)."""
    check_tensor_types(m.path, ((n, m.tensors[n].info.ggml_type) for n in names), role)


def extract(source: str | os.PathLike[str], outfile: str | os.PathLike[str] | None = None, *,
            head_only: bool = False, mtp_type: str | None = None, draft_head_type: str | None = None,
            force: bool = False, progress: bool = True, draft_vocab: int | None = None,
            draft_vocab_from: str | os.PathLike[str] | None = None) -> SurgeryResult:
    """Write the MTP head of ``source`` (bundled model or sidecar, single file or split set) as a sidecar.

    The self-contained sidecar also carries ``token_embd``/``output_norm``/``output`` (stock llama.cpp can
    load it); ``head_only`` leaves them out and marks the file as borrowing them from its target.
    ``draft_head_type`` adds a draft LM head of that type (see :mod:`gguf_mtp.draft_head`). The source's draft
    vocabulary travels with the head; ``draft_vocab`` writes a new one (see :mod:`gguf_mtp.draft_vocab`).

    Example:
        >>> extract("Qwen3.5-27B-Q4_K_M.gguf")     # -> Qwen3.5-27B-Q4_K_M-MTP-Q8_0.gguf   # doctest: +SKIP
    """
    t0 = time.perf_counter()
    draft_vocab_mod.check_n(draft_vocab, draft_vocab_from)
    m = _open(source)
    head = require_head(m, "SOURCE")
    _check_types(m, [t.name for t in head.tensors] + [n for n in EMBEDDING_TENSORS + MODEL_TENSORS if n in m.tensors],
                 "SOURCE")
    marker = arch_key(K_SHARED_TARGET_TENSORS, m.arch)
    mt = parse_type(mtp_type, "--mtp-type", choices=MTP_TYPES) if mtp_type else None
    drafts: list[OutTensor] = []
    replaced: set[str] = set()
    if draft_head_type:
        drafts, replaced = draft_head_tensors(m, head.tensors, head.n_trunk, head.n_mtp,
                                              parse_draft_type(draft_head_type))
    tensors = [head_tensor(t, mt) for t in head.tensors if t.name not in replaced] + drafts
    if not head_only:
        missing = [n for n in (TOKEN_EMBD, OUTPUT_NORM) if n not in m.tensors]
        if missing:
            raise MissingTensorError(f"{m.path}: has no {missing[0]} (a head-only sidecar?); extract with "
                                     "--head-only, or from a bundled model")
        tensors = [copy_tensor(m.tensors[n]) for n in EMBEDDING_TENSORS + MODEL_TENSORS if n in m.tensors] + tensors
    kvs = [kv for kv in m.model_kvs() if kv.key != marker]
    if head_only:
        kvs.append(KV.array(marker, GGUFValueType.STRING, borrowed_tensors(m.tensors)))
    kvs = draft_vocab_mod.apply(kvs, draft_vocab_mod.of(kvs, m.path), draft_vocab, draft_vocab_from, m.path)
    stem = model_stem(m.path) if head.sidecar is None else sidecar_owner(model_stem(m.path))
    out = Path(outfile) if outfile else Path.cwd() / default_name(
        stem, Layout.HEAD_ONLY if head_only else Layout.MTP_ONLY,
        file_type_name(m.get("general.file_type")), mt.name if mt else _head_type(head.tensors))
    paths, written = _write(out, kvs, [tensors], alignment=m.alignment, force=force,
                            inputs=m.files, label=f"extract {out.name}", progress=progress)
    return SurgeryResult("extract", paths, len(tensors), _header_bytes(m) + written,
                         sum(p.stat().st_size for p in paths), time.perf_counter() - t0)


def _head_type(tensors: list[Tensor]) -> str | None:
    """The type of most of the head's matrices (a draft LM head aside): the one its sidecar's name shows."""
    types = [type_name(t.info.ggml_type) for t in tensors if len(t.info.shape) > 1 and not is_draft_head(t.name)]
    return max(sorted(set(types)), key=types.count) if types else None


def strip(source: str | os.PathLike[str], outfile: str | os.PathLike[str] | None = None, *,
          force: bool = False, progress: bool = True) -> SurgeryResult:
    """Write ``source`` without its MTP head (block_count, nextn key and per-layer arrays fixed).

    Example:
        >>> strip("Qwen3.5-27B-Q8_0.gguf", "Qwen3.5-27B-Q8_0-trunk.gguf")   # doctest: +SKIP
    """
    t0 = time.perf_counter()
    m = _open(source)
    head = require_head(m, "SOURCE")
    if head.sidecar is not None:
        raise GgufMtpError(f"{m.path}: is an MTP sidecar, not a model; there is no trunk to keep")
    bc_key, nextn_key = arch_key(Keys.LLM.BLOCK_COUNT, m.arch), arch_key(Keys.LLM.NEXTN_PREDICT_LAYERS, m.arch)
    per_layer = per_layer_keys(m, head.n_trunk + head.n_mtp)
    kvs: list[KV] = []
    for kv in m.model_kvs():
        if kv.key in (nextn_key, arch_key(K_SHARED_TARGET_TENSORS, m.arch), draft_vocab_mod.KEY):
            continue
        if kv.key == bc_key:
            kv = KV(kv.key, kv.vtype, head.n_trunk)
        elif kv.key in per_layer:
            kv = with_array(kv, kv.scalar()[: head.n_trunk])
        kvs.append(kv)
    drop = {t.name for t in head.tensors}
    groups = [[copy_tensor(Tensor(i, s)) for i in s.tensors.values() if i.name not in drop] for s in m.shards]
    out = Path(outfile) if outfile else Path.cwd() / default_name(model_stem(m.path), Layout.TRUNK_ONLY)
    paths, written = _write(out, kvs, groups, alignment=m.alignment, force=force,
                            inputs=m.files, label=f"strip {out.name}", progress=progress)
    return SurgeryResult("strip", paths, sum(len(g) for g in groups), _header_bytes(m) + written,
                         sum(p.stat().st_size for p in paths), time.perf_counter() - t0)


def graft(source: str | os.PathLike[str], target: str | os.PathLike[str],
          outfile: str | os.PathLike[str] | None = None, *, replace: bool = False, mtp_type: str | None = None,
          draft_head_type: str | None = None, force: bool = False, progress: bool = True,
          draft_vocab: int | None = None, draft_vocab_from: str | os.PathLike[str] | None = None) -> SurgeryResult:
    """Put the MTP head of ``source`` (bundled model or sidecar) onto ``target`` (a model without one).

    ``target``'s metadata is kept (file type, quantization and imatrix keys, chat template, names); only
    block_count, nextn_predict_layers and per-layer arrays change; the head's blocks are renumbered to
    follow ``target``'s trunk. A split target gives a split output with the head in the last shard.
    ``draft_head_type`` gives the head a draft LM head of that type (see :mod:`gguf_mtp.draft_head`). The
    draft vocabulary is ``source``'s (it travels with the head), or a new one of ``draft_vocab`` tokens.

    Example:
        >>> graft("Qwen3.5-27B-Q8_0-MTP.gguf", "Qwen3.5-27B-UD-Q4_K_XL.gguf",  # doctest: +SKIP
        ...       "Qwen3.5-27B-Q4_K_XL-MTP-bundled.gguf")
    """
    t0 = time.perf_counter()
    draft_vocab_mod.check_n(draft_vocab, draft_vocab_from)
    plan = plan_graft(source, target, replace=replace, mtp_type=mtp_type, draft_head_type=draft_head_type)
    src, tgt = plan.source, plan.target
    # (the plan carries SOURCE's draft vocabulary; a new one replaces it)
    kvs = plan.kvs if draft_vocab is None else draft_vocab_mod.apply(plan.kvs, None, draft_vocab, draft_vocab_from,
                                                                     tgt.path)
    out = Path(outfile) if outfile else Path.cwd() / graft_name(model_stem(tgt.path))
    inputs = tgt.files + src.files
    paths, written = _write(out, kvs, plan.groups, alignment=plan.alignment, force=force, inputs=inputs,
                            label=f"graft {out.name}", progress=progress)
    return SurgeryResult("graft", paths, sum(len(g) for g in plan.groups),
                         _header_bytes(tgt) + _header_bytes(src) + written,
                         sum(p.stat().st_size for p in paths), time.perf_counter() - t0, plan.notes)


def add_draft_head(source: str | os.PathLike[str], outfile: str | os.PathLike[str], draft_head_type: str | None, *,
                   made_from: str | os.PathLike[str] | None = None, force: bool = False,
                   inputs: list[Path] | None = None, progress: bool = True,
                   draft_vocab: np.ndarray | None = None) -> SurgeryResult:
    """Write ``source`` with a draft LM head of ``draft_head_type`` in its MTP layers (replacing any it has;
    None: the tensors as they are), and with ``draft_vocab`` as its draft vocabulary when given.

    The heads are made from ``made_from``'s (default: ``source``'s) own heads or LM head: ``quantize`` passes its
    unquantized input, so the draft head is one rounding away from the original, not two. ``inputs``: every file
    the caller read, none of which the output may be.
    """
    t0 = time.perf_counter()
    m = _open(source)
    base = _open(made_from) if made_from is not None else m
    head = require_head(base, "SOURCE")
    drafts: list[OutTensor] = []
    if draft_head_type is not None:
        drafts, _ = draft_head_tensors(base, head.tensors, head.n_trunk, head.n_mtp, parse_draft_type(draft_head_type))
    if require_head(m, "SOURCE").n_trunk != head.n_trunk:
        raise GgufMtpError(f"{m.path}: has another trunk than {base.path}; make the draft head from the same model")
    new = {t.name for t in drafts}
    groups = [[copy_tensor(Tensor(i, s)) for i in s.tensors.values() if i.name not in new] for s in m.shards]
    groups[-1].extend(drafts)
    out = Path(outfile)
    kvs = m.model_kvs() if draft_vocab is None else draft_vocab_mod.apply(m.model_kvs(), draft_vocab, None, None,
                                                                          m.path)
    paths, written = _write(out, kvs, groups, alignment=m.alignment, force=force,
                            inputs=(inputs or []) + m.files + base.files, label=f"draft head {out.name}",
                            progress=progress)
    return SurgeryResult("draft-head", paths, sum(len(g) for g in groups), _header_bytes(m) + written,
                         sum(p.stat().st_size for p in paths), time.perf_counter() - t0)


def graft_from_hub(repo: str, target: str | os.PathLike[str], outfile: str | os.PathLike[str] | None = None, *,
                   replace: bool = False, mtp_type: str | None = None, draft_head_type: str | None = None,
                   force: bool = False, revision: str | None = None, force_download: bool = False,
                   progress: bool = True, on_note: Callable[[str], None] | None = None, draft_vocab: int | None = None,
                   draft_vocab_from: str | os.PathLike[str] | None = None) -> SurgeryResult:
    """Fetch the MTP head of Hub checkpoint ``repo`` (only its byte ranges) and graft it onto ``target``.

    The head is converted (at ``mtp_type``, q8_0 by default) to a scratch head-only sidecar next to the output,
    removed on any exit. ``on_note`` hears the fetch's and the graft's notes as they come (they are in the
    result's ``notes`` too).

    Example:
        >>> graft_from_hub("Qwen/Qwen3.5-27B", "Qwen3.5-27B-Q4_K_M.gguf")   # doctest: +SKIP
    """
    from .convert import convert  # the converter is only needed here: keep it out of surgery's imports

    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        if on_note is not None:
            on_note(text)

    out = Path(outfile) if outfile else Path.cwd() / graft_name(model_stem(Path(target)))
    if draft_head_type:
        parse_draft_type(draft_head_type)  # a bad name fails before any download
    draft_vocab_mod.check_n(draft_vocab, draft_vocab_from)
    check_output(out, force=force, inputs=[Path(target)])  # before any download
    # the fetched head is an intermediate named like the output's temp files: removed on any exit,
    # SIGTERM included, and by the next run after a SIGKILL
    with scratch_path(out) as head:
        r = convert(repo, outfile=head, layout="head-only", mtp_type=mtp_type or "q8_0", force=True,
                    revision=revision, progress=progress, force_download=force_download)
        for text in r.notes:
            note(text)
        try:
            g = graft(head, target, out, replace=replace, draft_head_type=draft_head_type, force=force,
                      draft_vocab=draft_vocab, draft_vocab_from=draft_vocab_from,
                      progress=progress)
        except GgufMtpError as e:  # name the repo, not the scratch file
            raise type(e)(str(e).replace(str(head), f"{repo} (its MTP head)")) from None
    for text in g.notes:
        note(text)
    g.notes = notes
    return g


# Head, find_head, check_compatible, plan_graft and GraftPlan are gguf_mtp.head's, re-exported (public API)
__all__ = ["extract", "strip", "graft", "graft_from_hub", "add_draft_head", "plan_graft",
           "GraftPlan", "check_compatible", "find_head",
           "Head", "SurgeryResult", "type_name"]
