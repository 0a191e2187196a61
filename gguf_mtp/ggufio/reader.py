"""Reading a GGUF file's header: metadata, tensor index and where each tensor's bytes lie.

Tensor data is never loaded here; callers copy byte ranges (``copy_range``) or read one tensor
(``read_tensor_bytes``). Every structural problem becomes a one-line :class:`FormatError` naming
the file, so a damaged or hostile file cannot produce anything else.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFValueType, Keys

from ..errors import FormatError, GgufMtpError
from ..files import open_input_fd
from ..ggml_types import is_known_type, tensor_nbytes, type_name
from .format import (
    DEFAULT_ALIGNMENT,
    GGML_MAX_DIMS,
    GGUF_MAGIC,
    KV,
    SCALAR_DTYPES,
    SUPPORTED_VERSIONS,
    n_elements,
)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file. ``shape`` is in ggml order (ne0 = row length first)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute offset of the data in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return type_name(self.ggml_type)

    @property
    def n_elements(self) -> int:
        return n_elements(self.shape)


class _Cursor:
    """Bounds-checked little-endian reader over a buffer."""

    __slots__ = ("buf", "pos", "end", "path")

    def __init__(self, buf: memoryview, path: Path) -> None:
        self.buf, self.pos, self.end, self.path = buf, 0, len(buf), path

    def fail(self, what: str) -> FormatError:
        return FormatError(f"{self.path}: {what} (at byte {self.pos}); the file is damaged or not a GGUF file")

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > self.end:
            raise self.fail(f"truncated while reading {what}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self, what: str) -> int:
        return struct.unpack_from("<I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack_from("<Q", self.take(8, what))[0]

    def string(self, what: str) -> str:
        n = self.u64(f"{what} length")
        return bytes(self.take(n, what)).decode("utf-8", errors="surrogateescape")

    def remaining(self) -> int:
        return self.end - self.pos


def _read_value(cur: _Cursor, vtype: int, key: str,
                depth: int = 0) -> tuple[GGUFValueType, object, GGUFValueType | None]:
    try:
        vt = GGUFValueType(vtype)
    except ValueError:
        raise cur.fail(f"key {key!r} has unknown value type {vtype}") from None
    if vt in SCALAR_DTYPES:
        dt = SCALAR_DTYPES[vt]
        raw = cur.take(dt.itemsize, f"value of {key!r}")
        v = np.frombuffer(raw, dtype=dt)[0].item()
        return vt, (bool(v) if vt == GGUFValueType.BOOL else v), None
    if vt == GGUFValueType.STRING:
        return vt, cur.string(f"value of {key!r}"), None
    # array
    if depth:
        raise cur.fail(f"key {key!r} holds a nested array, which llama.cpp does not read")
    it = cur.u32(f"array type of {key!r}")
    n = cur.u64(f"array length of {key!r}")
    try:
        item = GGUFValueType(it)
    except ValueError:
        raise cur.fail(f"key {key!r} has an array of unknown type {it}") from None
    if item in SCALAR_DTYPES:
        dt = SCALAR_DTYPES[item]
        if n > cur.remaining() // dt.itemsize:
            raise cur.fail(f"array {key!r} claims {n} items, more than the file holds; the file is truncated or "
                           "corrupt")
        arr = np.frombuffer(cur.take(n * dt.itemsize, f"array {key!r}"), dtype=dt).copy()
        return vt, arr, item
    if item == GGUFValueType.STRING:
        if n > cur.remaining() // 8:
            raise cur.fail(f"array {key!r} claims {n} strings, more than the file holds; the file is truncated or "
                           "corrupt")
        return vt, [cur.string(f"item of {key!r}") for _ in range(n)], item
    raise cur.fail(f"key {key!r} holds a nested array, which llama.cpp does not read")


class GGUFFile:
    """Parsed header of one GGUF file.

    Example:
        >>> f = GGUFFile("model.gguf")                      # doctest: +SKIP
        >>> f.get("general.architecture"), len(f.tensors)   # doctest: +SKIP
        ('qwen35', 291)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            fd = open_input_fd(self.path, "GGUF file")  # regular files only: a FIFO would block forever
        except FileNotFoundError:
            raise FormatError(f"{self.path}: no such file") from None
        except GgufMtpError as e:
            raise FormatError(str(e)) from None
        try:
            self.size = os.fstat(fd).st_size
            if self.size < 24:
                raise FormatError(f"{self.path}: file is {self.size} bytes, too small to be a GGUF file")
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
                view = memoryview(mm)
                try:
                    self._parse(view)
                except (struct.error, ValueError, OverflowError, MemoryError, IndexError) as e:
                    if isinstance(e, FormatError):
                        raise
                    raise FormatError(f"{self.path}: malformed GGUF header ({type(e).__name__}: {e})") from None
                finally:
                    view.release()
        finally:
            os.close(fd)

    # -- parsing ---------------------------------------------------------------------------
    def _parse(self, view: memoryview) -> None:
        cur = _Cursor(view, self.path)
        magic = bytes(cur.take(4, "magic"))
        if magic != GGUF_MAGIC:
            raise FormatError(f"{self.path}: bad magic {magic!r}, expected b'GGUF'; not a GGUF file")
        self.version = cur.u32("version")
        if self.version not in SUPPORTED_VERSIONS:
            raise FormatError(f"{self.path}: GGUF version {self.version} is not supported (expected 2 or 3)")
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        if n_kv > cur.remaining() // 13 or n_tensors > cur.remaining() // 24:
            raise FormatError(f"{self.path}: header claims {n_kv} keys and {n_tensors} tensors, more than the file "
                              "holds; the file is truncated or corrupt")
        self.kv: dict[str, KV] = {}
        for _ in range(n_kv):
            key = cur.string("metadata key")
            if key in self.kv:
                raise cur.fail(f"duplicate metadata key {key!r}")
            vt, value, item = _read_value(cur, cur.u32(f"type of {key!r}"), key)
            self.kv[key] = KV(key, vt, value, item)
        self.alignment = DEFAULT_ALIGNMENT
        if Keys.General.ALIGNMENT in self.kv:
            a = self.kv[Keys.General.ALIGNMENT].value
            if not isinstance(a, int) or a <= 0 or a & (a - 1):
                raise FormatError(f"{self.path}: general.alignment = {a!r} is not a power of two")
            self.alignment = a
        raw: list[tuple[str, tuple[int, ...], int, int]] = []
        seen: set[str] = set()
        for _ in range(n_tensors):
            name = cur.string("tensor name")
            if name in seen:
                raise FormatError(f"{self.path}: duplicate tensor name {name!r}")
            seen.add(name)
            nd = cur.u32(f"dimension count of {name!r}")
            if nd == 0 or nd > GGML_MAX_DIMS:
                raise FormatError(f"{self.path}: tensor {name!r} has {nd} dimensions (1..{GGML_MAX_DIMS} allowed)")
            shape = tuple(cur.u64(f"shape of {name!r}") for _ in range(nd))
            gt = cur.u32(f"type of {name!r}")
            off = cur.u64(f"offset of {name!r}")
            if not is_known_type(gt):
                raise FormatError(f"{self.path}: tensor {name!r} has unknown ggml type {gt}")
            if any(d == 0 or d >= 1 << 62 for d in shape):
                raise FormatError(f"{self.path}: tensor {name!r} has invalid shape {list(shape)}")
            raw.append((name, shape, gt, off))
        self.data_offset = -(-cur.pos // self.alignment) * self.alignment
        self.tensors: dict[str, TensorInfo] = {}
        expected = 0
        for name, shape, gt, off in raw:
            try:
                nbytes = tensor_nbytes(shape, gt)
            except ValueError as e:
                raise FormatError(f"{self.path}: tensor {name!r}: {e}") from None
            if off % self.alignment:
                raise FormatError(f"{self.path}: tensor {name!r} data offset {off} is not aligned to {self.alignment}")
            start = self.data_offset + off
            if start + nbytes > self.size:
                raise FormatError(
                    f"{self.path}: tensor {name!r} data [{start}, {start + nbytes}) lies beyond the end of the file "
                    f"({self.size} bytes); the file is truncated"
                )
            # llama.cpp's gguf reader wants the data back to back in header order (each padded to the alignment)
            # and refuses anything else; tensors that overlap or skip bytes are a damaged or hand-made file
            if off != expected:
                what = "overlaps the previous tensor's data" if off < expected else "leaves a gap before it"
                raise FormatError(f"{self.path}: tensor {name!r} data starts at offset {off}, expected {expected}: it "
                                  f"{what}, which llama.cpp refuses; the file is damaged")
            expected += -(-nbytes // self.alignment) * self.alignment
            self.tensors[name] = TensorInfo(name, shape, gt, start, nbytes)

    # -- access ----------------------------------------------------------------------------
    def get(self, key: str, default: object = None) -> object:
        """A metadata value as a plain Python object, or ``default``."""
        kv = self.kv.get(key)
        return default if kv is None else kv.scalar()

    @property
    def architecture(self) -> str | None:
        a = self.get(Keys.General.ARCHITECTURE)
        return a if isinstance(a, str) else None

    def arch_get(self, suffix: str, default: object = None) -> object:
        """``<arch>.<suffix>`` (e.g. ``block_count``)."""
        return self.get(f"{self.architecture}.{suffix}", default)

    def read_tensor_bytes(self, name: str) -> bytes:
        t = self.tensors[name]
        with open(self.path, "rb") as fh:
            fh.seek(t.offset)
            data = fh.read(t.nbytes)
        if len(data) != t.nbytes:
            raise FormatError(f"{self.path}: tensor {name!r} is truncated")
        return data

    def read_tensor(self, name: str) -> np.ndarray:
        """Dequantized float32 values of a tensor, numpy shape (reversed ggml order)."""
        from ..ggml_types import dequantize

        t = self.tensors[name]
        return dequantize(self.read_tensor_bytes(name), t.ggml_type, t.shape)
