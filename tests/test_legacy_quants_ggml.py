"""gguf_mtp/legacy_quants.py against llama.cpp's own quantizer: ``ggml_quantize_chunk`` of the loaded library (its
reference quantizers, as ``llama-quantize`` runs them without an importance matrix) writes the same bytes for the
rows of tests/test_legacy_quants.py.

Tie rule: ggml-base is built without an ``-ffp-contract`` setting, so where the instruction set has a fused
multiply-add (aarch64 always; x86 only with FMA flags, which ggml gives its CPU back end and not ggml-base) the
compiler may fuse ``x * id`` with the ``+ 8.5`` (``+ 16.5``, ``+ 0.5``) before the truncation: the product is not
rounded to float32 first, and a quant can come out one lower than our (and gguf-py's, and x86's) unfused
arithmetic. Scales and minimums must match byte for byte; each quant must equal the unfused result or the fused one
(``_fused``: the exact value in float64, rounded to float32 once). Q8_0 rounds a bare product, which nothing can
fuse: exact everywhere."""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from gguf_mtp import legacy_quants as lq
from gguf_mtp.legacy_quants import ENCODERS

from .test_legacy_quants import N_PER_ROW, cases

pytestmark = pytest.mark.llama  # imports llama.cpp when it runs

T = GGMLQuantizationType


class Layout(NamedTuple):
    head: int  # scale (and minimum) bytes at the head of a block
    fifth: bool  # the quants carry a fifth bit
    c: float | None  # the constant added before the truncation (None: rounded, not truncated)
    minus_min: bool  # the block's minimum is subtracted first, d = (max - min) / div; else d = signed max / div
    div: float
    top: int | None  # the largest quant the truncation is clamped to (None: not clamped)


LAYOUT: dict[GGMLQuantizationType, Layout] = {
    T.Q4_0: Layout(2, False, 8.5, False, -8, 15), T.Q4_1: Layout(4, False, 0.5, True, 15, 15),
    T.Q5_0: Layout(2, True, 16.5, False, -16, 31), T.Q5_1: Layout(4, True, 0.5, True, 31, None),
    T.Q8_0: Layout(2, False, None, False, 127, None),
}


