"""How many of a decode's quantized mat-vecs read the activation the one before them quantized (patch 0014,
cuda-mmvq-share-q8-1): ggml-cuda quantizes a mat-vec's src1 to q8_1 before every product, so each of these repeats
a quantize kernel. Counted on the CPU from the graph llama.cpp builds (llama.cpp's eval callback sees every node in
order): a MUL_MAT of a quantized weight by an F32 src1 of at most 8 columns (ggml-cuda's mat-vec) whose src1 is the
previous such MUL_MAT's, same data, shape and strides, with no node writing over it in between. The graph is the
one a GPU runs, less ggml-cuda's fusions (which, for one column, already quantize gate and up once).

    python -m bench.mmvq_src1 MODEL.gguf [--rows 3]   # rows: a verify of k + 1 tokens (1: a plain decode)
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import re
from typing import NamedTuple

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)

MMVQ_MAX_COLS = 8  # ggml-cuda's MMVQ_MAX_BATCH_SIZE
FLOAT_TYPES = (0, 1, 30)  # F32, F16, BF16: not quantized weights (ggml_type ids)


class Tensor(ctypes.Structure):
    """ggml.h's ``struct ggml_tensor`` (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10, GGML_MAX_NAME 64)."""


Tensor._fields_ = [
    ("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
    ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(Tensor) * 10), ("view_src", ctypes.POINTER(Tensor)), ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64), ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8),
]


class Node(NamedTuple):  # not a dataclass: runpy (tests/test_bench_imports.py) runs this module unregistered
    op: str
    name: str
    data: int
    nbytes: int
    #: a MUL_MAT's src1 as (data, ne, nb, type), its src0's type
    src1: tuple[int, tuple[int, ...], tuple[int, ...], int] | None
    src0_type: int | None


def count(nodes: list[Node]) -> tuple[int, int, collections.Counter[str]]:
    """(mat-vecs, of those reading the previous one's src1, the latter by node name less its layer number)."""
    kept: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
    span = (0, 0)
    n = hits = 0
    names: collections.Counter[str] = collections.Counter()
    for nd in nodes:
        s1 = nd.src1
        if (nd.op == "MUL_MAT" and s1 is not None and s1[3] == 0 and s1[1][1] <= MMVQ_MAX_COLS
                and nd.src0_type not in FLOAT_TYPES):
            n += 1
            key = s1[:3]
            if key == kept:
                hits += 1
                names[re.sub(r"-\d+$", "", nd.name) if not re.fullmatch(r"node_\d+", nd.name) else "(unnamed)"] += 1
            kept = key
            span = (s1[0], s1[0] + s1[2][3] * s1[1][3])
        elif kept is not None and nd.data and nd.data < span[1] and nd.data + nd.nbytes > span[0]:
            kept = None  # written over: what was quantized from it is stale
    return n, hits, names


def decode_nodes(model_path: str, rows: int) -> list[Node]:
    """The nodes, in order, of a decode of ``rows`` tokens (after a 16-token prompt) on the CPU."""
    import llama_cpp.llama_cpp as ll

    from gguf_mtp.runtime import llama as L
    from gguf_mtp.runtime.llama import Batch, Context, Model

    lib = ctypes.CDLL(ll._lib._name)
    lib.ggml_op_name.restype = ctypes.c_char_p
    lib.ggml_op_name.argtypes = [ctypes.c_int]
    lib.ggml_nbytes.restype = ctypes.c_size_t
    lib.ggml_nbytes.argtypes = [ctypes.POINTER(Tensor)]
    seen: list[Node] = []

    def on_node(t: ctypes._Pointer[Tensor], ask: bool, _user: ctypes.c_void_p) -> bool:
        if ask:
            x = t.contents
            s0, s1 = x.src[0], x.src[1]
            seen.append(Node(lib.ggml_op_name(x.op).decode(), x.name.decode(errors="replace"), x.data or 0,
                             lib.ggml_nbytes(t),
                             (s1.contents.data or 0, tuple(s1.contents.ne), tuple(s1.contents.nb), s1.contents.type)
                             if s1 else None, s0.contents.type if s0 else None))
        return False  # no node's values are needed: the scheduler computes as usual

    callback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.POINTER(Tensor), ctypes.c_bool, ctypes.c_void_p)(on_node)
    default_params = L._ll.llama_context_default_params

    def with_callback():  # type: ignore[no-untyped-def]
        p = default_params()
        p.cb_eval = ctypes.cast(callback, type(p.cb_eval))
        p.cb_eval_user_data = None
        return p

    with Model(model_path, n_gpu_layers=0) as m:
        L._ll.llama_context_default_params = with_callback
        try:
            ctx = Context(m, n_ctx=256, n_batch=64, n_rs_seq=rows - 1, embeddings_nextn=rows > 1,
                          n_outputs_max=rows, n_outputs_per_seq=rows)
        finally:
            L._ll.llama_context_default_params = default_params
        with ctx:
            toks = m.tokenize("The quick brown fox jumps over the lazy dog. " * 4)[:16 + rows]
            b = Batch(64)
            b.fill(toks[:16], 0, last_logits=True)
            ctx.decode_batch(b)
            seen.clear()
            b.clear()
            for i in range(rows):
                b.add(toks[16 + i], 16 + i, logits=True)
            ctx.decode_batch(b)
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--rows", type=int, default=3, help="tokens in the decode, 1-8 (default 3: a k=2 verify)")
    a = ap.parse_args()
    if not 1 <= a.rows <= MMVQ_MAX_COLS:
        ap.error(f"--rows must be 1-{MMVQ_MAX_COLS} (more columns take ggml-cuda's other kernels)")
    nodes = decode_nodes(a.model, a.rows)
    n, hits, names = count(nodes)
    print(f"{a.rows} row(s): {len(nodes)} nodes, {n} quantized mat-vecs, {hits} of them reading the src1 the "
          f"previous one quantized")
    for name, c in names.most_common():
        print(f"  {c:4d}  {name}")


if __name__ == "__main__":
    from bench.common import exit_after

    exit_after(main)
