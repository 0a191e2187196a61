"""gguf_mtp/legacy_quants.py: the legacy block encoders (the draft LM head's and the MTP block's types) write the
bytes of gguf-py's numpy encoders, on random rows of several scales and on the blocks where the arithmetic has
choices to make: ties of magnitude, constant, zero and tiny blocks (``cases``; tests/test_legacy_quants_ggml.py
compares the same rows with llama.cpp's own quantizer); and bench/legacy_quants.py."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from gguf_mtp.legacy_quants import ENCODERS

pytestmark = pytest.mark.fast  # numpy and gguf-py only; tests/test_legacy_quants_ggml.py compares with llama.cpp

T = GGMLQuantizationType
N_PER_ROW = 256


def cases() -> np.ndarray:
    """Rows of ``N_PER_ROW`` float32 values (a whole number of 32-value blocks)."""
    rng = np.random.default_rng(7)
    rows = [rng.standard_normal(N_PER_ROW) * s for s in (1e-3, 0.02, 1.0, 300.0)]
    rows.append(rng.uniform(0.5, 2.0, N_PER_ROW))  # all positive: Q4_1's minimum above zero
    edge = np.zeros((8, 32))
    edge[1] = 3.0  # constant
    edge[2, 3], edge[2, 7] = -5.0, 5.0  # a tie of magnitude, the negative first
    edge[3, 5], edge[3, 9] = 5.0, -5.0  # the positive first
    edge[4] = np.linspace(-1, 1, 32)
    edge[5] = -2.5
    edge[6, 0] = 1e-30  # a scale below float16's range
    edge[7] = np.round(rng.standard_normal(32) * 8) / 8  # values on the quantization grid: ties at .5
    rows.append(edge.reshape(-1))
    halves = np.tile(np.arange(-7.5, 8.5, 0.5), (8, 1))  # with a scale of 1 (the signed maximum -8, -16), x / d + c
    halves[0::2, 0], halves[1::2, 0] = -8.0, -16.0       # lands on whole numbers: Q4_0's and Q5_0's ties
    rows.append(halves.reshape(-1))
    # 1/s inexact in float32: x * (1/s) lands a rounding error from -7.5 (Q4_0), -15.5 (Q5_0), ..., where a fused
    # multiply-add truncates x * id + c one lower than the rounded product (tests/test_legacy_quants_ggml.py)
    s = np.repeat([3.0, 5.0, 6.0, 7.0, 9.0, 11.0, 12.0, 13.0], 32).reshape(8, 32)
    odd, j = np.arange(8)[:, None] % 2 == 1, np.arange(32)
    fma = s * np.where(odd, 15.5 - j, 7.5 - j % 16)
    fma[0::2, 0], fma[1::2, 0] = 8 * s[0::2, 0], 16 * s[1::2, 0]  # the signed maximum: d = -s for Q4_0, Q5_0
    rows.append(fma.reshape(-1))
    rows.append(rng.standard_normal(N_PER_ROW).astype(np.float16).astype(np.float64))  # float16-exact values
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.parametrize("t", list(ENCODERS), ids=lambda t: t.name)
def test_the_bytes_of_gguf_pys_encoder(t: GGMLQuantizationType) -> None:
    from gguf.quants import quantize

    x = cases()
    want = quantize(x.reshape(-1, 32), t).reshape(-1)
    got = ENCODERS[t](x)
    assert got.dtype == np.uint8 and got.size == x.size // 32 * GGML_QUANT_SIZES[t][1]
    assert np.array_equal(got, want)


def test_the_benchmark_compares_the_bytes_then_times_both() -> None:
    """bench/legacy_quants.py: a row a type with both rates, their ratio and the projected head; its first check is
    that both encoders wrote the same bytes (it stops with an error line otherwise)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-m", "bench.legacy_quants", "--rows", "64", "--repeat", "1"], cwd=root,
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [ln.strip("|").split("|") for ln in p.stdout.splitlines() if ln.startswith("| Q")]
    assert [r[0].strip() for r in rows] == [t.name for t in ENCODERS]
    for r in rows:
        ours, theirs, ratio, head = (float(c) for c in r[1:])
        # the rates are printed to 0.1 and the ratio to 0.01: it must lie within what those roundings allow
        assert ours > 0 and theirs > 0.05 and head > 0
        assert (ours - 0.05) / (theirs + 0.05) - 0.005 <= ratio <= (ours + 0.05) / (theirs - 0.05) + 0.005, r
    bad = subprocess.run([sys.executable, "-m", "bench.legacy_quants", "--width", "33"], cwd=root,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and "--width a multiple of 32" in bad.stderr
