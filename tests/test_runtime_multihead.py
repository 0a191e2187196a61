"""Several MTP heads (mimo2-style): one head per draft step, selected with llama_set_nextn_layer_offset and fed
the previous head's hidden row; output stays identical to plain decoding."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_mtp.runtime import MTPSession
from tests.lossless import Reference

from .mimo2_fixture import build_mimo

PROMPT = "the the the t he " * 3


@pytest.fixture(scope="module")
def mimo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mimo2") / "mimo2.gguf"
    build_mimo(str(path))
    return path


def test_chained_heads_are_lossless(mimo: Path) -> None:
    ref = Reference(lambda: MTPSession(mimo, mtp=False, n_ctx=512), lambda s: s.generate(PROMPT, max_tokens=32))
    for k in (1, 2, 3, 4):
        with MTPSession(mimo, n_ctx=512, n_draft=k) as s:
            assert s.engine.chain and s.engine.n_heads == 3
            assert s.engine.n_draft_max == min(k, 3)  # at most one draft token per head
            g = s.generate(PROMPT, max_tokens=32)
            ref.check(g, f"mimo2 fixture k={k}")
            assert g.stats.drafted > 0 and len(g.stats.drafted_at) == min(k, 3)
