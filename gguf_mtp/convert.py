"""Checkpoint -> GGUF: pick the family, plan the tensors of the requested layout, stream them to a file.

Each plan entry becomes GGUF bytes (:func:`out_tensor`): exact byte copies where nothing changes, otherwise
chunked decode -> transform -> encode on a small thread pool (numpy releases the GIL), in bounded memory."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, Keys

from . import draft_vocab as draft_vocab_mod
from .checkpoint.folder import Checkpoint
from .checkpoint.hub import looks_like_repo_id, resolve_model
from .checkpoint.shards import Ref, TensorRef
from .checkpoint.tokenizer import tokenizer_kvs
from .draft_head import OPTION as DRAFT_OPTION
from .draft_head import check_rows, draft_head_name, draft_layers, parse_draft_type
from .errors import MissingTensorError, UnsupportedError
from .families import family_class
from .families.base import Family, ModelPlan, PlannedTensor, Source
from .ggml_types import FILE_TYPES, MTP_TYPES, choose_type, encode, parse_type, type_name
from .ggufio.atomic import atomic_paths, check_output
from .ggufio.format import KV
from .ggufio.keys import K_SHARED_TARGET_TENSORS, arch_key
from .ggufio.names import MT, in_block
from .ggufio.writer import OutTensor, write_all, write_gguf
from .layout import OUTPUT, TOKEN_EMBD, Layout, borrowed_tensors, default_name
from .progress import Progress

QUANT_VERSION = 2
PARTIAL_MARKER = ".gguf-mtp-ranges.json"  # written by checkpoint.remote in head-only fetches
T = GGMLQuantizationType


@dataclass
class ConvertResult:
    """What :func:`convert` wrote."""

    path: Path
    layout: Layout
    arch: str
    n_tensors: int
    bytes_in: int
    bytes_out: int
    seconds: float
    notes: list[str] = field(default_factory=list)


def model_name(model: str | os.PathLike[str]) -> str:
    """``org/Name`` -> ``Name``; a folder -> its name."""
    return str(model).rstrip("/").split("/")[-1] if looks_like_repo_id(str(model)) else Path(model).resolve().name


def default_outfile(model: str | os.PathLike[str], outtype: str, layout: Layout, mtp_type: str = "q8_0") -> Path:
    """``./<model>-<OUTTYPE>[...].gguf``, named by :func:`gguf_mtp.layout.default_name`."""
    return Path.cwd() / default_name(f"{model_name(model)}-{outtype.upper()}", layout, outtype, mtp_type)


def general_kvs(arch: str, name: str, file_type: GGMLQuantizationType) -> list[KV]:
    return [
        KV.string(Keys.General.ARCHITECTURE, arch),
        KV.string(Keys.General.TYPE, "model"),
        KV.string(Keys.General.NAME, name),
        KV.u32(Keys.General.FILE_TYPE, int(FILE_TYPES[file_type])),
        KV.u32(Keys.General.QUANTIZATION_VERSION, QUANT_VERSION),
    ]


#: MTP-layer copies that llama.cpp's graphs replace by the model's own tensor when absent
SHARED_COPIES = {"." + in_block(MT.NEXTN_EMBED_TOKENS): TOKEN_EMBD, "." + in_block(MT.NEXTN_SHARED_HEAD_HEAD): OUTPUT}


def _same_bytes(a: Ref, b: Ref, chunk: int = 64 << 20) -> bool:
    if not isinstance(a, TensorRef) or not isinstance(b, TensorRef):  # a generated array has no file behind it
        return False
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    with open(a.path, "rb", buffering=0) as fa, open(b.path, "rb", buffering=0) as fb:
        for off in range(0, a.nbytes, chunk):
            n = min(chunk, a.nbytes - off)
            if os.pread(fa.fileno(), n, a.offset + off) != os.pread(fb.fileno(), n, b.offset + off):
                return False
    return True


def drop_shared_copies(plan: ModelPlan, family: Family) -> list[str]:
    """Leave out the MTP layer's own embedding / LM-head copies when they are byte-identical to the model's
    (GLM and DeepSeek checkpoints carry them): llama.cpp then uses token_embd / output, and a head-only
    sidecar shrinks by two vocab x hidden matrices."""
    full = family.plan(trunk=False, mtp=False, embeddings=True)
    base = {t.name: t for t in full.tensors}
    if OUTPUT not in base and TOKEN_EMBD in base:
        base[OUTPUT] = base[TOKEN_EMBD]  # tied embeddings
    dropped = []
    for t in list(plan.tensors):
        for suffix, twin in SHARED_COPIES.items():
            other = base.get(twin)
            if t.name.endswith(suffix) and other is not None and len(t.sources) == len(other.sources) == 1 \
                    and _same_bytes(t.sources[0].ref, other.sources[0].ref):
                plan.tensors.remove(t)
                dropped.append(t.name)
    return dropped


def plan_draft_heads(plan: ModelPlan, family: Family) -> set[str]:
    """Names of the draft heads (:mod:`gguf_mtp.draft_head`): the MTP layers' own heads where the checkpoint has
    them, else planned here as copies of the LM head (``output``, or ``token_embd`` when tied)."""
    base = {t.name: t for t in family.plan(trunk=False, mtp=False, embeddings=True).tensors}
    lm = base.get(OUTPUT) or base.get(TOKEN_EMBD)
    have = {t.name for t in plan.tensors}
    names = set()
    for il in draft_layers(plan.arch, plan.n_trunk, plan.n_mtp):
        name = draft_head_name(il)
        if name not in have:
            if lm is None:
                raise MissingTensorError(f"{family.ck.root}: no LM head to make the draft head from; drop "
                                         f"{DRAFT_OPTION}")
            plan.tensors.append(replace(lm, name=name, mtp=True))
        names.add(name)
    return names


def _check_unmapped(family: Family) -> None:
    full = family.plan(trunk=True, mtp=family.mtp_layers() > 0, embeddings=True)
    used = {s.ref.name for t in full.tensors for s in t.sources}
    extra = family.unused_tensors(used)
    if extra:
        shown = ", ".join(extra[:4]) + (f" and {len(extra) - 4} more" if len(extra) > 4 else "")
        raise UnsupportedError(f"{family.ck.root}: tensors gguf-mtp does not know how to map: {shown}; "
                               f"this is not a standard {family.arch} checkpoint")


def convert(
    model: str | os.PathLike[str],
    *,
    outfile: str | os.PathLike[str] | None = None,
    outtype: str = "bf16",
    layout: Layout | str = Layout.BUNDLED,
    mtp_type: str = "q8_0",
    draft_head_type: str | None = None,
    force: bool = False,
    revision: str | None = None,
    progress: bool = True,
    threads: int | None = None,
    force_download: bool = False,
    draft_vocab: int | None = None,
    draft_vocab_from: str | os.PathLike[str] | None = None,
) -> ConvertResult:
    """Convert a Hugging Face checkpoint (folder or repo id) to GGUF.

    ``layout`` is ``bundled`` (model + head), ``trunk-only``, ``mtp-only`` (self-contained sidecar) or
    ``head-only`` (sidecar without embeddings). Trunk matrices are written as ``outtype``; the MTP block's
    as ``mtp_type`` (Q8_0 by default); norms and 1-D tensors as F32. ``draft_head_type`` adds a draft LM head
    of that type to the MTP layers (:mod:`gguf_mtp.draft_head`). ``force_download`` (repo ids) drops
    cached downloads of the repo first (the partial cache of a sidecar, the HF cache's files otherwise).
    ``draft_vocab`` names the N tokens the drafts may propose (:mod:`gguf_mtp.draft_vocab`), counted on the text
    file ``draft_vocab_from`` if given.

    Example:
        >>> convert("Qwen3.5-9B", outtype="q8_0")                  # doctest: +SKIP
        ConvertResult(path=.../Qwen3.5-9B-Q8_0.gguf, layout=<Layout.BUNDLED>, ...)
        >>> convert("Qwen3.5-9B", outtype="q8_0", layout="mtp-only")  # doctest: +SKIP
    """
    t0 = time.perf_counter()
    layout = Layout(layout)
    if layout not in (Layout.BUNDLED, Layout.TRUNK_ONLY, Layout.MTP_ONLY, Layout.HEAD_ONLY):
        raise UnsupportedError(f"layout {layout.value!r} cannot be written")
    trunk_t, mtp_t = parse_type(outtype), parse_type(mtp_type, "--mtp-type", choices=MTP_TYPES)
    draft_t = parse_draft_type(draft_head_type) if draft_head_type is not None else None  # '' is refused
    if draft_t is not None and layout == Layout.TRUNK_ONLY:
        raise UnsupportedError(f"{DRAFT_OPTION} is for the MTP head, which --no-mtp leaves out")
    draft_vocab_mod.check_n(draft_vocab, draft_vocab_from)
    if draft_vocab is not None and layout == Layout.TRUNK_ONLY:
        raise UnsupportedError(f"{draft_vocab_mod.OPTION} is for the MTP head, which --no-mtp leaves out")
    notes: list[str] = []
    sidecar = layout in (Layout.MTP_ONLY, Layout.HEAD_ONLY)
    out = Path(outfile) if outfile else default_outfile(model, outtype, layout, mtp_type)
    if out.is_dir():
        out = out / default_outfile(model, outtype, layout, mtp_type).name
    check_output(out, force=force)  # before any download or reading; inputs are checked once known
    if sidecar and looks_like_repo_id(str(model)):
        # a sidecar from the Hub: fetch only the head's bytes (and the embeddings for a self-contained one)
        from .checkpoint.remote import fetch_head_checkpoint

        # a draft head is made from the LM head, which a head-only fetch would leave behind
        fetch = Layout.MTP_ONLY if draft_t is not None else layout
        rep = fetch_head_checkpoint(str(model), revision=revision, layout=fetch.value, force_download=force_download)
        root = rep.folder
        notes += rep.notes
        notes.append(f"fetched {rep.bytes_fetched / 1e6:.1f} MB in {rep.requests} range requests "
                     f"({rep.header_bytes / 1e3:.1f} kB of headers) of {rep.shard_bytes / 1e6:.1f} MB of shards")
    else:
        root = resolve_model(model, revision=revision, force_download=force_download, progress=progress)
    if not sidecar and (root / PARTIAL_MARKER).exists():
        raise UnsupportedError(f"{root}: a partial checkpoint (only the MTP head was fetched); convert the full "
                               "repo id or a complete download instead")
    ck = Checkpoint.open(root)
    family = family_class(ck.config, str(root / "config.json"))(ck)
    n_mtp = family.mtp_layers()
    if layout in (Layout.MTP_ONLY, Layout.HEAD_ONLY) and n_mtp == 0:
        raise MissingTensorError(family.mtp_missing())
    if layout == Layout.BUNDLED and n_mtp == 0:
        notes.append("the checkpoint has no MTP weights: wrote a trunk-only model")
        layout = Layout.TRUNK_ONLY
    _check_unmapped(family)

    plan: ModelPlan = family.plan(
        trunk=layout in (Layout.BUNDLED, Layout.TRUNK_ONLY),
        mtp=layout != Layout.TRUNK_ONLY,
        embeddings=layout != Layout.HEAD_ONLY,
    )
    if not (root / PARTIAL_MARKER).exists():  # a head-only fetch has not downloaded the model's own copies
        dropped = drop_shared_copies(plan, family)
        if dropped:
            notes.append(f"left out {', '.join(dropped)}: identical to the model's token_embd/output, which "
                         "llama.cpp uses instead")
    draft = plan_draft_heads(plan, family) if draft_t is not None and layout != Layout.TRUNK_ONLY else set()
    for pt in plan.tensors:
        if draft_t is not None and pt.name in draft:
            check_rows(root, pt.name, pt.ggml_shape[0], draft_t)
    file_type = mtp_t if layout == Layout.HEAD_ONLY else trunk_t
    name = str(ck.config.get("_name_or_path") or model_name(model))
    kvs = general_kvs(plan.arch, name.rstrip("/").split("/")[-1], file_type) + plan.kvs
    if layout == Layout.HEAD_ONLY:
        kvs.append(KV.array(arch_key(K_SHARED_TARGET_TENSORS, plan.arch), GGUFValueType.STRING,
                            borrowed_tensors(t.name for t in family.generated())))
    kvs += tokenizer_kvs(root, family.hp, family.vocab, family.tokenizer_pre, family.extra_specials)
    n_tokens = len(next(kv for kv in kvs if kv.key == Keys.Tokenizer.LIST).value)
    if n_tokens != family.vocab:
        raise UnsupportedError(f"{root}: tokenizer has {n_tokens} tokens but embed_tokens has "
                               f"{family.vocab} rows; llama.cpp needs them equal")
    if draft_vocab is not None and layout != Layout.TRUNK_ONLY:
        kvs.append(draft_vocab_mod.to_kv(draft_vocab_mod.choose(kvs, draft_vocab, draft_vocab_from, root)))

    check_output(out, force=force, inputs=ck.files())

    bytes_in = sum(t.src_bytes for t in plan.tensors)
    bar = Progress(f"convert {out.name}", bytes_in, len(plan.tensors), enabled=progress)
    with ThreadPoolExecutor(max_workers=threads or min(4, os.cpu_count() or 1)) as pool:
        tensors: list[OutTensor] = [
            out_tensor(pt, draft_t if draft_t is not None and pt.name in draft else
                       choose_type(pt.name, pt.ggml_shape, mtp_t if pt.mtp else trunk_t), pool)
            for pt in plan.tensors
        ]
        with atomic_paths([out], force=force) as (tmp,):
            write_gguf(tmp, kvs, tensors, progress=bar.advance, on_tensor=bar.tensor_done)
    bar.close()
    return ConvertResult(out, layout, plan.arch, len(tensors), bytes_in, out.stat().st_size,
                         time.perf_counter() - t0, notes)


# -- plan entry -> GGUF bytes ---------------------------------------------------------------
CHUNK_ELEMS = 1 << 21  # 2 Mi elements: 8 MiB of float32 per chunk in flight
_RAW_COPY = {"BF16": T.BF16, "F16": T.F16, "F32": T.F32}

A = TypeVar("A")
R = TypeVar("R")


def ordered_map(pool: Executor | None, fn: Callable[[A], R], items: Iterable[A], ahead: int = 4) -> Iterator[R]:
    """``map`` over a pool keeping at most ``ahead`` results in flight, yielding in order."""
    if pool is None:
        yield from map(fn, items)
        return
    q: deque[Future[R]] = deque()
    for it in items:
        q.append(pool.submit(fn, it))
        if len(q) >= ahead:
            yield q.popleft().result()
    while q:
        yield q.popleft().result()


def _chunks(src: Source, row: int) -> Iterator[tuple[Source, int, int]]:
    step = max(1, CHUNK_ELEMS // row) * row
    for off in range(0, src.n, step):
        yield src, src.start + off, min(step, src.n - off)


def out_tensor(pt: PlannedTensor, ggml_type: int, pool: Executor | None) -> OutTensor:
    """The writer-side tensor for a plan entry stored as ``ggml_type``."""
    raw_ok = pt.whole is None and pt.elementwise is None and all(
        _RAW_COPY.get(s.ref.dtype) == ggml_type for s in pt.sources
    )
    if raw_ok:
        def write(fh: BinaryIO, progress: Callable[[int], None]) -> None:
            for s in pt.sources:
                s.ref.write_raw(fh, s.start, s.n, progress)
        return OutTensor(pt.name, pt.ggml_shape, ggml_type, write)

    if pt.whole is None:
        row = pt.np_shape[-1]

        def work(job: tuple[Source, int, int]) -> tuple[Any, int]:
            s, start, count = job
            x = s.ref.read_f32(start, count)
            if pt.elementwise is not None:
                x = pt.elementwise(x)
            return encode(x, ggml_type), count * s.ref.itemsize

        def write(fh: BinaryIO, progress: Callable[[int], None]) -> None:
            jobs = (j for s in pt.sources for j in _chunks(s, row))
            for data, nin in ordered_map(pool, work, jobs):
                write_all(fh, data)
                progress(nin)
        return OutTensor(pt.name, pt.ggml_shape, ggml_type, write)

    whole = pt.whole  # not None from here on (a local, so that the closures below see it narrowed)
    if pt.elementwise is None and all(_RAW_COPY.get(s.ref.dtype) == ggml_type for s in pt.sources):
        # whole-tensor transforms only move values (reorders, splits): apply them to the stored
        # bits, no float round trip
        def write_layout(fh: BinaryIO, progress: Callable[[int], None]) -> None:
            x = np.concatenate([s.ref.read_raw(s.start, s.n) for s in pt.sources])
            write_all(fh, np.ascontiguousarray(whole(x.reshape(pt.src_shape))))
            progress(pt.src_bytes)
        return OutTensor(pt.name, pt.ggml_shape, ggml_type, write_layout)

    def write_whole(fh: BinaryIO, progress: Callable[[int], None]) -> None:
        x = np.concatenate([s.ref.read_f32(s.start, s.n) for s in pt.sources])
        if pt.elementwise is not None:
            x = pt.elementwise(x)
        y = np.ascontiguousarray(whole(x.reshape(pt.src_shape)), dtype=np.float32).reshape(-1)
        del x
        row = pt.np_shape[-1]
        step = max(1, CHUNK_ELEMS // row) * row
        for data in ordered_map(pool, lambda off: encode(y[off:off + step], ggml_type), range(0, y.size, step)):
            write_all(fh, data)
        progress(pt.src_bytes)
    return OutTensor(pt.name, pt.ggml_shape, ggml_type, write_whole)


__all__ = ["convert", "ConvertResult", "default_outfile", "type_name"]
