"""Turning a :class:`PlannedTensor` into GGUF bytes: exact byte copies where nothing changes, otherwise
chunked decode -> transform -> encode on a small thread pool (numpy releases the GIL), in bounded memory."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import Any, BinaryIO, TypeVar

import numpy as np
from gguf import GGMLQuantizationType

from .families.base import PlannedTensor, Source
from .ggufio.writer import OutTensor, Progress, write_all
from .ggml_types import encode

T = GGMLQuantizationType
CHUNK_ELEMS = 1 << 21  # 2 Mi elements: 8 MiB of float32 per chunk in flight
_RAW_COPY = {"BF16": T.BF16, "F16": T.F16, "F32": T.F32}

A = TypeVar("A")
R = TypeVar("R")


def ordered_map(pool: Executor | None, fn: Callable[[A], R], items: Iterable[A], ahead: int = 4) -> Iterator[R]:
    """``map`` over a pool keeping at most ``ahead`` results in flight, yielding in order."""
    if pool is None:
        yield from map(fn, items)
        return
    q: deque[Future[R]] = deque()
    for it in items:
        q.append(pool.submit(fn, it))
        if len(q) >= ahead:
            yield q.popleft().result()
    while q:
        yield q.popleft().result()


def _chunks(src: Source, row: int) -> Iterator[tuple[Source, int, int]]:
    step = max(1, CHUNK_ELEMS // row) * row
    for off in range(0, src.n, step):
        yield src, src.start + off, min(step, src.n - off)


def out_tensor(pt: PlannedTensor, ggml_type: int, pool: Executor | None) -> OutTensor:
    """The writer-side tensor for a plan entry stored as ``ggml_type``."""
    raw_ok = pt.whole is None and pt.elementwise is None and all(
        _RAW_COPY.get(s.ref.dtype) == ggml_type for s in pt.sources
    )
    if raw_ok:
        def write(fh: BinaryIO, progress: Progress) -> None:
            for s in pt.sources:
                s.ref.write_raw(fh, s.start, s.n, progress)
        return OutTensor(pt.name, pt.ggml_shape, ggml_type, write)

    if pt.whole is None:
        row = pt.np_shape[-1]

        def work(job: tuple[Source, int, int]) -> tuple[Any, int]:
            s, start, count = job
            x = s.ref.read_f32(start, count)
            if pt.elementwise is not None:
                x = pt.elementwise(x)
            return encode(x, ggml_type), count * s.ref.itemsize

        def write(fh: BinaryIO, progress: Progress) -> None:
            jobs = (j for s in pt.sources for j in _chunks(s, row))
            for data, nin in ordered_map(pool, work, jobs):
                write_all(fh, data)
                progress(nin)
        return OutTensor(pt.name, pt.ggml_shape, ggml_type, write)

    if pt.elementwise is None and all(_RAW_COPY.get(s.ref.dtype) == ggml_type for s in pt.sources):
        # whole-tensor transforms only move values (reorders, splits): apply them to the stored
        # bits, no float round trip
        def write_layout(fh: BinaryIO, progress: Progress) -> None:
            x = np.concatenate([s.ref.read_raw(s.start, s.n) for s in pt.sources])
            write_all(fh, np.ascontiguousarray(pt.whole(x.reshape(pt.src_shape))))  # type: ignore[misc]
            progress(pt.src_bytes)
        return OutTensor(pt.name, pt.ggml_shape, ggml_type, write_layout)

    def write_whole(fh: BinaryIO, progress: Progress) -> None:
        x = np.concatenate([s.ref.read_f32(s.start, s.n) for s in pt.sources])
        if pt.elementwise is not None:
            x = pt.elementwise(x)
        y = np.ascontiguousarray(pt.whole(x.reshape(pt.src_shape)), dtype=np.float32).reshape(-1)  # type: ignore[misc]
        del x
        row = pt.np_shape[-1]
        step = max(1, CHUNK_ELEMS // row) * row
        for data in ordered_map(pool, lambda off: encode(y[off:off + step], ggml_type), range(0, y.size, step)):
            write_all(fh, data)
        progress(pt.src_bytes)
    return OutTensor(pt.name, pt.ggml_shape, ggml_type, write_whole)
