"""``gguf-mtp serve``: an OpenAI-compatible HTTP server over :class:`~gguf_mtp.runtime.MTPSession` (needs the
``serve`` extra: starlette and uvicorn)."""
