"""What a loaded MTP context must do at the least: draft. Loading alone proves little (a context pointer is never
NULL once the constructor returned), so the load tests decode through the head and check that it reads its input."""

from __future__ import annotations

import numpy as np

from gguf_mtp.runtime.llama import Batch, Context, Model
from tests import helpers


def head_logits(m: Model, ctx: Context, token: int, h: np.ndarray) -> np.ndarray:
    """Logits of one draft from position 0: ``token`` with the hidden row ``h`` (the MTP context's input)."""
    ctx.clear()
    b = Batch(1, m.n_embd_out)
    b.add(token, 0, logits=True, embd=h.astype(np.float32))
    ctx.decode_batch(b)
    return helpers.logits(ctx, 0)


def assert_head_drafts(m: Model, ctx: Context) -> None:
    """One draft gives finite logits over the whole vocabulary; the same input gives the same logits; another
    hidden row or another token gives other logits (the head reads both of its inputs)."""
    rng = np.random.default_rng(0)
    h1, h2 = (rng.standard_normal(m.n_embd_out) for _ in range(2))
    tok = m.tokenize("def f(x):", add_special=False)[0]
    a = head_logits(m, ctx, tok, h1)
    assert a.shape == (m.n_vocab,) and np.isfinite(a).all()
    assert np.array_equal(a, head_logits(m, ctx, tok, h1))
    assert not np.allclose(a, head_logits(m, ctx, tok, h2)), "the head ignores its hidden row"
    assert not np.allclose(a, head_logits(m, ctx, (tok + 1) % m.n_vocab, h1)), "the head ignores its token"
