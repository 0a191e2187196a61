"""``gguf-mtp quantize``: llama.cpp's quantizer (any type, K-quants included) with the MTP head pinned.

:func:`llama_quantize` is the quantizer itself (atomic output, tensor-type overrides, importance matrix);
:func:`quantize_model` pins the head through it.

The head's blocks get ``mtp_type`` (Q8_0 by default) through tensor-type overrides, not a fork of the
quantizer; an importance matrix without entries for the head (the usual case: imatrix runs do not reach
the MTP block) is fine because the pinned type needs none. The layout is kept: a bundled model stays
bundled, a sidecar is quantized on its own. A quantized draft LM head (:mod:`gguf_mtp.draft_head`) keeps its
type through a first override ahead of the head's; ``--draft-head-type`` adds one in a second pass.

F32, F16 and BF16 quantize nothing, and llama.cpp applies no tensor-type override to them: it converts every
float matrix, and refuses to touch a quantized one unless told to requantize. So for these targets the head's
quantized tensors (a Q8_0 head, a draft LM head) are put back byte for byte in a second pass over llama.cpp's
output; a quantized trunk is refused (upcasting it only makes the file larger, as llama-quantize says).

The quantizer runs in a child process (:mod:`gguf_mtp.runtime.quantizer`): Ctrl-C and SIGTERM stop it at once.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import draft_vocab as draft_vocab_mod
from .draft_head import draft_head_tensors, is_draft_head, keeps_type, parse_draft_type
from .errors import GgufMtpError, MissingTensorError, OutputError, UnsupportedError
from .file_report import FileReport, inspect_file
from .files import describe_os_error
from .ggml_types import parse_type, type_name
from .ggufio.atomic import atomic_paths, check_output, scratch_path
from .ggufio.model import GGUFModel, Tensor
from .ggufio.writer import copy_tensor, write_gguf
from .imatrix import load_imatrix
from .progress import Progress
from .surgery import add_draft_head, find_head

if TYPE_CHECKING:
    import numpy as np

#: types that cannot be made without an importance matrix (llama.cpp refuses them otherwise)
NEEDS_IMATRIX = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S"}
#: targets that quantize nothing (llama.cpp converts float tensors, ignoring tensor-type overrides)
FLOAT_TARGETS = {"F32", "F16", "BF16"}
_FLOAT_TYPES = {"F32", "F16", "BF16"}


def _quantized(t: Tensor) -> bool:
    return type_name(t.info.ggml_type) not in _FLOAT_TYPES and len(t.info.shape) > 1


@dataclass
class QuantizeResult:
    path: Path
    ftype: str
    mtp_type: str | None
    report: FileReport
    seconds: float
    notes: list[str]


def _check_ftype(ftype: str) -> str:
    from .runtime import llama

    names = llama.file_types()
    key = ftype.upper()
    if not ftype.strip() or key not in names:
        raise UnsupportedError(f"unknown quantization type {ftype[:40]!r}; known: {', '.join(sorted(names))}")
    return key


def llama_quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *, threads: int = 0,
                   force: bool = False, tensor_types: list[tuple[str, int]] | None = None,
                   imatrix: dict[str, np.ndarray] | None = None,
                   inputs: list[Path] | None = None, allow_requantize: bool = False, progress: bool = False) -> Path:
    """Quantize ``src`` into ``dst`` as ``ftype`` (e.g. ``"Q4_K_M"``) with llama.cpp's quantizer, atomically.

    ``tensor_types``: ``(regex, ggml type)`` pairs that override the type of matching tensors (as
    llama-quantize's ``--tensor-type``); ``imatrix``: per-tensor importance (see :mod:`gguf_mtp.imatrix`);
    ``inputs``: every file the caller read (default ``[src]``), none of which ``dst`` may be;
    ``allow_requantize``: as llama-quantize's ``--allow-requantize``; ``progress``: a progress line on stderr,
    tensor by tensor. Runs in a child process: Ctrl-C and SIGTERM stop it and leave nothing behind.
    """
    from .runtime import quantizer

    key = _check_ftype(ftype)
    dst = Path(dst)
    check_output(dst, force=force, inputs=inputs if inputs is not None else [Path(src)])
    with atomic_paths([dst], force=force) as (tmp,):
        quantizer.quantize(src, tmp, key, threads=threads, tensor_types=tensor_types or (), imatrix=imatrix,
                           allow_requantize=allow_requantize, progress=progress, label=dst.name)
    return dst


def _write_keeping(quantized: Path, source: GGUFModel, names: set[str], path: Path, label: str,
                   progress: bool) -> None:
    """Write ``quantized`` at ``path`` (a temp or scratch file) with the tensors ``names`` as they are in
    ``source`` (type and bytes): llama.cpp's output, the head put back."""
    q = GGUFModel(quantized)
    tensors = []
    for name, t in q.tensors.items():
        if name in names:
            if source.tensors[name].info.shape != t.info.shape:
                raise GgufMtpError(f"{quantized}: {name} has shape {t.info.shape}, {source.path} "
                                   f"{source.tensors[name].info.shape}; please report this")
            t = source.tensors[name]
        tensors.append(copy_tensor(t))
    bar = Progress(label, sum(t.nbytes for t in tensors), len(tensors), enabled=progress)
    write_gguf(path, q.model_kvs(), tensors, alignment=q.alignment, progress=bar.advance, on_tensor=bar.tensor_done)
    bar.close()


def _into_scratch(write: Callable[[], object], dst: Path) -> None:
    """A pass that writes an intermediate: a failed write (full disk, size limit) names the output."""
    try:
        write()
    except OSError as e:
        raise OutputError(describe_os_error(e, dst)) from None


def quantize_model(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *,
                   mtp_type: str | None = "q8_0", imatrix: str | os.PathLike[str] | None = None,
                   threads: int = 0, force: bool = False, draft_head_type: str | None = None,
                   progress: bool = True, allow_requantize: bool = False, draft_vocab: int | None = None,
                   draft_vocab_from: str | os.PathLike[str] | None = None) -> QuantizeResult:
    """Quantize a model or sidecar to ``ftype`` with its MTP head at ``mtp_type`` (None: as the trunk).

    An input whose tensors are already quantized (a Q8_0 model) is refused unless ``allow_requantize`` (as
    llama-quantize's ``--allow-requantize``: quantizing twice loses more than quantizing the original once).
    ``progress``: a progress line on stderr while llama.cpp quantizes, when stderr is a terminal.

    A quantized draft LM head (:mod:`gguf_mtp.draft_head`) keeps its type. ``draft_head_type`` writes one of that
    type, made from the input's LM head in a second pass over the quantized file (llama.cpp's quantizer cannot add
    a tensor). F32/F16/BF16 targets keep the head's quantized tensors as they are (``mtp_type`` None: converted
    like the trunk); their float ones are converted like the trunk.
    The input's draft vocabulary is kept; ``draft_vocab`` writes a new one of that many tokens, counted on the
    text ``draft_vocab_from`` if given (:mod:`gguf_mtp.draft_vocab`; also a second pass).

    Example:
        >>> quantize_model("Qwen3.5-9B-BF16.gguf", "Qwen3.5-9B-Q4_K_M.gguf", "Q4_K_M")   # doctest: +SKIP
    """
    from .runtime import llama  # noqa: F401  (loads llama.cpp first: a missing build fails before any work)
    from .runtime.options import check_threads

    t0 = time.perf_counter()
    key = _check_ftype(ftype)
    n_threads, notes = check_threads(threads, "--threads", zero_means_all=True)  # llama.cpp aborts on -t 100000
    if draft_head_type is not None and not draft_head_type.strip():
        raise UnsupportedError("--draft-head-type '': name a type (q4_0, q4_1, q5_0, q5_1, q8_0) or leave the option "
                               "out")
    if mtp_type is not None and not mtp_type.strip():
        raise UnsupportedError("--mtp-type '': name a ggml type (q8_0, ...) or 'same'")
    if imatrix is not None and not os.fspath(imatrix).strip():
        raise UnsupportedError("--imatrix '': name the importance matrix file llama-imatrix wrote")
    m = GGUFModel(src)
    inputs = m.files + ([Path(imatrix)] if imatrix else [])
    check_output(dst, force=force, inputs=inputs)  # before reading the imatrix or quantizing
    if m.is_split:
        raise UnsupportedError(f"{m.path}: split input; merge it first (llama-gguf-split --merge) or quantize a "
                               "single file")
    head = find_head(m)
    dt = parse_draft_type(draft_head_type) if draft_head_type is not None else None
    if dt is not None and head is None:
        raise MissingTensorError(f"{m.path}: has no MTP head to give a draft head; drop --draft-head-type")
    if dt is not None and head is not None:
        draft_head_tensors(m, head.tensors, head.n_trunk, head.n_mtp, dt)  # its source checked before the long pass
    draft_vocab_mod.check_n(draft_vocab, draft_vocab_from)
    if draft_vocab is not None and head is None:
        raise MissingTensorError(f"{m.path}: has no MTP head to give a draft vocabulary; drop {draft_vocab_mod.OPTION}")
    ids = None if draft_vocab is None else draft_vocab_mod.choose(m.model_kvs(), draft_vocab, draft_vocab_from, m.path)
    mt = parse_type(mtp_type, "--mtp-type", writable=False) if head is not None and mtp_type is not None else None
    head_names = {t.name for t in head.tensors} if head is not None else set()
    overrides: list[tuple[str, int]] = []
    keep: set[str] = set()  # float targets: head tensors put back as they are after llama.cpp's pass
    if key in FLOAT_TARGETS:
        keep = _float_target_keeps(m, key, head_names, mt)
    elif head is not None:
        # first match wins: ahead of the head's pin, which would re-encode the draft head and undo its point
        # (with --draft-head-type too: the second pass replaces it, and llama.cpp refuses to requantize)
        overrides += [(rf"^{re.escape(t.name)}$", t.info.ggml_type) for t in head.tensors if keeps_type(t)]
        if mt is not None:
            if not allow_requantize:
                _check_requantize(m, head.tensors, mt.name)
            layers = "|".join(str(head.n_trunk + i) for i in range(head.n_mtp))
            overrides.append((rf"^blk\.({layers})\.", int(mt)))
    if head is None:
        notes.append("no MTP head in this file: quantized as a plain model")
    im = load_imatrix(imatrix) if imatrix else None
    if im is not None and head is not None and key not in FLOAT_TARGETS:
        if not head_names & set(im):
            notes.append(f"the importance matrix has no entries for the MTP head; its {len(head_names)} tensors are "
                         f"quantized without it (at {mt.name if mt else key})")
            if mt is not None and mt.name in NEEDS_IMATRIX or mt is None and key in NEEDS_IMATRIX:
                raise GgufMtpError(f"{imatrix}: no importance data for the MTP head, which {mt.name if mt else key} "
                                   "needs; keep the head at --mtp-type q8_0")
    if im is None and key in NEEDS_IMATRIX:
        raise GgufMtpError(f"{ftype} needs an importance matrix: pass --imatrix FILE (from llama-imatrix)")
    if key not in FLOAT_TARGETS and not allow_requantize:  # every input read: before the long pass
        _check_trunk_requantize(m, key, head_names)
    dst = Path(dst)
    # float targets: only the head's quantized tensors (checked above), which the next pass puts back
    allow = allow_requantize or key in FLOAT_TARGETS
    show = progress and _on_terminal()
    if not keep and dt is None and ids is None:
        out = llama_quantize(m.path, dst, key, threads=n_threads or 0, force=force, tensor_types=overrides,
                             imatrix=im, inputs=inputs, allow_requantize=allow, progress=show)
    else:
        from .runtime import quantizer

        with ExitStack() as stack:  # intermediates are scratch files beside dst, removed on any exit
            out = stack.enter_context(scratch_path(dst))
            _into_scratch(lambda: quantizer.quantize(m.path, out, key, threads=n_threads or 0, tensor_types=overrides,
                                                     imatrix=im, allow_requantize=allow, progress=show,
                                                     label=dst.name), dst)
            if keep and dt is None and ids is None:
                with atomic_paths([dst], force=force) as (tmp,):
                    _write_keeping(out, m, keep, tmp, f"head {dst.name}", show)
                out = dst
            elif keep:
                kept = stack.enter_context(scratch_path(dst))
                _into_scratch(lambda: _write_keeping(out, m, keep, kept, f"head {dst.name}", show), dst)
                out = kept
            if dt is not None or ids is not None:
                out = add_draft_head(out, dst, dt.name if dt is not None else None, made_from=m.path, force=force,
                                     inputs=inputs, progress=show, draft_vocab=ids).paths[0]
    report = inspect_file(out)
    before = inspect_file(m.path)
    if report.layout != before.layout:
        raise GgufMtpError(f"{out}: layout changed from {before.layout.value} to {report.layout.value}; "
                           "please report this")
    if key in FLOAT_TARGETS and mtp_type is not None and mtp_type.lower() != "q8_0" and head is not None:
        notes.append(f"--mtp-type applies to quantized types: with {key} the head's quantized tensors are kept as "
                     f"they are and its float ones converted to {key} ('same' converts them all)")
    shown = (mt.name if mt else None) if key not in FLOAT_TARGETS else None
    return QuantizeResult(out, key, shown, report, time.perf_counter() - t0, notes)


def _float_target_keeps(m: GGUFModel, key: str, head_names: set[str], mt: object) -> set[str]:
    """The tensors an F32/F16/BF16 target keeps as they are: the head's quantized ones (only a quantized draft LM
    head with ``--mtp-type same``). A quantized tensor outside the head is refused, as llama-quantize does."""
    for name, t in m.tensors.items():
        if name not in head_names and _quantized(t):
            raise UnsupportedError(f"{m.path}: {name} is {type_name(t.info.ggml_type)}; {key} is made from a float "
                                   "model (llama.cpp does not turn a quantized model back into floats): quantize "
                                   "the F32/F16/BF16 original")
    return {n for n in head_names if _quantized(m.tensors[n]) and (mt is not None or is_draft_head(n))}


def _on_terminal() -> bool:
    """Progress is for a person watching: not in a log, where the final ``wrote ...`` line says it all."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # stderr closed or replaced
        return False


def _check_trunk_requantize(m: GGUFModel, key: str, head_names: set[str]) -> None:
    """Already quantized tensors that llama.cpp would quantize again: refused before the long pass, naming the
    option that allows it (llama.cpp would stop halfway with "requantizing from type ... is disabled")."""
    for name, t in m.tensors.items():
        have = type_name(t.info.ggml_type)
        if name not in head_names and _quantized(t) and have != key:
            raise UnsupportedError(f"{m.path}: {name} is already {have}; quantizing it again to {key} loses more "
                                   "than quantizing the F32/F16/BF16 original: quantize the original, or pass "
                                   "--allow-requantize (as llama-quantize)")


def _check_requantize(m: GGUFModel, tensors: list[Tensor], pin: str) -> None:
    """A head tensor already quantized to another type than the pin: llama.cpp would refuse halfway through."""
    for t in tensors:
        have = type_name(t.info.ggml_type)
        if _quantized(t) and not keeps_type(t) and have != pin:
            raise UnsupportedError(f"{m.path}: the MTP head's {t.name} is already {have}; it cannot be re-encoded "
                                   f"as {pin} (llama.cpp does not requantize): pass --mtp-type {have.lower()}, or "
                                   "quantize from a file whose head is F32/F16/BF16")
