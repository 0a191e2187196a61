"""GGUF tensor names from gguf-py's table (``gguf.TENSOR_NAMES``), so each name has one definition there.

``tensor_name(MT.ATTN_NORM, 3) == "blk.3.attn_norm.weight"``; inside a block whose prefix ``b`` is already
``"blk.3."``, ``b + in_block(MT.ATTN_NORM)`` says the same.
"""

from __future__ import annotations

from gguf import MODEL_TENSOR as MT
from gguf import TENSOR_NAMES

__all__ = ["MT", "DRAFT_HEAD", "tensor_name", "in_block"]

_BLOCK = "blk.{bid}."


def tensor_name(t: MT, bid: int | None = None, suffix: str = ".weight") -> str:
    """The GGUF name of tensor ``t`` (of block ``bid`` for per-block tensors), with ``suffix``."""
    return TENSOR_NAMES[t].format(bid=bid) + suffix


def in_block(t: MT, suffix: str = ".weight") -> str:
    """The name of per-block tensor ``t`` after its ``blk.{bid}.`` prefix, with ``suffix``."""
    return TENSOR_NAMES[t].removeprefix(_BLOCK) + suffix


#: an MTP layer's own LM head (after ``blk.{bid}.``); llama.cpp's MTP graphs read it instead of ``output.weight``
#: when a file has it, which is what makes a lower-bit draft head possible
DRAFT_HEAD = in_block(MT.NEXTN_SHARED_HEAD_HEAD)
