"""Reading safetensors shards without torch: parse the JSON header ourselves, read row ranges with
``pread`` into bounded buffers (so peak memory stays one chunk, not one shard)."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import FormatError, UnsupportedError
from ..files import open_input
from ..ggml_types import bf16_to_f32
from ..ggufio.format import n_elements
from ..ggufio.writer import Progress, copy_range, write_all
from ..paths import shown

# safetensors dtype -> (bytes per element, numpy storage dtype)
DTYPES: dict[str, tuple[int, np.dtype]] = {
    "F32": (4, np.dtype("<f4")),
    "F16": (2, np.dtype("<f2")),
    "BF16": (2, np.dtype("<u2")),
    "F64": (8, np.dtype("<f8")),
    "F8_E4M3": (1, np.dtype("u1")),
    "U8": (1, np.dtype("u1")),
    "I8": (1, np.dtype("i1")),
    "I32": (4, np.dtype("<i4")),
    "I64": (8, np.dtype("<i8")),
}
MAX_HEADER = 100 << 20


def _e4m3_table() -> np.ndarray:
    """float32 value of each of the 256 float8 e4m3fn bit patterns (bias 7, no infinities, 0x7f/0xff NaN)."""
    b = np.arange(256, dtype=np.uint32)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> 3) & 0xF
    man = (b & 0x7).astype(np.float64)
    val = np.where(exp == 0, man / 8 * 2.0 ** -6, (1 + man / 8) * 2.0 ** (exp.astype(np.float64) - 7))
    val = sign * val
    val[(b & 0x7F) == 0x7F] = np.nan
    return val.astype(np.float32)


E4M3 = _e4m3_table()


@dataclass(frozen=True)
class TensorRef:
    """Where one checkpoint tensor's bytes lie. ``shape`` is in numpy (PyTorch) order."""

    name: str
    path: Path
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    scale: TensorRef | None = None  # FP8 block scales (``weight_scale_inv``)
    block: int = 128

    @property
    def n_elements(self) -> int:
        return n_elements(self.shape)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype][0]

    def read_raw(self, start: int = 0, count: int | None = None) -> np.ndarray:
        """Stored values of the flat element range ``[start, start+count)``, in the storage dtype."""
        count = self.n_elements - start if count is None else count
        size, dt = DTYPES[self.dtype]
        start_b = start * size
        n_b = count * size
        buf = np.empty(n_b, dtype=np.uint8)
        with open(self.path, "rb", buffering=0) as fh:
            fh.seek(self.offset + start_b)
            got = 0
            mv = buf.data  # memoryview(buf) (numpy's stubs give ndarray a __buffer__ only from Python 3.12)
            while got < n_b:
                n = fh.readinto(mv[got:])
                if not n:
                    raise FormatError(f"{self.path}: tensor {self.name!r} is truncated; re-download this shard")
                got += n
        return buf.view(dt)

    def read_f32(self, start: int = 0, count: int | None = None) -> np.ndarray:
        """float32 values of a flat element range."""
        raw = self.read_raw(start, count)
        if self.dtype == "BF16":
            return bf16_to_f32(raw)
        if self.dtype in ("F16", "F32", "F64"):
            return raw.astype(np.float32, copy=False)
        if self.dtype == "F8_E4M3" and self.scale is not None and len(self.shape) == 2:
            rows, cols = self.shape
            idx = np.arange(start, start + len(raw), dtype=np.int64)
            s = self.scale.read_f32().reshape(self.scale.shape)
            return E4M3[raw] * s[idx // cols // self.block, idx % cols // self.block]
        if self.dtype == "F8_E4M3":
            raise UnsupportedError(f"{self.path}: tensor {self.name!r} is FP8 without a 2-D weight_scale_inv "
                                   "beside it; only block-scaled FP8 (DeepSeek / Qwen FP8 releases) is supported")
        raise UnsupportedError(
            f"{self.path}: tensor {self.name!r} is stored as {self.dtype}; this needs a dequantizer "
            "(quantized source checkpoints are not supported: convert from the bf16/fp16 release)"
        )

    def write_raw(self, fh: BinaryIO, start: int, count: int, progress: Progress) -> None:
        """Copy the stored bytes of a flat element range into ``fh`` (no decode)."""
        copy_range(self.path, self.offset + start * self.itemsize, count * self.itemsize, fh, progress)


@dataclass(frozen=True, eq=False)
class ArrayRef:
    """A tensor computed by the converter (not in the checkpoint), held in memory as float32 and read like a
    :class:`TensorRef`, so a plan can write it through the same path as checkpoint tensors."""

    name: str
    data: np.ndarray  # numpy shape
    dtype: str = "F32"
    path: None = None  # no file behind it: whole-file checks and range fetches skip it
    scale: None = None

    def __post_init__(self) -> None:
        # a private contiguous float32 copy: later edits of the caller's array cannot change the plan
        object.__setattr__(self, "data", np.array(self.data, dtype=np.float32, order="C"))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def n_elements(self) -> int:
        return int(self.data.size)

    @property
    def itemsize(self) -> int:
        return 4

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def read_raw(self, start: int = 0, count: int | None = None) -> np.ndarray:
        count = self.n_elements - start if count is None else count
        return self.data.reshape(-1)[start:start + count]

    read_f32 = read_raw  # stored as float32 already

    def write_raw(self, fh: BinaryIO, start: int, count: int, progress: Progress) -> None:
        write_all(fh, self.read_raw(start, count))
        progress(count * 4)


#: what a plan's Source may point at
Ref = TensorRef | ArrayRef


def attach_fp8_scales(tensors: dict[str, TensorRef], block: int = 128) -> dict[str, TensorRef]:
    """Pair every FP8 ``X.weight`` with its ``X.weight_scale_inv`` (the dequantizer reads both)."""
    out = dict(tensors)
    for name, ref in tensors.items():
        if ref.dtype == "F8_E4M3" and name + "_scale_inv" in tensors:
            out[name] = replace(ref, scale=tensors[name + "_scale_inv"], block=block)
    return out


@dataclass(frozen=True)
class HeaderEntry:
    """One tensor of a parsed safetensors header; offsets are relative to the data region."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"the key {shown(k)} appears twice")
        seen[k] = v
    return seen


def _nonneg_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def header_length(head: bytes, size: int, where: str) -> int:
    """The header length field of a safetensors file of ``size`` bytes, checked before anything is read.

    Its value is not shown in messages: for a file that is not safetensors it is eight bytes of that file.
    """
    if len(head) < 8 or size < 8:
        raise FormatError(f"{where}: file is {size} bytes, too small for safetensors; re-download it")
    (n,) = struct.unpack("<Q", head[:8])
    if n > MAX_HEADER or 8 + n > size:
        raise FormatError(f"{where}: not a safetensors file (its header length field is invalid for a "
                          f"{size}-byte file); re-download it")
    return n


def parse_header(raw: bytes, size: int, where: str) -> list[HeaderEntry]:
    """Tensor entries of a safetensors header ``raw`` (the JSON after the length field) for a file of
    ``size`` bytes, checked as the safetensors library does: every entry well-typed, dtype x shape equal
    to its byte span, spans inside the file, contiguous and not overlapping, and the data region exactly
    the rest of the file (a longer file is refused too)."""
    if not raw.lstrip(b" ").startswith(b"{"):
        raise FormatError(f"{where}: safetensors header is not valid JSON (it must be an object, starting with "
                          "'{'); not a safetensors file, re-download it")
    try:
        meta = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise FormatError(f"{where}: safetensors header is not UTF-8; re-download it") from None
    except RecursionError:
        raise FormatError(f"{where}: safetensors header is nested too deeply; not a valid file") from None
    except ValueError as e:
        raise FormatError(f"{where}: safetensors header is not valid JSON ({str(e)[:160]}); re-download it") from None
    if not isinstance(meta, dict):
        raise FormatError(f"{where}: safetensors header is not a JSON object; re-download it")
    if not isinstance(meta.get("__metadata__", {}), dict):
        raise FormatError(f"{where}: safetensors __metadata__ is not an object; not a valid file")
    base = 8 + len(raw)
    entries: list[HeaderEntry] = []
    for name, ent in meta.items():
        if name == "__metadata__":
            continue
        what = f"{where}: tensor {shown(name)}"
        if not (isinstance(ent, dict) and isinstance(ent.get("dtype"), str)
                and isinstance(ent.get("shape"), list) and all(_nonneg_int(d) for d in ent["shape"])
                and isinstance(ent.get("data_offsets"), list) and len(ent["data_offsets"]) == 2
                and all(_nonneg_int(o) for o in ent["data_offsets"])):
            raise FormatError(f"{what} has a malformed header entry (needs dtype, shape and data_offsets "
                              "as non-negative integers)")
        dtype, shape, (lo, hi) = ent["dtype"], tuple(ent["shape"]), ent["data_offsets"]
        if dtype not in DTYPES:
            raise UnsupportedError(f"{what} has dtype {shown(dtype, 24)}, which gguf-mtp cannot read")
        count = 1
        for d in shape:
            count *= d
        if hi < lo or hi - lo != count * DTYPES[dtype][0]:
            raise FormatError(f"{what} byte range [{lo}, {hi}) does not match shape {list(shape)} {dtype}")
        if base + hi > size:
            raise FormatError(f"{what} ends at byte {base + hi} but the file has {size}; the shard is truncated, "
                              "re-download it")
        entries.append(HeaderEntry(name, dtype, shape, lo, hi))
    end, last = 0, None
    for ent in sorted(entries, key=lambda t: (t.start, t.end)):
        if ent.start < end:
            raise FormatError(f"{where}: tensors {shown(last)} and {shown(ent.name)} overlap (bytes "
                              f"[{ent.start}, ...) of the data region are claimed twice); not a valid file")
        if ent.start > end:
            raise FormatError(f"{where}: {ent.start - end} bytes before tensor {shown(ent.name)} belong to no "
                              "tensor; not a valid safetensors file")
        end, last = ent.end, ent.name
    if base + end != size:
        raise FormatError(f"{where}: the file has {size - base - end} bytes after its last tensor (the header "
                          f"describes {base + end} bytes); re-download it")
    return entries


def read_header(path: Path) -> dict[str, TensorRef]:
    """Tensor index of one ``.safetensors`` file, with every entry checked against the file (:func:`parse_header`)."""
    try:
        with open_input(path, "safetensors shard") as fh:  # regular files only: a FIFO would block
            size = os.fstat(fh.fileno()).st_size
            n = header_length(fh.read(8), size, str(path))
            raw = fh.read(n)
    except FileNotFoundError:
        raise FormatError(f"{path}: shard is missing; download it (or the whole repo) again") from None
    except OSError as e:
        raise FormatError(f"{path}: cannot read ({e.strerror})") from None
    if len(raw) < n:
        raise FormatError(f"{path}: the file changed while it was read; try again")
    return {t.name: TensorRef(t.name, path, t.dtype, t.shape, 8 + n + t.start, t.end - t.start)
            for t in parse_header(raw, size, str(path))}
