"""Importance matrices written by llama-imatrix (GGUF format, or the legacy .dat), normalised the way
llama-quantize uses them: per tensor, the mean squared activation of each input column."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from .errors import FormatError
from .files import open_input
from .ggufio.reader import GGUFFile


def load_imatrix(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """``{tensor name: float32 importance}`` from an imatrix file (GGUF or legacy)."""
    p = Path(path)
    try:
        fh = open_input(p, "imatrix file")
    except FileNotFoundError:
        raise FormatError(f"{p}: no such file; pass the importance matrix llama-imatrix wrote") from None
    with fh:
        magic = fh.read(4)
        if magic == b"GGUF":
            data = None
        else:
            data = magic + fh.read()
    return _load_gguf(p) if data is None else _load_legacy(p, data)


def _load_gguf(p: Path) -> dict[str, np.ndarray]:
    f = GGUFFile(p)
    pairs: dict[str, dict[str, str]] = {}
    for name in f.tensors:
        for suffix in (".in_sum2", ".counts"):
            if name.endswith(suffix):
                pairs.setdefault(name[: -len(suffix)], {})[suffix] = name
    out: dict[str, np.ndarray] = {}
    for name, parts in pairs.items():
        if len(parts) != 2:
            raise FormatError(f"{p}: imatrix entry {name!r} lacks its .in_sum2 or .counts tensor")
        sums = f.read_tensor(parts[".in_sum2"]).reshape(-1).astype(np.float32)
        counts = f.read_tensor(parts[".counts"]).reshape(-1).astype(np.float32)
        if counts.size == 0 or sums.size % counts.size:
            raise FormatError(f"{p}: imatrix entry {name!r} has {sums.size} sums for {counts.size} counts")
        per = sums.reshape(counts.size, -1)
        norm = np.where(counts[:, None] > 0, per / np.maximum(counts[:, None], 1), 1.0)
        out[name] = norm.reshape(-1).astype(np.float32)
    if not out:
        raise FormatError(f"{p}: no imatrix entries (.in_sum2/.counts tensors) in this GGUF file")
    return out


def _load_legacy(p: Path, data: bytes) -> dict[str, np.ndarray]:
    pos = 0

    def take(fmt: str) -> tuple:
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(data):
            raise FormatError(f"{p}: truncated imatrix file (not GGUF, not a legacy .dat either)")
        vals = struct.unpack_from(fmt, data, pos)
        pos += size
        return vals

    (n,) = take("<i")
    if n < 1 or n > 1_000_000:
        raise FormatError(f"{p}: not an imatrix file (GGUF or legacy .dat)")
    out: dict[str, np.ndarray] = {}
    for _ in range(n):
        (ln,) = take("<i")
        if ln < 0 or pos + ln > len(data):
            raise FormatError(f"{p}: corrupt imatrix entry name")
        name = data[pos:pos + ln].decode("utf-8", "replace")
        pos += ln
        ncall, nval = take("<ii")
        if nval < 1 or pos + 4 * nval > len(data):
            raise FormatError(f"{p}: corrupt imatrix entry {name!r}")
        vals = np.frombuffer(data, dtype="<f4", count=nval, offset=pos).astype(np.float32)
        pos += 4 * nval
        out[name] = vals / ncall if ncall > 0 else vals
    return out
