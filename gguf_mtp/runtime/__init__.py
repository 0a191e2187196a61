"""llama.cpp runtime: load a model with its MTP head and decode speculatively (see :class:`MTPSession`).

Import this package (or ``llama_cpp``) before numpy in a process that runs models: llama.cpp's libraries
must be loaded first (a CUDA build whose libggml-cuda exports its own copy of libstdc++ symbols crashes at
model load when numpy's libraries came first). ``import gguf_mtp`` itself loads neither.

Layers, each importing only those before it: :mod:`.config` (options and limits, no llama.cpp),
:mod:`.llama` (the ctypes layer), :mod:`.sampling`, the engine (:mod:`.speculative`, :mod:`.multistep`),
:mod:`.session`. The session's names load on first use, so importing a lower layer loads nothing above it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

try:
    import llama_cpp.llama_cpp  # noqa: F401  (first: see above)
except Exception:  # noqa: BLE001 - missing or broken: .llama reports it as a GgufMtpError
    pass

from .config import SamplerConfig, SessionConfig

if TYPE_CHECKING:  # for type checkers only: at run time these load on first use (__getattr__)
    from .session import Generation, MTPSession
    from .stats import Stats

_LAZY = {"MTPSession": ".session", "Generation": ".session", "Stats": ".stats"}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'gguf_mtp.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


__all__ = ["MTPSession", "SessionConfig", "SamplerConfig", "Generation", "Stats"]
