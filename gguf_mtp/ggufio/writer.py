"""Writing GGUF files: header first (all tensor infos are known up front), then tensor data streamed
tensor by tensor, so peak memory is one chunk whatever the model size."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
from gguf import GGUFValueType

from ..ggml_types import tensor_nbytes
from .format import DEFAULT_ALIGNMENT, GGUF_MAGIC, KV, SCALAR_DTYPES, WRITE_VERSION, align

if TYPE_CHECKING:
    from .model import Tensor

Progress = Callable[[int], None]
COPY_CHUNK = 64 << 20


@dataclass
class OutTensor:
    """A tensor to write: its header entry and a function that writes exactly ``nbytes`` of data."""

    name: str
    shape: tuple[int, ...]  # ggml order
    ggml_type: int
    write: Callable[[BinaryIO, Progress], None]
    source: tuple[Path, int] | None = None  # (file, offset) when the bytes are an exact copy of a file range
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        self.nbytes = tensor_nbytes(self.shape, self.ggml_type)


def copy_tensor(t: Tensor, name: str | None = None) -> OutTensor:
    """Tensor ``t`` of a GGUF file, to be written byte for byte (under ``name`` when given)."""
    info, path = t.info, t.file.path

    def write(fh: BinaryIO, progress: Progress) -> None:
        copy_range(path, info.offset, info.nbytes, fh, progress)

    return OutTensor(name or info.name, info.shape, info.ggml_type, write, source=(path, info.offset))


def _enc_str(s: str) -> bytes:
    b = s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


def encode_kv(kv: KV) -> bytes:
    out = [_enc_str(kv.key), struct.pack("<I", int(kv.vtype))]
    if kv.vtype == GGUFValueType.STRING:
        out.append(_enc_str(kv.value))
    elif kv.vtype == GGUFValueType.ARRAY:
        assert kv.item_type is not None
        out.append(struct.pack("<IQ", int(kv.item_type), len(kv.value)))
        if kv.item_type == GGUFValueType.STRING:
            out.extend(_enc_str(s) for s in kv.value)
        else:
            out.append(np.asarray(kv.value, dtype=SCALAR_DTYPES[kv.item_type]).tobytes())
    else:
        out.append(np.asarray(kv.value, dtype=SCALAR_DTYPES[kv.vtype]).tobytes())
    return b"".join(out)


def encode_header(kvs: Sequence[KV], tensors: Sequence[OutTensor], alignment: int) -> tuple[bytes, list[int]]:
    """Header bytes (padded to ``alignment``) and each tensor's offset relative to the data section."""
    parts = [GGUF_MAGIC, struct.pack("<IQQ", WRITE_VERSION, len(tensors), len(kvs))]
    parts.extend(encode_kv(kv) for kv in kvs)
    offsets, off = [], 0
    for t in tensors:
        offsets.append(off)
        parts.append(_enc_str(t.name) + struct.pack("<I", len(t.shape)))
        parts.append(struct.pack(f"<{len(t.shape)}Q", *t.shape))
        parts.append(struct.pack("<IQ", int(t.ggml_type), off))
        off = align(off + t.nbytes, alignment)
    header = b"".join(parts)
    return header + b"\0" * (align(len(header), alignment) - len(header)), offsets


def write_all(fh: BinaryIO, data: bytes | memoryview | np.ndarray) -> None:
    if isinstance(data, np.ndarray):
        data = data.data  # the array's buffer (numpy's stubs give ndarray a __buffer__ only from Python 3.12)
    mv = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else memoryview(data)
    while mv:
        n = fh.write(mv)
        if n is None or n <= 0:
            raise OSError("short write")
        mv = mv[n:]


def copy_range(src: Path, offset: int, nbytes: int, dst: BinaryIO, progress: Progress) -> None:
    """Copy ``nbytes`` of ``src`` from ``offset`` into ``dst`` (kernel-side where the OS allows)."""
    with open(src, "rb", buffering=0) as fin:
        dfd, sfd = dst.fileno(), fin.fileno()
        done = 0
        use_cfr = hasattr(os, "copy_file_range")
        while done < nbytes:
            n = min(COPY_CHUNK, nbytes - done)
            got = 0
            if use_cfr:
                try:
                    got = os.copy_file_range(sfd, dfd, n, offset + done)
                except OSError:
                    use_cfr = False
            if not use_cfr:
                buf = os.pread(sfd, n, offset + done)
                write_all(dst, buf)
                got = len(buf)
            if got <= 0:
                raise OSError(f"{src}: unexpected end of file at byte {offset + done}")
            done += got
            progress(got)


def write_gguf(
    path: Path,
    kvs: Sequence[KV],
    tensors: Sequence[OutTensor],
    *,
    alignment: int = DEFAULT_ALIGNMENT,
    progress: Progress = lambda n: None,
    on_tensor: Callable[[], None] = lambda: None,
) -> None:
    """Write a complete GGUF file at ``path`` (callers pass a temp path from :func:`atomic_paths`)."""
    header, offsets = encode_header(kvs, tensors, alignment)
    # no O_TRUNC: on ext4, truncating a file to zero marks it for a forced flush on close
    # (auto_da_alloc), which would make every write synchronous. The temp file starts empty anyway.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    if os.fstat(fd).st_size:
        os.ftruncate(fd, 0)
    with os.fdopen(fd, "wb", buffering=0) as fh:
        write_all(fh, header)
        base = len(header)
        for t, off in zip(tensors, offsets):
            pos = fh.seek(0, os.SEEK_END)
            if pos < base + off:
                write_all(fh, b"\0" * (base + off - pos))
            start = fh.tell()
            t.write(fh, progress)
            fh.seek(0, os.SEEK_END)
            written = fh.tell() - start
            if written != t.nbytes:
                raise RuntimeError(f"tensor {t.name}: wrote {written} bytes, expected {t.nbytes}")
            on_tensor()
