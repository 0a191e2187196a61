"""Model families behind a registry: the family is picked from ``config.json``'s ``architectures``.

Adding a family = adding one module that defines a :class:`~gguf_mtp.families.base.Family` subclass
decorated with :func:`register`, and importing it at the bottom of this file.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedError
from .base import Family

REGISTRY: dict[str, type[Family]] = {}


def register(cls: type[Family]) -> type[Family]:
    for name in cls.hf_architectures:
        REGISTRY[name] = cls
    return cls


def hf_architecture(config: dict[str, Any]) -> str | None:
    tc = config.get("text_config") or {}
    for archs in (tc.get("architectures"), config.get("architectures")):
        if isinstance(archs, list) and archs:
            return str(archs[0])
    return None


def family_class(config: dict[str, Any], where: str = "config.json") -> type[Family]:
    """The family class for a checkpoint config, or a clear error listing what is supported."""
    name = hf_architecture(config)
    if name is None:
        raise UnsupportedError(f"{where}: no 'architectures' entry; cannot tell which model family this is")
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnsupportedError(
            f"{where}: architecture {name!r} is not supported; supported: {', '.join(sorted(REGISTRY))}"
        ) from None


def mtp_archs() -> set[str]:
    """GGUF architecture names gguf-mtp can attach heads to."""
    return {cls.arch for cls in REGISTRY.values()}


from . import deepseek2, glm4moe, mimo2, qwen35, qwen3next, step35  # noqa: E402,F401  (registration)
