"""Qwen3-Next (``qwen3next``): MoE everywhere, fused ``in_proj_qkvz`` / ``in_proj_ba``, no V-head reorder."""

from __future__ import annotations

from . import register
from .qwen35 import Qwen35Moe


@register
class Qwen3Next(Qwen35Moe):
    arch = "qwen3next"
    hf_architectures = ("Qwen3NextForCausalLM",)
    tokenizer_pre = "qwen2"
    reorder_v = False
    fused_qkvz = True