def _ggml_bytes(t: GGMLQuantizationType, x: np.ndarray) -> np.ndarray:
    import llama_cpp.llama_cpp as ll

    lib = ctypes.CDLL(ll._lib._name)  # ggml through libllama's handle: the copy llama.cpp itself uses
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_void_p]
    out = np.zeros(x.size // 32 * GGML_QUANT_SIZES[t][1], dtype=np.uint8)
    n = fn(int(t), x.ctypes.data, out.ctypes.data, 0, x.shape[0], N_PER_ROW, None)
    assert n == out.size
    return out


def _split(t: GGMLQuantizationType, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A type's bytes as (each block's scale bytes, each block's 32 quants as integers)."""
    head, fifth, c = LAYOUT[t][:3]
    b = raw.reshape(-1, GGML_QUANT_SIZES[t][1])
    if c is None:
        return b[:, :head], b[:, head:].view(np.int8).astype(np.int32)
    qs = b[:, -16:].astype(np.int32)
    q = np.concatenate([qs & 15, qs >> 4], axis=1)
    if fifth:
        q |= np.unpackbits(b[:, head:head + 4], axis=1, bitorder="little").astype(np.int32) << 4
    return b[:, :head], q


def compare(t: GGMLQuantizationType, x: np.ndarray, ours: np.ndarray, theirs: np.ndarray) -> int:
    """Asserts the tie rule (module docstring); returns how many quants matched only the fused result."""
    s_ours, q_ours = _split(t, ours)
    s_theirs, q_theirs = _split(t, theirs)
    bad = np.flatnonzero((s_ours != s_theirs).any(axis=1))
    assert bad.size == 0, f"{t.name}: {bad.size} blocks' scale bytes differ, the first block {bad[0]}"
    q_fused = q_ours if LAYOUT[t].c is None else _split(t, _fused(t, x))[1]
    wrong = np.flatnonzero((q_theirs != q_ours) & (q_theirs != q_fused))
    assert wrong.size == 0, (f"{t.name}: {wrong.size} quants differ from both the unfused and the fused result, "
                             f"the first in block {wrong[0] // 32} ({q_ours.flat[wrong[0]]} against ggml's "
                             f"{q_theirs.flat[wrong[0]]})")
    return int(((q_theirs != q_ours) & (q_theirs == q_fused)).sum())


@pytest.mark.parametrize("t", list(ENCODERS), ids=lambda t: t.name)
def test_the_bytes_of_ggmls_quantizer(t: GGMLQuantizationType) -> None:
    x = cases()
    compare(t, x, ENCODERS[t](x), _ggml_bytes(t, x))


@pytest.mark.parametrize("t", list(ENCODERS), ids=lambda t: t.name)
def test_the_tie_rule_refuses_what_no_build_writes(t: GGMLQuantizationType) -> None:
    """The comparison fails on one quant off by one where fusing changes nothing and on one scale byte: it cannot
    pass everything. Where fusing does change a quant (the rows hold such places for Q4_0 and Q5_0), the fused
    value passes."""
    x = cases()
    ours = ENCODERS[t](x)
    _, q = _split(t, ours)
    q_fused = q if LAYOUT[t].c is None else _split(t, _fused(t, x))[1]
    assert compare(t, x, ours, ours.copy()) == 0
    same = np.flatnonzero((q == q_fused).reshape(-1))
    blk, j = divmod(int(same[same.size // 2]), 32)
    q2 = q.copy()
    q2[blk, j] += 1 if q2[blk, j] <= 0 else -1
    with pytest.raises(AssertionError, match="differ from both"):
        compare(t, x, ours, _join(t, ours, q2))
    scale = ours.copy()
    scale[blk * GGML_QUANT_SIZES[t][1]] ^= 1
    with pytest.raises(AssertionError, match="scale bytes differ"):
        compare(t, x, ours, scale)
    moved = np.flatnonzero((q != q_fused).reshape(-1))
    if t in (T.Q4_0, T.Q5_0):
        assert moved.size, "the rows hold places where a fused multiply-add truncates lower"
        assert compare(t, x, ours, _fused(t, x)) == moved.size
        assert np.all(q_fused.reshape(-1)[moved] == q.reshape(-1)[moved] - 1)


def _join(t: GGMLQuantizationType, raw: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``raw`` with its quants replaced by ``q`` (``_split``'s inverse for the quants)."""
    head, fifth, c = LAYOUT[t][:3]
    b = raw.reshape(-1, GGML_QUANT_SIZES[t][1]).copy()
    if c is None:
        b[:, head:] = q.astype(np.int8).view(np.uint8)
        return b.reshape(-1)
    u = q.astype(np.uint8)
    b[:, -16:] = lq._nibbles(u)
    if fifth:
        b[:, head:head + 4] = lq._high_bits(u)
    return b.reshape(-1)


def _fused(t: GGMLQuantizationType, x: np.ndarray) -> np.ndarray:
    """What a build that fuses ``x * id + c`` writes: the quants from the exact value, rounded to float32 once."""
    lay = LAYOUT[t]
    assert lay.c is not None
    b = lq._blocks(x)
    if lay.minus_min:
        lo, hi = lq._min_max(b)
        d = (hi - lo) / np.float32(lay.div)
        b = b - lo[:, None]
    else:
        d = lq._signed_absmax(b) / np.float32(lay.div)
    v = (b.astype(np.float64) * lq._inverse(d).astype(np.float64)[:, None] + lay.c).astype(np.float32)
    q = v.astype(np.int32)
    if lay.top is not None:
        q = np.minimum(q, lay.top)
    return _join(t, ENCODERS[t](x), q)
