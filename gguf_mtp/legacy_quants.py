"""Encoders of ggml's legacy block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): 32 weights a block, a float16 scale (and
minimum), bit for bit what ggml's reference quantizers (``quantize_row_*_ref``, which ``llama-quantize`` runs
without an importance matrix) write where the product is rounded before the add, as x86 builds of ggml-base do (an
aarch64 build fuses them and can truncate a rare quant one lower: tests/test_legacy_quants_ggml.py's tie rule).

Each works on a whole array of blocks with elementwise numpy operations only: a block's extremes are found by
halving it five times rather than by a reduction along its 32-wide axis, which is slower and holds the GIL.
Where ggml takes the first element of largest magnitude, the halving pairs neighbours, so the lower index wins a
tie. gguf-py's encoders of the same types give the same bytes several times slower
(bench/legacy_quants.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf import GGMLQuantizationType

__all__ = ["ENCODERS", "quantize_q8_0", "quantize_q4_0", "quantize_q4_1", "quantize_q5_0", "quantize_q5_1"]

T = GGMLQuantizationType
_F = np.float32


def _blocks(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=_F).reshape(-1, 32)


def _signed_absmax(b: np.ndarray) -> np.ndarray:
    """Each block's element of largest magnitude, with its sign; the first one on a tie (ggml's ``amax < |v|``)."""
    a, v = np.abs(b), b
    while a.shape[1] > 1:
        right = a[:, 1::2] > a[:, 0::2]
        a = np.maximum(a[:, 0::2], a[:, 1::2])
        v = np.where(right, v[:, 1::2], v[:, 0::2])
    return v[:, 0]


def _halve(b: np.ndarray, op: np.ufunc) -> np.ndarray:
    """Each block reduced by ``op`` (np.minimum, np.maximum), one half against the other until one value is left."""
    while b.shape[1] > 1:
        h = b.shape[1] // 2
        b = op(b[:, :h], b[:, h:])
    return b[:, 0]


def _min_max(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _halve(b, np.minimum), _halve(b, np.maximum)


def _inverse(d: np.ndarray) -> np.ndarray:
    """``d ? 1.0f/d : 0.0f``"""
    with np.errstate(divide="ignore"):
        return np.where(d == 0, _F(0), _F(1) / d).astype(_F)


def _f16(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16).view(np.uint8).reshape(-1, 2)


def _nibbles(q: np.ndarray) -> np.ndarray:
    """Element j in the low nibble of byte j, element 16 + j in its high one."""
    return (q[:, :16] & np.uint8(0x0F)) | (q[:, 16:] << np.uint8(4))


def _high_bits(q: np.ndarray) -> np.ndarray:
    """Bit 4 of each of the 32 values, as a little-endian uint32 (bit j: element j)."""
    return np.packbits(q >> np.uint8(4), axis=-1, bitorder="little")


def _pack(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts, axis=1).reshape(-1)


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    """Q4_0: d = the signed largest magnitude / -8, q = min(15, trunc(x / d + 8.5)); 18 bytes a block."""
    b = _blocks(x)
    d = _signed_absmax(b) / _F(-8)
    q = np.minimum(b * _inverse(d)[:, None] + _F(8.5), _F(15)).astype(np.uint8)
    return _pack(_f16(d), _nibbles(q))


def quantize_q4_1(x: np.ndarray) -> np.ndarray:
    """Q4_1: d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5)); 20 bytes a block."""
    b = _blocks(x)
    lo, hi = _min_max(b)
    d = (hi - lo) / _F(15)
    q = np.minimum((b - lo[:, None]) * _inverse(d)[:, None] + _F(0.5), _F(15)).astype(np.uint8)
    return _pack(_f16(d), _f16(lo), _nibbles(q))


def quantize_q5_0(x: np.ndarray) -> np.ndarray:
    """Q5_0: d = the signed largest magnitude / -16, q = min(31, trunc(x / d + 16.5)); 22 bytes a block."""
    b = _blocks(x)
    d = _signed_absmax(b) / _F(-16)
    q = np.minimum(b * _inverse(d)[:, None] + _F(16.5), _F(31)).astype(np.uint8)
    return _pack(_f16(d), _high_bits(q), _nibbles(q))


def quantize_q5_1(x: np.ndarray) -> np.ndarray:
    """Q5_1: d = (max - min) / 31, m = min, q = trunc((x - min) / d + 0.5); 24 bytes a block."""
    b = _blocks(x)
    lo, hi = _min_max(b)
    d = (hi - lo) / _F(31)
    q = ((b - lo[:, None]) * _inverse(d)[:, None] + _F(0.5)).astype(np.uint8)
    return _pack(_f16(d), _f16(lo), _high_bits(q), _nibbles(q))


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    """Q8_0: d = the largest magnitude / 127, q = roundf(x * (1/d)); 34 bytes a block."""
    b = _blocks(x)
    a = np.abs(b)
    d = _halve(a, np.maximum) / _F(127)
    np.multiply(b, _inverse(d)[:, None], out=a)
    # round half away from zero, as ggml's roundf (np.rint would round ties to even: off by one at exact .5)
    sign = np.sign(a)
    np.abs(a, out=a)
    whole = np.floor(a)
    np.subtract(a, whole, out=a)
    a *= 2  # fraction >= .5 -> 1 after floor (exact in float32, unlike a + 0.5)
    np.floor(a, out=a)
    a += whole
    a *= sign
    return _pack(_f16(d), a.astype(np.int8).view(np.uint8))


#: every type this module encodes, by ggml type
ENCODERS: dict[GGMLQuantizationType, Callable[[np.ndarray], np.ndarray]] = {
    T.Q4_0: quantize_q4_0, T.Q4_1: quantize_q4_1, T.Q5_0: quantize_q5_0, T.Q5_1: quantize_q5_1, T.Q8_0: quantize_q8_0,
}
