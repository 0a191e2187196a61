"""Kimi-K2 (``DeepseekV3ForCausalLM`` with ``model_type: kimi_k2`` and a tiktoken tokenizer): the rank file becomes a
GPT-2 style vocabulary with merges and pre ``kimi-k2``; llama.cpp's tokenization equals a rank-based BPE reference
computed here; YaRN keys are written; a checkpoint without MTP weights converts trunk-only and refuses sidecars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gguf_mtp import convert
from gguf_mtp.checkpoint.tiktoken_bpe import bpe, merges_from_ranks, read_ranks
from gguf_mtp.errors import FormatError, GgufMtpError
from gguf_mtp.ggufio.reader import GGUFFile
from gguf_mtp.layout import Layout
from gguf_mtp.runtime.llama import Context, Model
from tests.synthetic.kimi import KIMI_SPECIALS, N_RESERVED
from tests.synthetic.tokenizer import DEFAULT_CORPUS
from .mtp_smoke import assert_head_drafts
from tests import helpers

FAMILY = "kimik2"
VOCAB = 640  # 384 base ranks (256 bytes + 128 merges) + 256 special slots
N_BASE = VOCAB - N_RESERVED
SPEC = {"vocab_size": VOCAB, "mtp": False}

# Kimi's pre-tokenizer regex (tokenization_kimi.py; llama.cpp unicode.cpp:775-776) written with Python `re` for
# text made only of ASCII and CJK ideographs: there \p{Han} is the CJK block, the other letters are A-Z / a-z
# (\p{Lu} / \p{Ll}), \p{N} is 0-9.
HAN = "\u3400-\u4dbf\u4e00-\u9fff"
NOT_LN = rf"[^\r\nA-Za-z0-9{HAN}]"
SUFFIX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
KIMI_SPLIT = re.compile("|".join([
    rf"[{HAN}]+", rf"{NOT_LN}?[A-Z]*[a-z]+{SUFFIX}", rf"{NOT_LN}?[A-Z]+[a-z]*{SUFFIX}", r"[0-9]{1,3}",
    rf" ?[^\sA-Za-z0-9{HAN}]+[\r\n]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"]))
TEXTS = [
    DEFAULT_CORPUS,
    "Hello WORLD, it's a TEST: don't stop; we'll see 1234567 items!!\n\n  indented\tline\r\nend   ",
    "你好世界 GGUF模型 and 中文text 12ab: the head predicts 中的 tokens.",
    "   leading spaces, CamelCaseWords and snake_case_names(x) -> y   \n\n\n",
    "I'M SHOUTING, You'RE not. They'd've gone 3.14159 km/h...",
]


def encode_piece(ranks: dict[bytes, int], piece: bytes) -> list[int]:
    """Token ids of one pre-tokenized piece (tiktoken's rule)."""
    return [ranks[p] for p in bpe(ranks, piece)]


def reference_tokens(ranks: dict[bytes, int], text: str) -> list[int]:
    """Rank-based BPE (tiktoken's rule) of each pre-tokenized piece; ASCII + CJK text only."""
    assert all(ord(c) < 128 or re.match(f"[{HAN}]", c) for c in text)
    pieces = KIMI_SPLIT.findall(text)
    assert "".join(pieces) == text
    try:  # the real thing, when it happens to be installed (not a dependency)
        import tiktoken  # type: ignore[import-not-found]
    except ImportError:
        return [t for p in pieces for t in encode_piece(ranks, p.encode("utf-8"))]
    enc = tiktoken.Encoding("kimi-synthetic", pat_str=KIMI_SPLIT.pattern, mergeable_ranks=ranks, special_tokens={})
    return enc.encode_ordinary(text)


def test_merges_from_ranks() -> None:
    """A merge per token reachable in two parts through lower ranks, in rank order; the split is BPE's."""
    ranks = {bytes([b]): b for b in range(256)}
    for tok in (b"ab", b"bc", b"abc", b"cd", b"abcd", b"xbc"):
        ranks[tok] = len(ranks)
    ranks[b"bcd"] = len(ranks)  # "b"+"cd" or "bc"+"d": BPE builds "bc" first (lower rank), so ("bc", "d")
    ranks[b"zz"] = len(ranks)
    ranks[b"zzz"] = len(ranks)
    ranks[b"qqq"] = len(ranks)  # "qq" is no token: BPE cannot build it in two parts -> no merge
    merges = merges_from_ranks(ranks)
    assert merges == [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c"), (b"c", b"d"), (b"abc", b"d"), (b"x", b"bc"),
                      (b"bc", b"d"), (b"z", b"z"), (b"zz", b"z")]
    assert bpe(ranks, b"abcd") == [b"abcd"] and bpe(ranks, b"abcd", max_rank=ranks[b"abcd"]) == [b"abc", b"d"]
    assert encode_piece(ranks, b"xbcd") == [ranks[b"xbc"], ranks[b"d"]]  # "xbc" outranks "bcd"


def test_rank_file_errors(tmp_path: Path) -> None:
    (tmp_path / "a.model").write_text("YQ== 0\nYg== 2\n")
    with pytest.raises(FormatError, match="without gaps"):
        read_ranks(tmp_path / "a.model")
    (tmp_path / "b.model").write_text("YQ== 0\nnot-base64!\n")
    with pytest.raises(FormatError, match="b.model:2"):
        read_ranks(tmp_path / "b.model")


def test_converts_without_head_and_refuses_sidecars(checkpoint, tmp_path: Path) -> None:
    src = checkpoint(FAMILY, **SPEC)
    assert (src / "tiktoken.model").exists() and not (src / "tokenizer.json").exists()
    r = convert(src, outfile=tmp_path / "k.gguf", outtype="q8_0", progress=False)
    assert r.layout == Layout.TRUNK_ONLY and any("no MTP weights" in n for n in r.notes)
    for layout in ("mtp-only", "head-only"):
        with pytest.raises(GgufMtpError, match="no MTP weights.*convert without --mtp"):
            convert(src, outfile=tmp_path / "m.gguf", layout=layout, progress=False)
    assert not (tmp_path / "m.gguf").exists()


@pytest.fixture(scope="module")
def kimi(checkpoint, tmp_path_factory) -> tuple[Path, Path]:
    src = checkpoint(FAMILY, **SPEC)
    out = tmp_path_factory.mktemp("kimi") / "k.gguf"
    return src, convert(src, outfile=out, outtype="q8_0", progress=False).path


def test_metadata(kimi) -> None:
    src, path = kimi
    f = GGUFFile(path)
    assert f.architecture == "deepseek2" and f.get("deepseek2.nextn_predict_layers") is None
    assert (f.get("tokenizer.ggml.model"), f.get("tokenizer.ggml.pre")) == ("gpt2", "kimi-k2")
    toks, types = f.get("tokenizer.ggml.tokens"), f.get("tokenizer.ggml.token_type")
    assert len(toks) == VOCAB
    ranks = read_ranks(src / "tiktoken.model")
    assert len(ranks) == N_BASE
    assert toks[ranks[b" the"]] == "Ġthe" and toks[ranks[b"\n"]] == "Ċ" and toks[ranks[b"!"]] == "!"
    assert ranks[b"!"] == 0  # single bytes in GPT-2 order, as real rank files: rank != byte value
    assert len(f.get("tokenizer.ggml.merges")) == N_BASE - 256  # every trained token is reachable
    assert f.get("tokenizer.ggml.merges")[0] == "{} {}".format(*[toks[ranks[p]] for p in merges_from_ranks(ranks)[0]])
    for k in range(N_RESERVED):  # every reserved slot is a control token; named ones keep their names
        assert types[N_BASE + k] == 3
        assert toks[N_BASE + k] == KIMI_SPECIALS.get(k, f"<|reserved_token_{N_BASE + k}|>")
    assert set(types[:N_BASE]) == {1}
    assert toks[f.get("tokenizer.ggml.bos_token_id")] == "[BOS]"
    assert toks[f.get("tokenizer.ggml.eos_token_id")] == "[EOS]"
    # as llama.cpp's converter (gguf-py's SpecialVocab): tokenizer_config.json's token names are looked up in
    # tokenizer.json only, which a tiktoken checkpoint does not have, so ids come from config.json
    assert f.get("tokenizer.ggml.padding_token_id") is None
    assert "<|im_middle|>" in f.get("tokenizer.chat_template")
    yarn = {"type": "yarn", "factor": 32.0, "original_context_length": 4096, "yarn_log_multiplier": 0.1,
            "yarn_beta_fast": 1.0, "yarn_beta_slow": 1.0}
    for key, want in yarn.items():
        assert f.get(f"deepseek2.rope.scaling.{key}") == pytest.approx(want), key
    assert f.get("deepseek2.rope.freq_base") == 50000.0
    assert f.get("deepseek2.expert_weights_scale") == pytest.approx(2.827)


def test_llama_cpp_tokenizes_like_rank_bpe(kimi) -> None:
    src, path = kimi
    ranks = read_ranks(src / "tiktoken.model")
    with Model(path) as m:
        for text in TEXTS:
            got = m.tokenize(text, add_special=False, parse_special=False)
            assert got == reference_tokens(ranks, text), text
            assert helpers.detokenize(m, got) == text
        assert len(m.tokenize(DEFAULT_CORPUS, add_special=False)) < 0.6 * len(DEFAULT_CORPUS)  # merges are used
        # specials are parsed as single control tokens
        ids = m.tokenize("<|im_user|>user<|im_middle|>hi<|im_end|>", add_special=False, parse_special=True)
        assert ids[0] == N_BASE + 3 and ids[-1] == N_BASE + 2 and N_BASE + 17 in ids


def test_loads_and_generates(kimi) -> None:
    _, path = kimi
    with Model(path) as m, Context(m) as ctx:
        out = helpers.greedy(ctx, m.tokenize("The quick brown fox"), 8)
        assert len(out) == 8 and all(0 <= t < m.n_vocab for t in out)


def test_with_an_mtp_head(checkpoint, tmp_path: Path) -> None:
    """A Kimi-shaped checkpoint that does ship a head (none is published) converts bundled and runs an MTP context."""
    src = checkpoint(FAMILY, vocab_size=VOCAB)
    r = convert(src, outfile=tmp_path / "b.gguf", outtype="q8_0", progress=False)
    assert r.layout == Layout.BUNDLED
    with Model(r.path, load_mtp=True) as m, Context(m, mtp=True) as ctx:
        assert m.n_nextn == 1
        assert_head_drafts(m, ctx)


def test_yarn_betas_reach_the_context(checkpoint, tmp_path: Path) -> None:
    """deepseek2's loader ignores the yarn beta keys (32 / 1 always); our contexts pass Kimi's 1 / 1 from the file,
    so changing beta_fast in the config changes the logits (it would not without that)."""
    import json
    import shutil

    import numpy as np

    src = checkpoint(FAMILY, **SPEC)
    twin = Path(shutil.copytree(src, tmp_path / "twin"))
    cfg = json.loads((twin / "config.json").read_text())
    cfg["rope_scaling"]["beta_fast"] = 32.0
    (twin / "config.json").write_text(json.dumps(cfg))
    logits = []
    for i, s in enumerate((src, twin)):
        path = convert(s, outfile=tmp_path / f"{i}.gguf", outtype="f32", progress=False).path
        with Model(path) as m:
            assert m.yarn_betas() == ((1.0, 1.0) if i == 0 else (32.0, 1.0))
            with Context(m) as ctx:
                helpers.decode(ctx, m.tokenize(DEFAULT_CORPUS[:200], add_special=False), 0)
                logits.append(helpers.logits(ctx))
    assert np.abs(logits[0] - logits[1]).max() > 0  # exactly 0 when the contexts ignore the keys (checked)
