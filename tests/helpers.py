"""Test-only helpers (also used by bench/): plain decoding on a runtime ``Context``, KV equality, resharding.

Nothing here loads llama.cpp at import: the runtime is imported where a helper needs it, so fast-tier modules
(no llama-cpp-python) may import this file too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gguf import GGUFValueType

from gguf_mtp.ggufio.format import KV

if TYPE_CHECKING:
    from gguf_mtp.runtime.llama import Context, Model


def detokenize(model: "Model", tokens: Sequence[int]) -> str:
    """The text of ``tokens``: their pieces joined (invalid UTF-8 replaced)."""
    return b"".join(model.piece(t) for t in tokens).decode("utf-8", "replace")


def whole(ref: Any) -> np.ndarray:
    """A checkpoint tensor (``TensorRef`` or ``ArrayRef``) as a float32 array of its numpy shape."""
    return np.array(ref.read_f32(), dtype=np.float32).reshape(ref.shape)


def decode(ctx: "Context", tokens: Sequence[int], pos0: int) -> None:
    """Decode ``tokens`` at positions ``pos0..`` in sequence 0; logits are kept for the last one."""
    from gguf_mtp.runtime.llama import Batch

    batch = Batch(len(tokens))
    batch.fill(list(tokens), pos0, last_logits=True)
    ctx.decode_batch(batch)


def logits(ctx: "Context", i: int = -1) -> np.ndarray:
    """A copy of the logits of output row ``i`` of the last decode (-1: the last row)."""
    return ctx.logits_view(i).copy()


def greedy(ctx: "Context", prompt: Sequence[int], n: int) -> list[int]:
    """Plain greedy decoding: the reference every speculative path must reproduce."""
    decode(ctx, prompt, 0)
    out: list[int] = []
    pos = len(prompt)
    for _ in range(n):
        tok = int(np.argmax(logits(ctx)))
        out.append(tok)
        if ctx.model.is_eog(tok):
            break
        decode(ctx, [tok], pos)
        pos += 1
    return out


def same_value(a: KV, b: KV) -> bool:
    """Two metadata values are equal: same type, same value (float32 bit for bit, arrays element-wise)."""
    if a.vtype != b.vtype or a.item_type != b.item_type:
        return False
    if a.vtype == GGUFValueType.ARRAY and a.item_type != GGUFValueType.STRING:
        return bool(np.array_equal(a.value, b.value))
    if a.vtype == GGUFValueType.FLOAT32:
        return np.float32(a.value).tobytes() == np.float32(b.value).tobytes()
    return bool(a.value == b.value)


def reshard(source: str | os.PathLike[str], outfile: str | os.PathLike[str], *, shards: int,
            force: bool = False) -> list[Path]:
    """Rewrite a model as a split set of ``shards`` files (tensors in order, sizes balanced), as gguf-split does;
    returns the paths written."""
    from gguf_mtp.ggufio.model import GGUFModel
    from gguf_mtp.ggufio.writer import OutTensor, copy_tensor
    from gguf_mtp.surgery import _write

    m = GGUFModel(source)
    ts = [copy_tensor(t) for t in m.tensors.values()]
    per = -(-sum(t.nbytes for t in ts) // max(1, shards))
    groups: list[list[OutTensor]] = [[]]
    acc = 0
    for t in ts:
        if acc >= per and len(groups) < shards:
            groups.append([])
            acc = 0
        groups[-1].append(t)
        acc += t.nbytes
    paths, _ = _write(Path(outfile), m.model_kvs(), groups, alignment=m.alignment, force=force, inputs=m.files,
                      label="reshard", progress=False)
    return paths
