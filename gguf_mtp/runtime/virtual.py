"""A model that exists only as a ``FILE *``: llama.cpp reads a GGUF through ``fopencookie`` callbacks that serve a
new header from memory and every tensor's bytes straight from the files they are in. A grafted model (trunk +
head-only sidecar: one copy of the embeddings and LM head, the sidecar borrows the trunk's), or a model as it is
under other metadata (a draft vocabulary for one session, ``--draft-vocab`` on ``run``). Nothing is written to disk.

Linux/glibc only (``fopencookie``); llama.cpp then loads without mmap, as from any ``FILE *``.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import GgufMtpError, UnsupportedError
from ..ggufio.format import KV
from ..ggufio.model import GGUFModel, Tensor
from ..ggufio.writer import OutTensor, copy_tensor, encode_header
from ..head import GraftPlan

_ssize_t = ctypes.c_ssize_t
_READ = ctypes.CFUNCTYPE(_ssize_t, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t)
_WRITE = ctypes.CFUNCTYPE(_ssize_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)
_SEEK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int)
_CLOSE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _IoFuncs(ctypes.Structure):
    _fields_ = [("read", _READ), ("write", _WRITE), ("seek", _SEEK), ("close", _CLOSE)]


@dataclass(frozen=True)
class _Segment:
    start: int
    length: int
    path: Path | None  # None: bytes from ``data``
    offset: int
    data: bytes = b""


class VirtualGGUF:
    """The bytes of a GGUF file assembled from a header in memory and ranges of other files: ``kvs`` and
    ``tensors`` (each copied from its source file) at ``alignment``."""

    def __init__(self, kvs: Sequence[KV], tensors: Sequence[OutTensor], alignment: int) -> None:
        for t in tensors:
            if t.source is None:
                raise UnsupportedError(f"tensor {t.name!r} is re-encoded; a virtual model can only copy bytes")
        header, offsets = encode_header(list(kvs), list(tensors), alignment)
        segs = [_Segment(0, len(header), None, 0, header)]
        for t, off in zip(tensors, offsets):
            assert t.source is not None  # checked above
            path, src_off = t.source
            segs.append(_Segment(len(header) + off, t.nbytes, path, src_off))
        self.size = len(header) + (offsets[-1] + tensors[-1].nbytes if tensors else 0)
        self.segments = segs
        self._starts = [s.start for s in segs]
        self._fds: dict[Path, int] = {}
        self.pos = 0
        self.bytes_served = 0

    @classmethod
    def grafted(cls, plan: GraftPlan, kvs: Sequence[KV] | None = None) -> VirtualGGUF:
        """The model ``plan`` grafts (with ``kvs`` instead of the plan's metadata when given)."""
        return cls(plan.kvs if kvs is None else kvs, [t for g in plan.groups for t in g], plan.alignment)

    @classmethod
    def as_is(cls, model: GGUFModel, kvs: Sequence[KV]) -> VirtualGGUF:
        """``model``'s tensors (every shard's, in order) as they are, under the metadata ``kvs``."""
        return cls(kvs, [copy_tensor(Tensor(i, s)) for s in model.shards for i in s.tensors.values()],
                   model.alignment)

    def _fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def read_into(self, buf: int, size: int) -> int:
        """Copy up to ``size`` bytes at the current position into C memory at ``buf``, stopping at the end of the
        segment (header, tensor, padding) they start in: a reader seeks to each tensor and reads just it, and the
        stream's buffer would be filled past the tensor for nothing (the seek throws it away). 0: the end."""
        if self.pos >= self.size:
            return 0
        i = bisect.bisect_right(self._starts, self.pos) - 1
        seg = self.segments[i]
        inside = self.pos - seg.start
        if inside >= seg.length:  # alignment padding between tensors
            nxt = self.segments[i + 1].start if i + 1 < len(self.segments) else self.size
            n = min(size, nxt - self.pos)
            ctypes.memset(buf, 0, n)
        else:
            n = min(size, seg.length - inside)
            if seg.path is None:
                ctypes.memmove(buf, seg.data[inside:inside + n], n)
            else:
                self._pread_into(seg.path, buf, n, seg.offset + inside)
        self.pos += n
        self.bytes_served += n
        return n

    def _pread_into(self, path: Path, addr: int, n: int, offset: int) -> None:
        """``n`` bytes of ``path`` at ``offset`` straight into C memory at ``addr``: the kernel copies from the page
        cache into llama.cpp's buffer, with no Python bytes object between (a model's every byte passes here)."""
        fd = self._fd(path)
        while n > 0:
            got = os.preadv(fd, [(ctypes.c_char * n).from_address(addr)], offset)  # may be short (2 GiB cap)
            if got <= 0:
                raise OSError(f"{path}: short read")
            addr, n, offset = addr + got, n - got, offset + got

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


@functools.cache
def _libc_name() -> str | None:
    return ctypes.util.find_library("c")  # runs ldconfig: once a process


def unavailable() -> str | None:
    """Why this machine cannot serve a virtual model (no glibc ``fopencookie``), or None where it can."""
    libc_name = _libc_name()
    if libc_name is None:
        return "no C library with fopencookie (glibc) was found"
    if not hasattr(ctypes.CDLL(libc_name), "fopencookie"):
        return "this C library has no fopencookie (glibc)"
    return None


class VirtualFile:
    """``fopencookie`` FILE* over a :class:`VirtualGGUF`; keep this object alive while llama.cpp reads."""

    # the stream's buffer: a callback a BUFFER of a tensor. glibc seeks to a multiple of it and refills from there,
    # so each tensor costs up to a BUFFER of bytes read twice: larger buffers mean fewer callbacks but more bytes
    # read again. Chosen by load time among 256 KiB to 8 MiB; `python -m bench.virtual_load` measures it
    BUFFER = 1 << 20

    def __init__(self, vg: VirtualGGUF) -> None:
        why = unavailable()
        if why:
            raise UnsupportedError(f"a model served through gguf-mtp (a head-only sidecar, --draft-vocab) needs "
                                   f"glibc: {why}; use a self-contained sidecar, or a file written with the map")
        libc_name = _libc_name()
        assert libc_name is not None
        self.libc = ctypes.CDLL(libc_name, use_errno=True)
        self.vg = vg

        def _read(cookie: int, buf: ctypes._Pointer[ctypes.c_char], size: int) -> int:
            try:
                return vg.read_into(ctypes.cast(buf, ctypes.c_void_p).value or 0, size)
            except Exception:  # noqa: BLE001 - must not raise into C
                return -1

        def _seek(cookie: int, offset: ctypes._Pointer[ctypes.c_int64], whence: int) -> int:
            base = {0: 0, 1: vg.pos, 2: vg.size}.get(whence)
            if base is None:
                return -1
            new = base + offset[0]
            if new < 0:
                return -1
            vg.pos = new
            offset[0] = new
            return 0

        self._funcs = _IoFuncs(_READ(_read), _WRITE(0), _SEEK(_seek), _CLOSE(lambda c: 0))
        self.libc.fopencookie.restype = ctypes.c_void_p
        self.libc.fopencookie.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _IoFuncs]
        self.fp = self.libc.fopencookie(None, b"rb", self._funcs)
        if not self.fp:
            raise GgufMtpError("fopencookie failed")
        # glibc reads a cookie stream only through its buffer (no direct read for large requests), and with a NULL
        # buffer it picks 8 KiB whatever size is asked: a buffer of our own makes each Python callback a large read
        self._buf = ctypes.create_string_buffer(self.BUFFER)
        self.libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        if self.libc.setvbuf(self.fp, ctypes.addressof(self._buf), 0, self.BUFFER) != 0:  # 0: _IOFBF
            raise GgufMtpError("setvbuf failed on a model served through fopencookie")

    def close(self) -> None:
        if self.fp:
            self.libc.fclose.argtypes = [ctypes.c_void_p]
            self.libc.fclose(self.fp)
            self.fp = None
            self.vg.close()
