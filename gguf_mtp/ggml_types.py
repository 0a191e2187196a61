"""ggml tensor types: names and the one parser of type names, block sizes, the output-type policy and numpy codecs
(no torch).

Type enums and block sizes come from the ``gguf`` package so that every ggml type it knows (K-quants, IQ types,
...) is named and sized correctly, including types we cannot decode.

Policy (matches llama.cpp's converter so stock llama.cpp reads our files as it reads its own):
1-D tensors, norms, routers, conv kernels and non-``.weight`` tensors stay F32; other matrices take
the trunk's ``--outtype``; tensors of the MTP block take ``--mtp-type`` (Q8_0 by default), because
very low-bit heads collapse draft acceptance; the legacy 4- and 5-bit block types are there on request (fewer bytes
read per draft). The draft LM head (``--draft-head-type``) is an MTP matrix of its own type: drafts read it, the
target verifies with the full LM head.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

from .errors import UnsupportedError
from .ggufio.shape import ggml_shape
from .legacy_quants import ENCODERS

T = GGMLQuantizationType

#: the types our encoders write (``--outtype`` / ``--mtp-type`` of convert and extract), by name
OUTTYPES: dict[str, GGMLQuantizationType] = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0}
#: the types of a draft LM head (``--draft-head-type``): the legacy block types (legacy_quants.py encodes them as
#: ggml's reference quantizers do), each read by every llama.cpp back-end; fewer bytes per draft than the Q8_0/Q6_K
#: LM head it copies
DRAFT_HEAD_TYPES: dict[str, GGMLQuantizationType] = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0,
                                                      "q5_1": T.Q5_1, "q8_0": T.Q8_0}
#: the types of the MTP block's matrices (``--mtp-type`` of convert and extract): ours and the draft head's
MTP_TYPES: dict[str, GGMLQuantizationType] = {**OUTTYPES, **DRAFT_HEAD_TYPES}
FILE_TYPES: dict[GGMLQuantizationType, LlamaFileType] = {
    T.F32: LlamaFileType.ALL_F32,
    T.F16: LlamaFileType.MOSTLY_F16,
    T.BF16: LlamaFileType.MOSTLY_BF16,
    T.Q8_0: LlamaFileType.MOSTLY_Q8_0,
}


# -- names and sizes --------------------------------------------------------------------------
def parse_type(name: str, option: str = "--outtype", *, writable: bool = True,
               choices: Mapping[str, GGMLQuantizationType] | None = None) -> GGMLQuantizationType:
    """The ggml type named ``name`` (any case), as given to ``option``.

    ``writable``: only the types our encoders write (``choices``, :data:`OUTTYPES` by default); otherwise any
    ggml type (what llama.cpp's quantizer can make, e.g. ``q6_k``).
    """
    if writable:
        allowed = OUTTYPES if choices is None else choices
        try:
            return allowed[name.lower()]
        except KeyError:
            raise UnsupportedError(f"{option} {name!r} is not supported; choose one of {', '.join(allowed)}") from None
    try:
        return GGMLQuantizationType[name.upper()]
    except KeyError:
        raise UnsupportedError(f"{option} {name!r} is not a ggml type (e.g. q8_0, q6_k, f16)") from None


def type_name(ggml_type: int) -> str:
    """``Q8_0``-style name of a ggml type id (``TYPE_<id>`` when unknown)."""
    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"TYPE_{ggml_type}"


def is_known_type(ggml_type: int) -> bool:
    try:
        return GGMLQuantizationType(ggml_type) in GGML_QUANT_SIZES
    except ValueError:
        return False


def tensor_nbytes(shape: tuple[int, ...], ggml_type: int) -> int:
    """Bytes of a tensor of ``shape`` (ggml order, ne0 first) stored as ``ggml_type``."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    n = math.prod(shape)
    if shape and shape[0] % block:
        raise ValueError(f"row length {shape[0]} is not a multiple of the {type_name(ggml_type)} block ({block})")
    return n // block * size


def file_type_name(v: object) -> str | None:
    """``Q8_0``-style name of a ``general.file_type`` value (None when it is not an integer)."""
    if not isinstance(v, int):
        return None
    try:
        return LlamaFileType(v).name.replace("MOSTLY_", "").replace("ALL_", "")
    except ValueError:
        return f"type {v}"


# -- output-type policy -----------------------------------------------------------------------
# GGUF name fragments that llama.cpp wants in F32 whatever the file type
_ALWAYS_F32 = ("_norm.weight", ".ffn_gate_inp.weight", ".ffn_gate_inp_shexp.weight", ".ssm_conv1d.weight")


def choose_type(gguf_name: str, shape: tuple[int, ...], wanted: GGMLQuantizationType) -> GGMLQuantizationType:
    """Storage type of a tensor (``shape`` in ggml order) given the type the user asked for."""
    if len(ggml_shape(shape)) <= 1 or gguf_name.endswith(_ALWAYS_F32) or not gguf_name.endswith(".weight"):
        return T.F32
    block = GGML_QUANT_SIZES[wanted][0]
    if shape[0] % block:
        return T.F16  # same fallback as llama.cpp's converter: rows that do not fill whole blocks
    return wanted


# -- codecs ---------------------------------------------------------------------------------
def bf16_to_f32(u16: np.ndarray) -> np.ndarray:
    return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even bf16 bits (as uint16), NaN kept quiet."""
    n = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((n + (0x7FFF + ((n >> 16) & 1))) >> 16).astype(np.uint16)
    nan = (n & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        rounded[nan] = ((n[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def encode(x: np.ndarray, ggml_type: int) -> np.ndarray:
    """Encode float32 values into the on-disk bytes of ``ggml_type`` (F32, F16, BF16, Q8_0 or a draft-head type;
    the size of ``x`` a multiple of the type's block)."""
    t = T(ggml_type)
    if t == T.F32:
        return np.ascontiguousarray(x, dtype=np.float32)
    if t == T.F16:
        return np.ascontiguousarray(x).astype(np.float16)
    if t == T.BF16:
        return f32_to_bf16(x)
    if t in ENCODERS:  # Q8_0 and the draft-head types
        return ENCODERS[t](x)
    raise UnsupportedError(f"encoding to {t.name} is not implemented; use f32, f16, bf16 or q8_0")


def can_decode(ggml_type: int) -> bool:
    """Whether :func:`dequantize` handles ``ggml_type`` (ours or gguf-py's numpy decoders)."""
    t = T(ggml_type)
    if t in (T.F32, T.F16, T.BF16, T.Q8_0):
        return True
    try:
        from gguf.quants import dequantize as _gguf_dequantize

        _gguf_dequantize(np.zeros(GGML_QUANT_SIZES[t][1], dtype=np.uint8), t)
        return True
    except (NotImplementedError, KeyError, ValueError, TypeError):
        return False


def dequantize(data: bytes | np.ndarray, ggml_type: int, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values of a stored tensor; ``shape`` in ggml order, result in numpy order."""
    t = T(ggml_type)
    np_shape = tuple(reversed(shape))
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8).reshape(-1)
    if t == T.F32:
        return buf.view(np.float32).reshape(np_shape).copy()
    if t == T.F16:
        return buf.view(np.float16).astype(np.float32).reshape(np_shape)
    if t == T.BF16:
        return bf16_to_f32(buf.view(np.uint16)).reshape(np_shape)
    if t == T.Q8_0:
        blocks = buf.reshape(-1, 34)
        d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
        q = blocks[:, 2:].view(np.int8).astype(np.float32)
        return (q * d).reshape(np_shape)
    try:
        from gguf.quants import dequantize as _gguf_dequantize

        return _gguf_dequantize(buf, t).astype(np.float32).reshape(np_shape)
    except (NotImplementedError, KeyError, ValueError):
        raise UnsupportedError(f"cannot decode tensors of type {t.name}") from None
