"""llama.cpp's rollback of a hybrid model's recurrent state (``n_rs_seq`` snapshots), which native rollback
(runtime/rollback.py) relies on: after a decode of n tokens, a ``seq_rm`` of the last r < n of them leaves the
state the first n - r would have left, for a batch shorter than ``n_rs_seq + 1`` too (``auto``'s verify below
k_max, its plain steps). The ``delta-net-conv-snapshots`` patch (patches/llama.cpp/0007, shipped in session 36) skips
the conv snapshots further back than such a batch, which pair with no DeltaNet snapshot; this checks that what it
keeps is all a valid rollback reads. It runs on whatever library is loaded: stock, patched, or a build of the
proposed set through ``LLAMA_CPP_LIB_PATH``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert
from gguf_mtp.runtime import patches
from gguf_mtp.runtime.llama import Batch, Context, Model

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny-qwen35-mtp"
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time there was"
CONTINUATION = " a small village by the sea, where fishermen mended their nets"
N_RS = 4  # what auto asks for (k_max): every verify below k = 4, and every plain step, is a shorter batch
#: the rolled-back state and the one decoded without the rolled-back tokens went through batches of different sizes
#: (the attention layers' products are reordered): logits equal within |a - b| <= ATOL + RTOL * |a|
ATOL, RTOL = 1e-3, 1e-3


@pytest.fixture(scope="module", params=["tiny", "qwen35", "qwen3next"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    """The shipped tiny model (trained weights) and synthetic qwen35 and qwen3next checkpoints (qwen3next keeps
    snapshots only where the library has the qwen3next-rs-rollback patch)."""
    if request.param == "tiny":
        path = convert(TINY, outfile=tmp_path_factory.mktemp("rs") / "tiny.gguf", outtype="q8_0", progress=False).path
    else:
        path = request.getfixturevalue("converted")(request.param, "trunk-only")
    with Model(path) as m:
        yield m


def _decode(ctx: Context, tokens: list[int], pos0: int) -> None:
    b = Batch(max(1, len(tokens)))
    b.fill(tokens, pos0, last_logits=True)
    ctx.decode_batch(b)


def _next_logits(m: Model, prompt: list[int], batch: list[int], keep: int, nxt: int) -> np.ndarray:
    """Logits of ``nxt`` after ``prompt``, a decode of ``batch`` and a rollback to its first ``keep`` tokens
    (``keep == len(batch)``: no rollback)."""
    with Context(m, n_ctx=128, n_threads=1, n_rs_seq=N_RS) as c:
        if c.n_rs_seq() != N_RS:
            pytest.skip(f"the loaded library keeps no rollback snapshots for this arch ({patches.startup_line()})")
        _decode(c, prompt, 0)
        if batch:
            _decode(c, batch, len(prompt))
        if keep < len(batch):
            assert c.seq_rm(len(prompt) + keep), "llama.cpp refused a rollback within n_rs_seq"
        _decode(c, [nxt], len(prompt) + keep)
        return c.logits_view(0).copy()


@pytest.mark.parametrize("n", [2, 3, 4, 5])  # 5: the full n_rs_seq + 1
def test_a_rollback_inside_a_batch_shorter_than_the_snapshots_is_exact(model: Model, n: int) -> None:
    prompt = model.tokenize(PROMPT)
    cont = model.tokenize(CONTINUATION, add_special=False)
    assert len(cont) > N_RS
    for r in range(1, n):  # r of the batch's n tokens rolled back (r = n would undo the whole batch: no snapshot)
        keep = n - r
        got = _next_logits(model, prompt, cont[:n], keep, cont[keep])
        want = _next_logits(model, prompt, cont[:keep], keep, cont[keep])
        bad = np.abs(got - want) > ATOL + RTOL * np.abs(want)
        assert not bad.any(), (n, r, int(bad.sum()), float(np.abs(got - want).max()))
        # and the rolled-back state differs from the one that kept the batch: the check can tell them apart
        kept = _next_logits(model, prompt, cont[:n], n, cont[keep])
        assert np.abs(kept - want).max() > 10 * (ATOL + RTOL * np.abs(want).max()), (n, r)
