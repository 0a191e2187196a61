"""The proposed mtp-draft-chain patch (patches/llama.cpp/proposed/0016, numbered 0004 before session 38): with
``llama_set_mtp_chain(ctx, c)`` one decode of an MTP context drafts c + 1 tokens, each chained row taking the argmax
of the row before and its h_nextn on the device. Two MTP contexts are fed the same rows (the target's own hidden
rows of a prompt): one drafts k = 3 the way the proposer does (three decodes), the other in one chained decode; the
drafts, their logits and hidden rows, and what the head's KV cache holds afterwards (a further plain decode on each)
must agree. Skipped where the loaded library lacks the marker (the stock wheel and CI's patched one: proposed
patches are not applied there); ``LLAMA_CPP_LIB_PATH`` at a build of the patched source runs it."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import patches
from gguf_mtp.runtime.llama import Batch, Context, Model

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny-qwen35-mtp"
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
K = 3  # drafts a step: one plain row's logits and K - 1 chained rows
#: logits of the two ways may differ by float reordering only (a pass computes its rows in a smaller matmul):
#: |a - b| <= ATOL + RTOL * |a|; a draft may differ only where the sequential logits' top two are closer than that
ATOL, RTOL = 1e-3, 1e-3

pytestmark = pytest.mark.skipif("mtp-draft-chain" not in patches.names(),
                                reason="the loaded libllama lacks the mtp-draft-chain patch (a proposed patch: "
                                       "LLAMA_CPP_LIB_PATH at a build with GGUF_MTP_PATCHES=proposed runs this)")


def _set_chain(ctx: Context, n_chain: int) -> None:
    import llama_cpp.llama_cpp as ll

    fn = ctypes.CDLL(ll._lib._name).llama_set_mtp_chain
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int32], None
    fn(ctx.ptr, n_chain)


@pytest.fixture(autouse=True)
def _chaining(monkeypatch: pytest.MonkeyPatch) -> None:
    """These contexts chain their drafts (``llama_set_mtp_chain``), so they return every row's hidden row: the runtime
    asks for them unmasked only where chaining is on (patches.mtp_output_rows), whatever the caller's environment."""
    monkeypatch.setenv(patches.CHAIN_ENV, "1")


