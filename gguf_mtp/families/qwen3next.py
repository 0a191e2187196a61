"""Qwen3-Next (``qwen3next``): MoE everywhere, fused ``in_proj_qkvz`` / ``in_proj_ba``, no V-head reorder, plain
(not multimodal) RoPE."""

from __future__ import annotations

from .qwen35 import Qwen35Moe


class Qwen3Next(Qwen35Moe):
    arch = "qwen3next"
    reorder_v = False
    fused_qkvz = True
    mrope_sections = False
