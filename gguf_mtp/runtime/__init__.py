"""llama.cpp runtime: load a model with its MTP head and decode speculatively (see :class:`MTPSession`).

Import this package (or ``llama_cpp``) before numpy in a process that runs models: llama.cpp's libraries
must be loaded first (a CUDA build whose libggml-cuda exports its own copy of libstdc++ symbols crashes at
model load when numpy's libraries came first). ``import gguf_mtp`` itself loads neither.
"""

try:
    import llama_cpp.llama_cpp  # noqa: F401  (first: see above)
except Exception:  # noqa: BLE001 - missing or broken: .llama reports it as a GgufMtpError
    pass

from .sampling import SamplerConfig
from .session import Generation, MTPSession, SessionConfig
from .stats import Stats

__all__ = ["MTPSession", "SessionConfig", "SamplerConfig", "Generation", "Stats"]
