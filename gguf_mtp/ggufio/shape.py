"""Tensor shapes as ggml compares them: trailing dimensions of 1 do not count.

llama.cpp's converter writes some tensors with a trailing 1 (``ffn_gate_inp_shexp.weight`` as ``[n_embd, 1]``),
llama-quantize and gguf-py's writer drop it (``[n_embd]``); ggml_n_dims and llama.cpp's loader treat both as the
same tensor. Every place where a head meets a model compares shapes through :func:`same_ggml_shape`.
"""

from __future__ import annotations

from collections.abc import Iterable


def ggml_shape(shape: Iterable[int]) -> tuple[int, ...]:
    """``shape`` (ggml order, ne0 first) without trailing 1s; at least one dimension, as ggml_n_dims counts."""
    s = tuple(int(d) for d in shape)
    while len(s) > 1 and s[-1] == 1:
        s = s[:-1]
    return s


def same_ggml_shape(a: Iterable[int], b: Iterable[int]) -> bool:
    """True when ggml sees the two shapes as one (e.g. ``[256, 1]`` and ``[256]``)."""
    return ggml_shape(a) == ggml_shape(b)
