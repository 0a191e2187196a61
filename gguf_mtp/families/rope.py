"""RoPE frequency factors that llama.cpp takes as a ``rope_freqs.weight`` tensor instead of metadata keys."""

from __future__ import annotations

import math

import numpy as np


def llama3_freq_factors(base: float, rotary_dim: int, factor: float, low_freq_factor: float,
                        high_freq_factor: float, original_max_position_embeddings: int) -> np.ndarray:
    """Per-frequency divisors of Llama 3 RoPE scaling, one per rotated pair (``rotary_dim / 2`` values).

    The published rule scales each inverse frequency by wavelength: longer than ``orig / low_freq_factor`` ->
    ``freq / factor``; shorter than ``orig / high_freq_factor`` -> unchanged; in between, a linear blend of the
    two in ``smooth = (orig / wavelen - low) / (high - low)``. llama.cpp's ggml_rope_ext divides each pair's
    angle by its factor, so the value stored is ``freq / scaled_freq``.
    """
    freqs = base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    wavelen = 2 * math.pi / freqs
    orig = float(original_max_position_embeddings)
    smooth = (orig / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    # scaled / original frequency: 1/factor for long waves, 1 for short ones, the blend in between
    ratio = np.where(wavelen > orig / low_freq_factor, 1.0 / factor,
                     np.where(wavelen < orig / high_freq_factor, 1.0, (1 - smooth) / factor + smooth))
    return (1.0 / ratio).astype(np.float32)