@pytest.fixture(scope="module", params=["tiny", "tiny-draft-vocab", "qwen35", "qwen35moe"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    """The shipped tiny model, with a draft vocabulary too (the chained argmax then runs over the scattered rows of
    the reduced head), and synthetic qwen35 and qwen35moe checkpoints (the MoE graph is chained too)."""
    if request.param.startswith("tiny"):
        dv = {"draft_vocab": 1024} if request.param == "tiny-draft-vocab" else {}
        path = convert(TINY, outfile=tmp_path_factory.mktemp("chain") / f"{request.param}.gguf", outtype="q8_0",
                       progress=False, **dv).path
    else:
        converted = request.getfixturevalue("converted")
        path = converted(request.param, "bundled")  # random weights: the head reads its hidden rows (an oracle
        # head, as the lossless tests use, drafts from the token alone)
    with Model(path, load_mtp=True) as m:
        yield m


def _rows(m: Model) -> tuple[list[int], np.ndarray]:
    """A prompt's tokens and each one's MTP input row: the target's hidden row of the position before (zeros
    first), as the proposer feeds them."""
    toks = m.tokenize(PROMPT)[:24]
    with Context(m, n_ctx=256, n_batch=64, embeddings_nextn=True) as tgt:
        b = Batch(64)
        b.fill(toks, 0, last_logits=True)
        tgt.decode_batch(b)
        h = tgt.h_rows(len(toks)).copy()
    rows = np.zeros_like(h)
    rows[1:] = h[:-1]
    return toks, rows


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(np.abs(a - b) <= ATOL + RTOL * np.abs(a)))


def _same_draft(seq_logits: np.ndarray, chained: int) -> bool:
    """The chained draft is the sequential argmax, or ties with it within the tolerance."""
    best = int(np.argmax(seq_logits))
    return chained == best or seq_logits[best] - seq_logits[chained] <= ATOL + RTOL * abs(seq_logits[best])


def _mtp(m: Model, fa: bool) -> Context:
    # a device sampler samples every output row of its sequence: K of them a chained decode
    return Context(m, n_ctx=256, n_batch=64, mtp=True, flash_attn=fa, n_outputs_max=64, n_outputs_per_seq=K)


def _sequential(ctx: Context, toks: list[int], rows: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """K drafts the proposer's way: the rows with logits on the last, then a decode per draft with the head's own
    hidden row. Their logits and hidden rows."""
    n = len(toks)
    b = Batch(64, rows.shape[1])
    b.fill(toks, 0, last_logits=True, embd=rows)
    ctx.decode_batch(b)
    logits, hidden = [ctx.logits_view(n - 1).copy()], [ctx.h_row(n - 1).copy()]
    for j in range(1, K):
        b.clear()
        b.add(int(np.argmax(logits[-1])), n - 1 + j, logits=True, embd=hidden[-1])
        ctx.decode_batch(b)
        logits.append(ctx.logits_view(0).copy())
        hidden.append(ctx.h_row(0).copy())
    return logits, hidden


@pytest.mark.parametrize("embd", ["0", "1"], ids=["embd-where-it-is", "embd-copy"])
@pytest.mark.parametrize("fa", [True, False], ids=["flash-attn", "transposed-v"])
def test_one_chained_decode_drafts_what_k_decodes_draft(model: Model, fa: bool, embd: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # the chained tokens' embedding rows: looked up in the token embedding, or in the copy beside the head that a
    # GPU gets (the draft vocabulary's rows and their map, or the whole table), read when the chain is switched on
    monkeypatch.setenv("GGUF_MTP_CHAIN_EMBD", embd)
    toks, rows = _rows(model)
    n, n_embd = len(toks), model.n_embd_out
    with _mtp(model, fa) as seq, _mtp(model, fa) as chain:
        # every prompt row's hidden row, from a plain decode of the rows
        b = Batch(64, n_embd)
        b.fill(toks, 0, embd=rows)
        seq.decode_batch(b)
        prompt_hidden = seq.h_rows(n).copy()
        seq.clear()
        logits, hidden = _sequential(seq, toks, rows)
        drafts = [int(np.argmax(x)) for x in logits]

        # chained: the same rows and K - 1 placeholder rows (token 0, zero rows: the graph must not read them)
        _set_chain(chain, K - 1)
        b.fill([*toks, *[0] * (K - 1)], 0, embd=np.vstack([rows, np.zeros((K - 1, n_embd), np.float32)]))
        b.logits_np[n - 1:n + K - 1] = 1
        chain.decode_batch(b)
        c_logits = [chain.logits_view(n - 1 + j).copy() for j in range(K)]
        c_hidden = [chain.h_row(n - 1 + j).copy() for j in range(K)]
        c_drafts = [int(np.argmax(x)) for x in c_logits]

        for j in range(K):
            assert _same_draft(logits[j], c_drafts[j]), (j, drafts, c_drafts)
            assert _close(logits[j], c_logits[j]), (j, float(np.abs(logits[j] - c_logits[j]).max()))
            assert _close(hidden[j], c_hidden[j]), (j, float(np.abs(hidden[j] - c_hidden[j]).max()))
        # every row's hidden row comes back, the prompt's too (the context's embeddings stay what they were)
        assert _close(prompt_hidden, chain.h_rows(n))

        # the caches hold the same K/V at the chained positions: a further plain decode gives the same logits
        _set_chain(chain, 0)
        after = []
        for ctx in (seq, chain):
            b.clear()
            b.add(drafts[-1], n - 1 + K, logits=True, embd=hidden[-1])
            ctx.decode_batch(b)
            after.append(ctx.logits_view(0).copy())
        assert _close(after[0], after[1]), float(np.abs(after[0] - after[1]).max())


@pytest.mark.parametrize("case", ["outputs-not-last", "too-few-rows", "extra-output"])
def test_a_batch_the_chain_cannot_take_is_refused(model: Model, case: str) -> None:
    """The chained graph reads the row before: a batch of another shape fails the decode (one line), never a
    silently unchained draft or an abort."""
    toks, rows = _rows(model)
    n = len(toks)
    with _mtp(model, True) as ctx:
        _set_chain(ctx, 2)
        b = Batch(64, model.n_embd_out)
        if case == "too-few-rows":
            b.fill(toks[:2], 0, embd=rows[:2])
            b.logits_np[:2] = 1
        else:
            b.fill(toks, 0, embd=rows)
            b.logits_np[n - 3:n] = 1
            if case == "outputs-not-last":
                b.logits_np[n - 1] = 0
                b.logits_np[n - 4] = 1
            else:
                b.logits_np[0] = 1
        with pytest.raises(GgufMtpError, match="llama_decode failed"):
            ctx.decode_batch(b)
        # and the context still works, chained or not
        _set_chain(ctx, 0)
        b.fill(toks, 0, last_logits=True, embd=rows)
        ctx.decode_batch(b)
        assert np.isfinite(ctx.logits_view(n - 1)).all()


def test_a_device_sampler_picks_the_chained_drafts(model: Model) -> None:
    """The runtime samples greedy drafts inside the graph (``llama_set_sampler``): the sampler's graph, appended
    per output row, reads the chained rows and picks the drafts the sequential way gives."""
    from gguf_mtp.runtime.sampling import context_sampler

    toks, rows = _rows(model)
    n, n_embd = len(toks), model.n_embd_out
    with _mtp(model, True) as seq, _mtp(model, True) as dev:
        smp = context_sampler(dev)
        smp.use(None, device=True)
        if not smp.on_device:
            pytest.skip("this build cannot run the sampler inside the graph")
        logits, _ = _sequential(seq, toks, rows)
        _set_chain(dev, K - 1)
        b = Batch(64, n_embd)
        b.fill([*toks, *[0] * (K - 1)], 0, embd=np.vstack([rows, np.zeros((K - 1, n_embd), np.float32)]))
        b.logits_np[n - 1:n + K - 1] = 1
        dev.decode_batch(b)
        drafts = [smp.sample(n - 1 + j) for j in range(K)]
        assert all(_same_draft(lg, d) for lg, d in zip(logits, drafts)), ([int(np.argmax(x)) for x in logits], drafts)
