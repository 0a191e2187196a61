"""llama.cpp runtime: load a model with its MTP head and decode speculatively (see :class:`MTPSession`)."""

from .sampling import SamplerConfig
from .session import Generation, MTPSession, SessionConfig
from .stats import Stats

__all__ = ["MTPSession", "SessionConfig", "SamplerConfig", "Generation", "Stats"]
