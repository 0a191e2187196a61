"""``gguf-mtp quantize``: llama.cpp's quantizer (any type, K-quants included) with the MTP head pinned.

:func:`llama_quantize` is the quantizer itself (atomic output, tensor-type overrides, importance matrix);
:func:`quantize_model` pins the head through it.

The head's blocks get ``mtp_type`` (Q8_0 by default) through tensor-type overrides, not a fork of the
quantizer; an importance matrix without entries for the head (the usual case: imatrix runs do not reach
the MTP block) is fine because the pinned type needs none. The layout is kept: a bundled model stays
bundled, a sidecar is quantized on its own. A quantized draft LM head (:mod:`gguf_mtp.draft_head`) keeps its
type through a first override ahead of the head's; ``--draft-head-type`` adds one in a second pass.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .draft_head import draft_head_tensors, keeps_type, parse_draft_type
from .errors import GgufMtpError, MissingTensorError, UnsupportedError
from .file_report import FileReport, inspect_file
from .ggml_types import parse_type
from .ggufio.atomic import atomic_paths, check_output, scratch_path
from .ggufio.model import GGUFModel
from .imatrix import load_imatrix
from .surgery import add_draft_head, find_head

if TYPE_CHECKING:
    import numpy as np

#: types that cannot be made without an importance matrix (llama.cpp refuses them otherwise)
NEEDS_IMATRIX = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S"}


@dataclass
class QuantizeResult:
    path: Path
    ftype: str
    mtp_type: str | None
    report: FileReport
    seconds: float
    notes: list[str]


def llama_quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *, threads: int = 0,
                   force: bool = False, tensor_types: list[tuple[str, int]] | None = None,
                   imatrix: dict[str, np.ndarray] | None = None,
                   inputs: list[Path] | None = None) -> Path:
    """Quantize ``src`` into ``dst`` as ``ftype`` (e.g. ``"Q4_K_M"``) with llama.cpp's quantizer, atomically.

    ``tensor_types``: ``(regex, ggml type)`` pairs that override the type of matching tensors (as
    llama-quantize's ``--tensor-type``); ``imatrix``: per-tensor importance (see :mod:`gguf_mtp.imatrix`);
    ``inputs``: every file the caller read (default ``[src]``), none of which ``dst`` may be.
    """
    from .runtime import llama

    names = llama.file_types()
    key = ftype.upper()
    if key not in names:
        raise UnsupportedError(f"unknown quantization type {ftype!r}; known: {', '.join(sorted(names))}")
    dst = Path(dst)
    check_output(dst, force=force, inputs=inputs if inputs is not None else [Path(src)])
    with atomic_paths([dst], force=force) as (tmp,):
        llama.quantize_file(src, tmp, key, threads=threads, tensor_types=tensor_types or (), imatrix=imatrix)
    return dst


def quantize_model(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *,
                   mtp_type: str | None = "q8_0", imatrix: str | os.PathLike[str] | None = None,
                   threads: int = 0, force: bool = False, draft_head_type: str | None = None,
                   progress: bool = True) -> QuantizeResult:
    """Quantize a model or sidecar to ``ftype`` with its MTP head at ``mtp_type`` (None: as the trunk).

    A quantized draft LM head (:mod:`gguf_mtp.draft_head`) keeps its type. ``draft_head_type`` writes one of that
    type, made from the input's LM head in a second pass over the quantized file (llama.cpp's quantizer cannot add
    a tensor).

    Example:
        >>> quantize_model("Qwen3.5-9B-BF16.gguf", "Qwen3.5-9B-Q4_K_M.gguf", "Q4_K_M")   # doctest: +SKIP
    """
    from .runtime import llama  # noqa: F401  (loads llama.cpp first: a missing build fails before any work)
    from .runtime.options import check_threads

    t0 = time.perf_counter()
    n_threads, notes = check_threads(threads, "--threads", zero_means_all=True)  # llama.cpp aborts on -t 100000
    m = GGUFModel(src)
    inputs = m.files + ([Path(imatrix)] if imatrix else [])
    check_output(dst, force=force, inputs=inputs)  # before reading the imatrix or quantizing
    if m.is_split:
        raise UnsupportedError(f"{m.path}: split input; merge it first (llama-gguf-split --merge) or quantize a "
                               "single file")
    head = find_head(m)
    dt = parse_draft_type(draft_head_type) if draft_head_type else None
    if dt is not None and head is None:
        raise MissingTensorError(f"{m.path}: has no MTP head to give a draft head; drop --draft-head-type")
    if dt is not None and head is not None:
        draft_head_tensors(m, head.tensors, head.n_trunk, head.n_mtp, dt)  # its source checked before the long pass
    overrides: list[tuple[str, int]] = []
    if head is not None:
        # first match wins: ahead of the head's pin, which would re-encode the draft head and undo its point
        # (with --draft-head-type too: the second pass replaces it, and llama.cpp refuses to requantize)
        overrides += [(rf"^{re.escape(t.name)}$", t.info.ggml_type) for t in head.tensors if keeps_type(t)]
    mt = None
    if head is not None and mtp_type is not None:
        mt = parse_type(mtp_type, "--mtp-type", writable=False)
        layers = "|".join(str(head.n_trunk + i) for i in range(head.n_mtp))
        overrides.append((rf"^blk\.({layers})\.", int(mt)))
    elif head is None:
        notes.append("no MTP head in this file: quantized as a plain model")
    im = load_imatrix(imatrix) if imatrix else None
    if im is not None and head is not None:
        head_names = {t.name for t in head.tensors}
        if not head_names & set(im):
            notes.append(f"the importance matrix has no entries for the MTP head; its {len(head_names)} tensors are "
                         f"quantized without it (at {mt.name if mt else ftype.upper()})")
            if mt is not None and mt.name in NEEDS_IMATRIX or mt is None and ftype.upper() in NEEDS_IMATRIX:
                raise GgufMtpError(f"{imatrix}: no importance data for the MTP head, which {mt.name if mt else ftype} "
                                   "needs; keep the head at --mtp-type q8_0")
    if im is None and ftype.upper() in NEEDS_IMATRIX:
        raise GgufMtpError(f"{ftype} needs an importance matrix: pass --imatrix FILE (from llama-imatrix)")
    if dt is None:
        out = llama_quantize(m.path, dst, ftype, threads=n_threads or 0, force=force, tensor_types=overrides,
                             imatrix=im, inputs=inputs)
    else:
        with scratch_path(dst) as tmp:
            llama_quantize(m.path, tmp, ftype, threads=n_threads or 0, force=True, tensor_types=overrides,
                           imatrix=im, inputs=inputs)
            out = add_draft_head(tmp, dst, dt.name, made_from=m.path, force=force, inputs=inputs,
                                 progress=progress).paths[0]
    report = inspect_file(out)
    before = inspect_file(m.path)
    if report.layout != before.layout:
        raise GgufMtpError(f"{out}: layout changed from {before.layout.value} to {report.layout.value}; "
                           "please report this")
    return QuantizeResult(out, ftype.upper(), mt.name if mt else None, report, time.perf_counter() - t0, notes)
