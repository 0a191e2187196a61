"""gguf-mtp: multi-token-prediction (MTP / NextN) heads for GGUF models.

Convert Hugging Face checkpoints with their MTP head into GGUF (bundled, trunk-only or MTP sidecar), inspect GGUF
files, move heads between files (extract, strip, graft), quantize with the head kept at Q8_0, and run speculative
decoding with llama.cpp (:class:`MTPSession`).

Example (run as a test in a scratch folder holding ``examples/``: ``tests/test_api_docs.py``):
    >>> import gguf_mtp
    >>> r = gguf_mtp.convert("examples/tiny-qwen35-mtp", outfile="tiny.gguf", progress=False)
    >>> gguf_mtp.inspect_file(r.path).layout
    <Layout.BUNDLED: 'bundled'>
    >>> head = gguf_mtp.extract("tiny.gguf", "tiny-MTP.gguf", head_only=True, progress=False)
    >>> trunk = gguf_mtp.strip("tiny.gguf", "tiny-trunk.gguf", progress=False)
    >>> gguf_mtp.inspect_file("tiny-MTP.gguf").layout, gguf_mtp.inspect_file("tiny-trunk.gguf").layout
    (<Layout.HEAD_ONLY: 'head-only'>, <Layout.TRUNK_ONLY: 'trunk-only'>)
    >>> _ = gguf_mtp.graft("tiny-MTP.gguf", "tiny-trunk.gguf", "tiny-again.gguf", progress=False)
    >>> _ = gguf_mtp.quantize("tiny.gguf", "tiny-Q4_K_M.gguf", "Q4_K_M")  # the head stays Q8_0
    >>> with gguf_mtp.MTPSession("tiny-trunk.gguf", mtp="tiny-MTP.gguf", n_draft=3) as s:
    ...     out = s.generate("def fibonacci(n):", max_tokens=24)
    >>> out.stats.drafted > 0 and out.stats.accepted > 0
    True

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
# public name -> (module, attribute); the runtime's names load llama.cpp (and numpy after it) on first use
_LAZY: dict[str, tuple[str, str]] = {
    "convert": (".convert", "convert"),
    "ConvertResult": (".convert", "ConvertResult"),
    "inspect_file": (".file_report", "inspect_file"),
    "FileReport": (".file_report", "FileReport"),
    "Layout": (".layout", "Layout"),
    "extract": (".surgery", "extract"),
    "strip": (".surgery", "strip"),
    "graft": (".surgery", "graft"),
    "SurgeryResult": (".surgery", "SurgeryResult"),
    "quantize": (".quantize", "quantize_model"),
    "QuantizeResult": (".quantize", "QuantizeResult"),
    "MTPSession": (".runtime", "MTPSession"),
    "SessionConfig": (".runtime", "SessionConfig"),
    "SamplerConfig": (".runtime", "SamplerConfig"),
}
__all__ = [*_LAZY, "GgufMtpError", "__version__"]
# submodules named like a public function: importing the submodule must not replace the function
_SHADOWED = {name: attr for name, (mod, attr) in _LAZY.items() if mod == f".{name}"}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'gguf_mtp' has no attribute {name!r}")
    mod, attr = _LAZY[name]
    value = getattr(importlib.import_module(mod, __name__), attr)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        # importing the submodule gguf_mtp.convert (or .quantize) binds it here; keep the function instead
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            value = getattr(value, _SHADOWED[name])
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
