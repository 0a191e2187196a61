"""``tokenizer.ggml.add_{bos,eos,sep}_token`` and the special-token ids as llama.cpp's converter writes them, case by
case against tests/data/special_vocab_ref.json: what the gguf-py in llama.cpp's tree (llama-cpp-python 0.3.36's
copy, which convert_hf_to_gguf.py imports ahead of an installed gguf) made of the same tokenizer files
(scripts/make_special_vocab_reference.py). The released gguf package (0.19) differs: it writes no add_eos_token
for Qwen's ByteLevel post-processor (issue 23), and lets tokenizer_config.json overrule the post-processor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import SpecialVocab

from gguf_mtp.checkpoint.vocab_kvs import SPECIAL_ID_KEYS, special_kvs

from .special_vocab_cases import CASES, IDS, N_VOCAB, write_case

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

REF = json.loads((Path(__file__).parent / "data" / "special_vocab_ref.json").read_text())["cases"]


def test_the_reference_covers_every_case() -> None:
    assert sorted(REF) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_add_flags_and_ids_are_llama_cpps(tmp_path: Path, name: str) -> None:
    tj = write_case(tmp_path, name)
    kvs = {kv.key: kv.value for kv in special_kvs(tmp_path, N_VOCAB, dict(IDS), tokenizer=tj)}
    flags = {k.removeprefix("tokenizer.ggml.add_").removesuffix("_token"): v for k, v in kvs.items()
             if k.startswith("tokenizer.ggml.add_")}
    ids = {typ: kvs[key] for typ, key in SPECIAL_ID_KEYS.items() if key in kvs}
    want = REF[name]
    assert flags == {t: v for t, v in want["add"].items() if t in ("bos", "eos", "sep")}
    assert ids == {t: v for t, v in want["ids"].items() if t in SPECIAL_ID_KEYS}


def test_qwens_bytelevel_tokenizer_gets_add_eos_false(tmp_path: Path) -> None:
    """The case the issue saw: Qwen's tokenizer.json (ByteLevel post-processor) -> add_bos_token and
    add_eos_token both written, false; the gguf package alone writes no add_eos_token."""
    tj = write_case(tmp_path, "ByteLevel (Qwen)")
    keys = {kv.key: kv.value for kv in special_kvs(tmp_path, N_VOCAB, dict(IDS), tokenizer=tj)}
    assert keys["tokenizer.ggml.add_eos_token"] is False and keys["tokenizer.ggml.add_bos_token"] is False
    assert "eos" not in SpecialVocab(tmp_path, n_vocab=N_VOCAB).add_special_token  # why ours is needed
