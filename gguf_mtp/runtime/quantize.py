"""llama.cpp's quantizer (``llama_model_quantize``) from Python: every type llama-quantize knows."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ..errors import GgufMtpError, UnsupportedError
from ..ggufio.atomic import atomic_paths, check_output
from .llama import _init, _ll, last_error


def ftype_names() -> dict[str, int]:
    """``{"Q4_K_M": 15, ...}``: llama.cpp's file types by their llama-quantize names."""
    pre = "LLAMA_FTYPE_MOSTLY_"
    return {k[len(pre):]: int(v) for k, v in vars(_ll).items() if k.startswith(pre) and isinstance(v, int)}


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *, threads: int = 0,
             force: bool = False) -> Path:
    """Quantize ``src`` into ``dst`` as ``ftype`` (e.g. ``"Q4_K_M"``), atomically."""
    _init()
    names = ftype_names()
    key = ftype.upper()
    if key not in names:
        raise UnsupportedError(f"unknown quantization type {ftype!r}; known: {', '.join(sorted(names))}")
    dst = Path(dst)
    check_output(dst, force=force, inputs=[Path(src)])
    params = _ll.llama_model_quantize_default_params()
    params.ftype = names[key]
    params.nthread = threads
    with atomic_paths([dst]) as (tmp,):
        rc = _ll.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            raise GgufMtpError(f"{src}: llama.cpp could not quantize to {key}: {last_error()}")
    return dst
