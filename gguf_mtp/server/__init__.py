"""``gguf-mtp serve``: an OpenAI-compatible HTTP server over :class:`~gguf_mtp.runtime.MTPSession` (needs the
``serve`` extra: starlette and uvicorn). :func:`serve` runs it; importing this package loads neither llama.cpp
nor the extra."""

from .serving import SessionLoad, serve

__all__ = ["serve", "SessionLoad"]
