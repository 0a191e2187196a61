"""The mtp-output-rows patch (shipped): where the loaded library has it (and its switch, GGUF_MTP_MTP_OUTPUT_ROWS, is
on: the runtime sets it), a qwen35 head's graph runs its block past the attention on the output rows alone, and the
runtime asks for the head's hidden rows masked, one an output row. With stable shapes every draft decode is padded
with rows that are not outputs, so the hidden row a next draft is paired with must be the output's, not the batch's
first: the drafts must be the stock graph's (the same acceptance by position, within :data:`SAME_DRAFTS`) and the
output plain decoding's. The comparison can fail: a context asked masked whose graph is built with the switch off
(the stock graph, every row kept) hands back the batch's first rows, and its acceptance moves beyond that. Skipped
where the library lacks the patch (a stock wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_mtp.runtime import MTPSession, patches
from tests.conftest import TINY_PROMPTS
from tests.lossless import Reference

pytestmark = pytest.mark.skipif("mtp-output-rows" not in patches.names(),
                                reason="the loaded libllama lacks the mtp-output-rows patch (a stock wheel)")


def answers(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch, switch: str, *, built: str | None = None, k: int = 2):
    """Each prompt's answer, the drafts and acceptances by position, and whether the head's hidden rows were asked
    masked. ``switch``: GGUF_MTP_MTP_OUTPUT_ROWS when the session is made; ``built``: its value from then on, when
    llama.cpp builds the head's graphs (the switch is read at every build)."""
    monkeypatch.setenv(patches.OUTPUT_ROWS_ENV, switch)
    monkeypatch.setenv(patches.CHAIN_ENV, "0")  # one decode a draft, whatever else the proposed build carries
    with MTPSession(tiny_gguf, n_ctx=512, n_draft=k, stable_shapes=True) as s:
        assert s.engine.mtp is not None
        masked = s.engine.mtp.output_rows
        if built is not None:
            monkeypatch.setenv(patches.OUTPUT_ROWS_ENV, built)
        gens = [s.generate(p, max_tokens=40) for p in TINY_PROMPTS]
        st = s.stats
    return gens, st.drafted_at, st.accepted_at, masked


#: the largest difference in acceptance at any position (a share of the drafts there) that counts as the same drafts:
#: the head's rows differ by rounding at most (a mat-vec of one column against three may sum in another order, and
#: a near-tie in the head's logits may then flip a draft); a head paired with the wrong rows moves it by 0.1 or more
SAME_DRAFTS = 0.06


def close(a, b) -> bool:  # type: ignore[no-untyped-def]
    """Whether two runs' acceptance by position (their drafts and acceptances, items 1 and 2) agree within
    :data:`SAME_DRAFTS`."""
    if len(a[1]) != len(b[1]):
        return False
    return all(abs(x / max(1, n) - y / max(1, m)) <= SAME_DRAFTS for n, x, m, y in zip(a[1], a[2], b[1], b[2]))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_output_rows_only_give_the_stock_graphs_drafts(tiny_gguf: Path, tiny_plain: Reference,
                                                       monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    on = answers(tiny_gguf, monkeypatch, "1", k=k)
    off = answers(tiny_gguf, monkeypatch, "0", k=k)
    assert on[3] is True and off[3] is False  # masked with the switch, one a token without it (archs.py)
    tiny_plain.check(on[0], f"output rows, k={k}")
    tiny_plain.check(off[0], f"every row, k={k}")
    assert close(on, off), (on[1:3], off[1:3])


def test_a_masked_head_on_the_stock_graph_reads_the_wrong_rows(tiny_gguf: Path, tiny_plain: Reference,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: asked masked, but its graphs built with the switch off (every row kept), the head
    pairs each padded draft with the batch's first row, and the drafts are other ones (output stays plain
    decoding's: the target verifies every draft)."""
    right = answers(tiny_gguf, monkeypatch, "1", k=3)
    wrong = answers(tiny_gguf, monkeypatch, "1", built="0", k=3)
    assert wrong[3] is True
    tiny_plain.check(wrong[0], "masked, stock graph")
    assert not close(wrong, right), (wrong[1:3], right[1:3])


@pytest.mark.parametrize(("value", "on"), [("yes", False), (" 1x", True), ("0", False), ("-2", True)])
def test_the_runtime_reads_the_switch_as_llama_cpp_does(tiny_gguf: Path, tiny_plain: Reference,
                                                        monkeypatch: pytest.MonkeyPatch, value: str, on: bool) -> None:
    """llama.cpp reads GGUF_MTP_MTP_OUTPUT_ROWS with C's atoi: a value it takes as off must leave the head unmasked
    (else the stock graph's rows are read masked, the wrong rows above), one it takes as on must mask it."""
    got = answers(tiny_gguf, monkeypatch, value, k=3)
    assert got[3] is on
    tiny_plain.check(got[0], f"switch {value!r}")
    assert close(got, answers(tiny_gguf, monkeypatch, "1" if on else "0", k=3)), got[1:3]
