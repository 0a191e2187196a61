"""llama.cpp's quantizer (``llama_model_quantize``) from Python: every type llama-quantize knows, with
tensor-type overrides and an importance matrix."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from ..errors import GgufMtpError, UnsupportedError
from ..ggufio.atomic import atomic_paths, check_output
from .llama import _init, _ll, last_error


def ftype_names() -> dict[str, int]:
    """``{"Q4_K_M": 15, ...}``: llama.cpp's file types by their llama-quantize names."""
    pre = "LLAMA_FTYPE_MOSTLY_"
    names = {k[len(pre):]: int(v) for k, v in vars(_ll).items() if k.startswith(pre) and isinstance(v, int)}
    names.update({"F32": int(_ll.LLAMA_FTYPE_ALL_F32)})
    return names


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *, threads: int = 0,
             force: bool = False, tensor_types: list[tuple[str, int]] | None = None,
             imatrix: dict[str, np.ndarray] | None = None,
             inputs: list[Path] | None = None) -> Path:
    """Quantize ``src`` into ``dst`` as ``ftype`` (e.g. ``"Q4_K_M"``), atomically.

    ``tensor_types``: ``(regex, ggml type)`` pairs that override the type of matching tensors (as
    llama-quantize's ``--tensor-type``); ``imatrix``: per-tensor importance (see :mod:`gguf_mtp.imatrix`);
    ``inputs``: every file the caller read (default ``[src]``), none of which ``dst`` may be.
    """
    _init()
    names = ftype_names()
    key = ftype.upper()
    if key not in names:
        raise UnsupportedError(f"unknown quantization type {ftype!r}; known: {', '.join(sorted(names))}")
    dst = Path(dst)
    check_output(dst, force=force, inputs=inputs if inputs is not None else [Path(src)])
    params = _ll.llama_model_quantize_default_params()
    params.ftype = names[key]
    params.nthread = threads
    keep: list[object] = []  # ctypes buffers that must outlive the call
    if tensor_types:
        arr = (_ll.llama_model_tensor_override * (len(tensor_types) + 1))()
        for i, (pattern, gtype) in enumerate(tensor_types):
            b = ctypes.create_string_buffer(pattern.encode())
            keep.append(b)
            arr[i].pattern = ctypes.cast(b, ctypes.c_char_p)
            arr[i].type = int(gtype)
        arr[len(tensor_types)].pattern = None
        params.tt_overrides = arr
        keep.append(arr)
    if imatrix:
        data = (_ll.llama_model_imatrix_data * (len(imatrix) + 1))()
        for i, (name, values) in enumerate(imatrix.items()):
            v = np.ascontiguousarray(values, dtype=np.float32)
            nb = ctypes.create_string_buffer(name.encode())
            keep += [v, nb]
            data[i].name = ctypes.cast(nb, ctypes.c_char_p)
            data[i].data = v.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            data[i].size = v.size
        data[len(imatrix)].name = None
        params.imatrix = data
        keep.append(data)
    with atomic_paths([dst], force=force) as (tmp,):
        rc = _ll.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            raise GgufMtpError(f"{src}: llama.cpp could not quantize to {key}: {last_error()}")
    return dst
