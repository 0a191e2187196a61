"""Model families behind a registry: the family is picked from ``config.json``'s ``architectures``.

The registry is the arch table's ``families`` column (:data:`gguf_mtp.archs.HF_FAMILIES`): HF architecture
name -> ``"module:Class"`` here, imported on first use, so looking a family up loads that module only.

Adding a family (``glm4moe.py`` has exactly this shape):

1. One row in :mod:`gguf_mtp.archs`: the GGUF arch name, ``families={"<HF architecture>": "<module>:<Class>"}``,
   ``tokenizer_pre`` and whatever else is special (``norm_offset``, ``max_heads``, ``recurrent``, ``swa``, ...).
2. One module ``gguf_mtp/families/<module>.py`` with ``<Class>``, a :class:`~gguf_mtp.families.base.Family`
   subclass (usually of a shared shape: :class:`~.nextn_layer.NextnLayerFamily`,
   :class:`~.multihead.MultiHeadFamily`, :class:`~.qwen3_hybrid.QwenHybrid`) that sets ``arch`` and defines
   ``__init__`` (read the config), ``hparam_kvs`` (its metadata, keys from ``gguf.Keys``) and ``_block`` (its
   tensors: ``put(out, hf_name, b + in_block(MT.ATTN_NORM), shape, mtp)``, names from :mod:`gguf_mtp.ggufio.names`).
3. A synthetic checkpoint: a row of ``WRITERS`` in ``tests/synthetic/checkpoint.py``; the shared tests then cover
   the family.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ..archs import HF_FAMILIES, mtp_archs
from ..errors import UnsupportedError
from .base import Family

__all__ = ["REGISTRY", "family_class", "hf_architecture", "load", "mtp_archs"]

#: HF architecture name -> ``"module:Class"`` under this package
REGISTRY: Mapping[str, str] = HF_FAMILIES


def hf_architecture(config: dict[str, Any]) -> str | None:
    tc = config.get("text_config") or {}
    for archs in (tc.get("architectures"), config.get("architectures")):
        if isinstance(archs, list) and archs:
            return str(archs[0])
    return None


def load(where: str) -> type[Family]:
    """The family class named ``"module:Class"`` (a registry value), importing its module."""
    module, _, cls = where.partition(":")
    family: type[Family] = getattr(importlib.import_module(f".{module}", __name__), cls)
    return family


def family_class(config: dict[str, Any], where: str = "config.json") -> type[Family]:
    """The family class for a checkpoint config, or a clear error listing what is supported."""
    name = hf_architecture(config)
    if name is None:
        raise UnsupportedError(f"{where}: no 'architectures' entry; cannot tell which model family this is")
    if name not in REGISTRY:
        raise UnsupportedError(
            f"{where}: architecture {name!r} is not supported; supported: {', '.join(sorted(REGISTRY))}")
    return load(REGISTRY[name])
