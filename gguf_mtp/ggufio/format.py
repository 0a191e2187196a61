"""GGUF container facts: magic, versions, value types, alignment and metadata entries.

Tensor types (names, block sizes) are in :mod:`gguf_mtp.ggml_types`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGUFValueType

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
WRITE_VERSION = 3
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# numpy dtype of each fixed-size scalar value type (little endian on disk)
SCALAR_DTYPES: dict[GGUFValueType, np.dtype] = {
    GGUFValueType.UINT8: np.dtype("<u1"),
    GGUFValueType.INT8: np.dtype("<i1"),
    GGUFValueType.UINT16: np.dtype("<u2"),
    GGUFValueType.INT16: np.dtype("<i2"),
    GGUFValueType.UINT32: np.dtype("<u4"),
    GGUFValueType.INT32: np.dtype("<i4"),
    GGUFValueType.FLOAT32: np.dtype("<f4"),
    GGUFValueType.BOOL: np.dtype("<u1"),
    GGUFValueType.UINT64: np.dtype("<u8"),
    GGUFValueType.INT64: np.dtype("<i8"),
    GGUFValueType.FLOAT64: np.dtype("<f8"),
}


def n_elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def align(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class KV:
    """One metadata entry with its exact GGUF value type (kept so files round-trip unchanged)."""

    key: str
    vtype: GGUFValueType
    value: Any
    item_type: GGUFValueType | None = None  # for arrays

    # constructors for the types llama.cpp reads ------------------------------------------
    @classmethod
    def u32(cls, key: str, v: int) -> KV:
        return cls(key, GGUFValueType.UINT32, int(v))

    @classmethod
    def i32(cls, key: str, v: int) -> KV:
        return cls(key, GGUFValueType.INT32, int(v))

    @classmethod
    def u16(cls, key: str, v: int) -> KV:
        return cls(key, GGUFValueType.UINT16, int(v))

    @classmethod
    def f32(cls, key: str, v: float) -> KV:
        return cls(key, GGUFValueType.FLOAT32, float(v))

    @classmethod
    def boolean(cls, key: str, v: bool) -> KV:
        return cls(key, GGUFValueType.BOOL, bool(v))

    @classmethod
    def string(cls, key: str, v: str) -> KV:
        return cls(key, GGUFValueType.STRING, str(v))

    @classmethod
    def array(cls, key: str, item_type: GGUFValueType, values: Any) -> KV:
        if item_type == GGUFValueType.STRING:
            return cls(key, GGUFValueType.ARRAY, [str(s) for s in values], item_type)
        return cls(key, GGUFValueType.ARRAY, np.asarray(values, dtype=SCALAR_DTYPES[item_type]), item_type)

    def scalar(self) -> Any:
        """The value as a plain Python object (arrays as lists)."""
        if self.vtype == GGUFValueType.ARRAY:
            if self.item_type == GGUFValueType.STRING:
                return list(self.value)
            if self.item_type == GGUFValueType.BOOL:
                return [bool(x) for x in self.value]
            return self.value.tolist()
        return self.value
