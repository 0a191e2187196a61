"""The draft LM head: a lower-bit copy of the LM head that only the MTP layers read.

llama.cpp's MTP graphs take ``blk.L.nextn.shared_head_head`` when a file has it and ``output.weight``
otherwise, so a draft head at Q4_0 halves the bytes each draft reads while the target still verifies with the
full LM head (output unchanged; only acceptance may move). It is made from the layer's own head where the
release has one (DeepSeek-V3/GLM ``shared_head.head``, step35), else from the model's LM head (``output``, or
``token_embd`` when tied), re-encoded in row chunks: memory stays a few MiB for a vocabulary of any size.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import BinaryIO

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .archs import arch as arch_row
from .errors import MissingTensorError, UnsupportedError
from .ggml_types import DRAFT_HEAD_TYPES, can_decode, dequantize, encode, parse_type, tensor_nbytes
from .ggufio.model import GGUFModel, Tensor
from .ggufio.names import DRAFT_HEAD, MT, tensor_name
from .ggufio.writer import OutTensor, Progress, write_all
from .layout import OUTPUT, TOKEN_EMBD, block_index

__all__ = ["OPTION", "parse_draft_type", "check_rows", "draft_layers", "draft_head_name", "is_draft_head", "keeps_type",
           "lm_head", "reencode", "draft_head_tensors"]

OPTION = "--draft-head-type"
CHUNK_ELEMS = 1 << 21  # weights per chunk: 8 MiB of float32 in flight


def parse_draft_type(name: str) -> GGMLQuantizationType:
    """The ggml type ``--draft-head-type`` names (the types our encoders write)."""
    return parse_type(name, OPTION, choices=DRAFT_HEAD_TYPES)


def check_rows(where: object, name: str, row: int, ggml_type: int) -> None:
    """Refuse a draft head whose rows (``n_embd`` wide) do not fill whole blocks of ``ggml_type``."""
    block = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)][0]
    if row % block:
        raise UnsupportedError(f"{where}: tensor {name!r} has rows of {row}, not a multiple of the "
                               f"{GGMLQuantizationType(ggml_type).name} block ({block}); drop {OPTION}")


def draft_layers(arch: str, n_trunk: int, n_mtp: int) -> list[int]:
    """The MTP blocks whose graph reads a head: all of them for chained heads (mimo2, step35: one per draft step,
    by ``nextn_layer_offset``), else the first (qwen35, deepseek2, ... run ``blk.{n_trunk}`` only)."""
    row = arch_row(arch)
    n = n_mtp if row is None or row.max_heads is None else min(row.max_heads, n_mtp)
    return list(range(n_trunk, n_trunk + n))


def draft_head_name(layer: int) -> str:
    return tensor_name(MT.NEXTN_SHARED_HEAD_HEAD, layer)


def is_draft_head(name: str) -> bool:
    return block_index(name) is not None and name.endswith("." + DRAFT_HEAD)


def keeps_type(t: Tensor) -> bool:
    """Whether ``t`` is a draft head that re-encoding the MTP block (``--mtp-type``, quantize's head pin) must leave
    as it is: a quantized one was written at its type on purpose; a float copy (a release's own head converted at
    bf16) follows the block."""
    return is_draft_head(t.name) and t.info.ggml_type not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16,
                                                              GGMLQuantizationType.BF16)


def lm_head(m: GGUFModel) -> Tensor | None:
    """The LM head the target verifies with: ``output``, or ``token_embd`` when the model ties them."""
    return m.tensors.get(OUTPUT) or m.tensors.get(TOKEN_EMBD)


def reencode(src: Tensor, name: str, ggml_type: int) -> OutTensor:
    """``src`` (a ``{n_embd, n_vocab}`` matrix of any type gguf-py decodes) as tensor ``name`` at ``ggml_type``,
    decoded and encoded a chunk of rows at a time."""
    info = src.info
    if not can_decode(info.ggml_type):
        raise UnsupportedError(f"{src.file.path}: tensor {info.name!r} is {info.type_name}, which gguf-mtp cannot "
                               f"decode to make the draft head; drop {OPTION}, or take the head from a file whose "
                               "LM head is Q8_0, Q6_K, F16 or BF16")
    ne0 = info.shape[0]
    check_rows(src.file.path, info.name, ne0, ggml_type)
    rows = info.n_elements // ne0
    row_in = tensor_nbytes((ne0,), info.ggml_type)
    step = max(1, CHUNK_ELEMS // ne0)

    def write(fh: BinaryIO, progress: Progress) -> None:
        with open(src.file.path, "rb", buffering=0) as f:
            for r0 in range(0, rows, step):
                n = min(step, rows - r0)
                raw = os.pread(f.fileno(), n * row_in, info.offset + r0 * row_in)
                if len(raw) != n * row_in:
                    raise OSError(f"{src.file.path}: unexpected end of file in tensor {info.name!r}")
                data = encode(dequantize(raw, info.ggml_type, (ne0, n)).reshape(-1), ggml_type)
                write_all(fh, data)
                progress(data.nbytes)

    return OutTensor(name, info.shape, ggml_type, write)


def draft_head_tensors(m: GGUFModel, head_tensors: Sequence[Tensor], n_trunk: int, n_mtp: int, ggml_type: int, *,
                       lm: Tensor | None = None, shift: int = 0) -> tuple[list[OutTensor], set[str]]:
    """The draft heads of ``m``'s MTP blocks at ``ggml_type`` (numbered ``+shift``, as a graft renumbers them), and
    the names of the head tensors they replace. Each is made from the layer's own head if it has one, else from
    ``lm`` (default: ``m``'s LM head)."""
    own = {block_index(t.name): t for t in head_tensors if is_draft_head(t.name)}
    lm = lm if lm is not None else lm_head(m)
    out, replaced = [], set()
    for il in draft_layers(m.arch, n_trunk, n_mtp):
        src = own.get(il, lm)
        if src is None:
            raise MissingTensorError(f"{m.path}: no LM head to make the draft head from (no {OUTPUT}, "
                                     f"{TOKEN_EMBD} or {draft_head_name(il)}); drop {OPTION}, or extract from a "
                                     "model or a self-contained sidecar")
        if il in own:
            replaced.add(src.name)
        out.append(reencode(src, draft_head_name(il + shift), ggml_type))
    return out, replaced
