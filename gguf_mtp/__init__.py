"""gguf-mtp: multi-token-prediction (MTP / NextN) heads for GGUF models.

Convert Hugging Face checkpoints with their MTP head into GGUF (bundled, trunk-only or MTP-only
sidecar), inspect GGUF files, move heads between files (:mod:`gguf_mtp.surgery`) and run speculative
decoding with llama.cpp (:mod:`gguf_mtp.runtime`).

Example:
    >>> import gguf_mtp
    >>> gguf_mtp.convert("Qwen3.5-9B", outtype="q8_0")     # doctest: +SKIP
    >>> gguf_mtp.inspect_file("Qwen3.5-9B-Q8_0.gguf").layout   # doctest: +SKIP
    <Layout.BUNDLED: 'bundled'>

Importing the package loads neither numpy nor llama.cpp: conversion, inspection and surgery never need
llama.cpp's shared library, and :mod:`gguf_mtp.runtime` must load llama.cpp's libraries *before* numpy's
(a CUDA build whose libggml-cuda exports its own copy of libstdc++ symbols crashes at model load when
numpy's libraries came first). The public names below are imported on first use.
"""

from __future__ import annotations

import importlib
import sys
import types

from .errors import GgufMtpError

__version__ = "0.1.0"
__all__ = ["convert", "ConvertResult", "inspect_file", "FileReport", "Layout", "GgufMtpError", "__version__"]

_LAZY = {"convert": ".convert", "ConvertResult": ".convert", "inspect_file": ".file_report", "FileReport": ".file_report",
         "Layout": ".layout"}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'gguf_mtp' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        # importing the submodule gguf_mtp.convert binds it here; keep the function of that name instead
        if name == "convert" and isinstance(value, types.ModuleType):
            value = getattr(value, "convert")
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
