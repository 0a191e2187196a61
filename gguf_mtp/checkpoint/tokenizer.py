"""Hugging Face byte-level BPE tokenizer files -> GGUF ``tokenizer.*`` metadata (no ``tokenizers`` needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import TokenType

from ..errors import FormatError, UnsupportedError
from ..ggufio.format import KV
from ..ggufio.validate import MAX_VOCAB
from .folder import load_json
from .tiktoken_bpe import tiktoken_kvs
from .vocab_kvs import gpt2_vocab_kvs, special_kvs, token_id


def looks_special(token: str) -> bool:
    """Added tokens that llama.cpp's converter marks CONTROL even when tokenizer.json says ``special: false``
    (``<|fim_prefix|>``, ``<|file_sep|>``, ...: its loader would warn and override USER_DEFINED otherwise)."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or token.startswith("<|") and token.endswith("|>")
            or token.startswith("<\uff5c") and token.endswith("\uff5c>")  # <｜...｜> (DeepSeek)
            or token.startswith("<unused") and token.endswith(">"))


def added_token_type(token: str, special: bool) -> TokenType:
    return TokenType.CONTROL if special or looks_special(token) else TokenType.USER_DEFINED


def tokenizer_kvs(root: Path, config: dict[str, Any], vocab_size: int, pre: str,
                  extra_specials: tuple[tuple[str, str], ...] = ()) -> list[KV]:
    """GGUF tokenizer metadata for a byte-level BPE (``gpt2``-model) tokenizer in ``root``.

    ``extra_specials``: (type, token) pairs a family adds where the files do not say (GLM: bos ``[gMASK]``).

    Tokens missing below ``vocab_size`` (models pad their embedding matrix) become ``[PAD<i>]`` with
    type UNUSED, as llama.cpp's converter writes them.
    """
    if not 0 < vocab_size <= MAX_VOCAB:  # rows of the embedding matrix: every id below it gets a token entry
        raise FormatError(f"{root}: the embedding matrix has {vocab_size} rows; gguf-mtp and llama.cpp take at most "
                          f"{MAX_VOCAB} tokens")
    tj_path = root / "tokenizer.json"
    if not tj_path.exists() and (root / "tiktoken.model").exists():  # Kimi-K2: a tiktoken rank file instead
        return tiktoken_kvs(root, config, vocab_size, pre, extra_specials)
    tj = load_json(tj_path, "the checkpoint needs its tokenizer.json (byte-level BPE)")
    model = tj.get("model") or {}
    if not isinstance(model, dict):
        raise FormatError(f"{tj_path}: model is {type(model).__name__}, expected an object")
    if model.get("type") != "BPE":
        raise UnsupportedError(f"{tj_path}: tokenizer model {model.get('type')!r:.40} is not supported (expected BPE)")
    raw = model.get("vocab") or {}
    if not isinstance(raw, dict):
        raise FormatError(f"{tj_path}: model.vocab is {type(raw).__name__}, expected an object of token -> id "
                          "(a BPE vocabulary)")
    vocab = {tok: token_id(tj_path, f"model.vocab[{tok!r:.30}]", i, vocab_size) for tok, i in raw.items()}
    added_list = tj.get("added_tokens") or []
    if not isinstance(added_list, list):
        raise FormatError(f"{tj_path}: added_tokens is {type(added_list).__name__}, expected a list")
    added: dict[str, dict[str, Any]] = {}
    for j, t in enumerate(added_list):
        if not isinstance(t, dict) or not isinstance(t.get("content"), str):
            raise FormatError(f"{tj_path}: added_tokens[{j}] has no string 'content'")
        token_id(tj_path, f"added_tokens[{j}].id", t.get("id"), vocab_size)
        added[t["content"]] = t
    for content, t in added.items():
        vocab[content] = t["id"]
    if not vocab:
        raise FormatError(f"{tj_path}: empty vocabulary")
    n = vocab_size  # every id is below it (checked above)
    by_id: dict[int, str] = {i: s for s, i in vocab.items()}
    tokens, types = [], []
    for i in range(n):
        s = by_id.get(i)
        if s is None:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif s in added:
            t = added_token_type(s, bool(added[s].get("special")))
            # user-defined tokens are matched pre-normalized: SentencePiece's space marker becomes a space
            tokens.append(s if t == TokenType.CONTROL else s.replace("\u2581", " "))
            types.append(t)
        else:
            tokens.append(s)
            types.append(TokenType.NORMAL)
    raw_merges = model.get("merges") or []
    if not isinstance(raw_merges, list):
        raise FormatError(f"{tj_path}: model.merges is {type(raw_merges).__name__}, expected a list")
    merges = []
    for j, m in enumerate(raw_merges):
        if isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            m = " ".join(m)
        if not isinstance(m, str):
            raise FormatError(f"{tj_path}: model.merges[{j}] = {m!r:.40} is not a merge ('a b' or [a, b])")
        merges.append(m)

    return gpt2_vocab_kvs(pre, tokens, types, merges) + special_kvs(root, n, vocab, extra_specials, tokenizer=tj)
