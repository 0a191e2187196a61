"""gguf_mtp/legacy_quants.py against llama.cpp's own quantizer: ``ggml_quantize_chunk`` of the loaded library (its
reference quantizers, as ``llama-quantize`` runs them without an importance matrix) writes the same bytes for the
rows of tests/test_legacy_quants.py."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from gguf_mtp.legacy_quants import ENCODERS

from .test_legacy_quants import N_PER_ROW, cases

pytestmark = pytest.mark.llama  # imports llama.cpp when it runs


@pytest.mark.parametrize("t", list(ENCODERS), ids=lambda t: t.name)
def test_the_bytes_of_ggmls_quantizer(t: GGMLQuantizationType) -> None:
    import llama_cpp.llama_cpp as ll

    lib = ctypes.CDLL(ll._lib._name)  # ggml through libllama's handle: the copy llama.cpp itself uses
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_void_p]
    x = cases()
    out = np.zeros(x.size // 32 * GGML_QUANT_SIZES[t][1], dtype=np.uint8)
    n = fn(int(t), x.ctypes.data, out.ctypes.data, 0, x.shape[0], N_PER_ROW, None)
    assert n == out.size
    got = ENCODERS[t](x)
    bad = np.flatnonzero(got != out)
    assert bad.size == 0, f"{t.name}: {bad.size} bytes differ, the first in block {bad[0] // GGML_QUANT_SIZES[t][1]}"
