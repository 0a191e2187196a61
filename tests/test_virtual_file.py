"""The model served as a ``FILE *`` (gguf_mtp/runtime/virtual.py: head-only grafts, ``run --draft-vocab``): the bytes
llama.cpp reads through glibc's ``fopencookie`` stream are those of the file the writer would write, however the
reader seeks and reads, and a model's bytes cross into Python in large pieces, not glibc's default 8 KiB ones, with
a bounded share read twice. No llama.cpp: the reads go through glibc as llama.cpp's loader makes them."""

from __future__ import annotations

import ctypes
import random
from pathlib import Path

import pytest

from gguf_mtp import convert
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.ggufio.writer import copy_tensor, write_gguf
from gguf_mtp.runtime import virtual
from gguf_mtp.runtime.virtual import VirtualFile, VirtualGGUF

pytestmark = [pytest.mark.fast,
              pytest.mark.skipif(virtual.unavailable() is not None, reason="no glibc fopencookie on this machine")]

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[GGUFModel, bytes]:
    """The tiny model (about 18 MB) and the bytes the writer makes of it: the reference for what is served."""
    d = tmp_path_factory.mktemp("virtual")
    src = convert(TINY, outfile=d / "tiny.gguf", progress=False).path
    m = GGUFModel(src)
    ref = d / "ref.gguf"
    write_gguf(ref, m.model_kvs(), [copy_tensor(t) for t in m.tensors.values()], alignment=m.alignment)
    return m, ref.read_bytes()


class Stream:
    """A reader of a VirtualFile through glibc's stdio, as llama.cpp's ``llama_file`` reads a ``FILE *``."""

    def __init__(self, vf: VirtualFile) -> None:
        self.vf, libc = vf, vf.libc
        libc.fread.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
        libc.fread.restype = ctypes.c_size_t
        libc.fseek.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
        libc.ftell.argtypes = [ctypes.c_void_p]
        libc.ftell.restype = ctypes.c_long

    def read(self, n: int) -> bytes:
        buf = ctypes.create_string_buffer(max(1, n))
        got = self.vf.libc.fread(buf, 1, n, self.vf.fp)
        return buf.raw[:got]

    def seek(self, pos: int) -> None:
        assert self.vf.libc.fseek(self.vf.fp, pos, 0) == 0
        assert self.vf.libc.ftell(self.vf.fp) == pos


def counted(vg: VirtualGGUF) -> list[int]:
    """Record the size of every piece glibc asks the virtual file for."""
    sizes: list[int] = []
    real = vg.read_into

    def read_into(buf: int, size: int) -> int:
        n = real(buf, size)
        sizes.append(n)
        return n

    vg.read_into = read_into  # type: ignore[method-assign]
    return sizes


def test_sequential_reads_give_the_writers_bytes_in_large_pieces(served: tuple[GGUFModel, bytes]) -> None:
    m, ref = served
    vg = VirtualGGUF.as_is(m, m.model_kvs())
    assert vg.size == len(ref)
    sizes = counted(vg)
    vf = VirtualFile(vg)
    try:
        s, out = Stream(vf), []
        for n in [1, 7, 4096, 3 << 20, 100_000, len(ref)]:  # small header reads, then whole tensors and the rest
            out.append(s.read(n))
        assert s.read(16) == b""  # the end
    finally:
        vf.close()
    assert b"".join(out) == ref
    # each piece ends at most at a segment's end (header, tensor, padding), else it is a whole buffer: glibc's own
    # 8 KiB pieces would take thousands of callbacks here
    pieces_bound = len(ref) // VirtualFile.BUFFER + 2 * len(vg.segments) + 2
    assert len(sizes) <= pieces_bound, (len(sizes), pieces_bound)
    assert vg.bytes_served == len(ref)


def test_seeks_to_each_tensor_read_its_bytes_and_little_twice(served: tuple[GGUFModel, bytes]) -> None:
    """The loader's pattern: the header, then a seek to each tensor's data and a read of exactly it, in an order of
    its own; and random seeks and reads anywhere."""
    m, ref = served
    vg = VirtualGGUF.as_is(m, m.model_kvs())
    vf = VirtualFile(vg)
    tensors = vg.segments[1:]
    rng = random.Random(0)
    try:
        s = Stream(vf)
        assert s.read(vg.segments[0].length) == ref[:vg.segments[0].length]
        for seg in rng.sample(tensors, len(tensors)):
            s.seek(seg.start)
            assert s.read(seg.length) == ref[seg.start:seg.start + seg.length], seg
        # glibc refills from a multiple of its buffer after a seek: at most a buffer of each tensor is read twice
        assert vg.bytes_served <= len(ref) + len(tensors) * VirtualFile.BUFFER
        for _ in range(200):
            pos = rng.randrange(len(ref) + 10)
            n = rng.choice([1, 13, 4096, 1 << 20, 5 << 20])
            s.seek(pos)
            assert s.read(n) == ref[pos:pos + n], (pos, n)
    finally:
        vf.close()
