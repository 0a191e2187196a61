"""Writing safetensors shards from numpy without torch (bf16 given as uint16 bit patterns)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

_DT = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("uint16"): "BF16", np.dtype("uint8"): "F8_E4M3"}


def write_safetensors(path: Path, tensors: list[tuple[str, tuple[int, ...], str, Callable[[], np.ndarray]]]) -> None:
    """Write ``(name, shape, dtype, make_data)`` entries; data is produced one tensor at a time."""
    size = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape, dtype, _ in tensors:
        n = int(np.prod(shape)) * size[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape, dtype, make in tensors:
            data = np.ascontiguousarray(make())
            assert _DT[data.dtype] == dtype and data.size == int(np.prod(shape)), name
            fh.write(data.tobytes())
