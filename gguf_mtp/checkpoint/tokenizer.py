"""Hugging Face byte-level BPE tokenizer files -> GGUF ``tokenizer.*`` metadata (no ``tokenizers`` needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGUFValueType, TokenType

from ..errors import FormatError, UnsupportedError
from ..files import read_input_text
from ..ggufio import keys as K
from ..ggufio.format import KV
from .folder import load_json


def _token_id(tok: Any, vocab: dict[str, int]) -> int | None:
    if isinstance(tok, dict):
        tok = tok.get("content")
    return vocab.get(tok) if isinstance(tok, str) else None


def chat_template(root: Path, tok_config: dict[str, Any]) -> str | None:
    jinja = root / "chat_template.jinja"
    if jinja.exists():
        return read_input_text(jinja, "chat template")
    tmpl = tok_config.get("chat_template")
    if isinstance(tmpl, list):  # named templates: keep the default one
        tmpl = next((t.get("template") for t in tmpl if t.get("name") == "default"), None)
    if tmpl is None and (root / "chat_template.json").exists():
        tmpl = load_json(root / "chat_template.json", "").get("chat_template")
    return tmpl if isinstance(tmpl, str) else None


def tokenizer_kvs(root: Path, config: dict[str, Any], vocab_size: int, pre: str) -> list[KV]:
    """GGUF tokenizer metadata for a byte-level BPE (``gpt2``-model) tokenizer in ``root``.

    Tokens missing below ``vocab_size`` (models pad their embedding matrix) become ``[PAD<i>]`` with
    type UNUSED, as llama.cpp's converter writes them.
    """
    tj_path = root / "tokenizer.json"
    if not tj_path.exists() and (root / "tiktoken.model").exists():  # Kimi-K2: a tiktoken rank file instead
        from .tiktoken_bpe import tiktoken_kvs

        return tiktoken_kvs(root, config, vocab_size, pre)
    tj = load_json(tj_path, "the checkpoint needs its tokenizer.json (byte-level BPE)")
    model = tj.get("model") or {}
    if model.get("type") != "BPE":
        raise UnsupportedError(f"{tj_path}: tokenizer model {model.get('type')!r} is not supported (expected BPE)")
    vocab: dict[str, int] = dict(model.get("vocab") or {})
    added = {t["content"]: t for t in tj.get("added_tokens", []) if isinstance(t, dict) and "content" in t}
    for content, t in added.items():
        vocab[content] = int(t["id"])
    if not vocab:
        raise FormatError(f"{tj_path}: empty vocabulary")
    n = max(vocab_size, max(vocab.values()) + 1)
    by_id: dict[int, str] = {i: s for s, i in vocab.items()}
    tokens, types = [], []
    for i in range(n):
        s = by_id.get(i)
        if s is None:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif s in added:
            tokens.append(s)
            types.append(TokenType.CONTROL if added[s].get("special") else TokenType.USER_DEFINED)
        else:
            tokens.append(s)
            types.append(TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    tc_path = root / "tokenizer_config.json"
    tok_config = load_json(tc_path, "") if tc_path.exists() else {}
    return gpt2_vocab_kvs(pre, tokens, types, merges) + special_kvs(root, config, tok_config, vocab)


def gpt2_vocab_kvs(pre: str, tokens: list[str], types: list[TokenType], merges: list[str]) -> list[KV]:
    """The byte-level BPE vocabulary as llama.cpp's ``gpt2`` tokenizer reads it."""
    return [
        KV.string(K.TOK_MODEL, "gpt2"),
        KV.string(K.TOK_PRE, pre),
        KV.array(K.TOK_TOKENS, GGUFValueType.STRING, tokens),
        KV.array(K.TOK_TYPES, GGUFValueType.INT32, [int(t) for t in types]),
        KV.array(K.TOK_MERGES, GGUFValueType.STRING, merges),
    ]


def special_kvs(root: Path, config: dict[str, Any], tok_config: dict[str, Any], ids: dict[str, int]) -> list[KV]:
    """eos/pad/bos ids (tokenizer_config first, then config.json, as gguf-py does), add_bos, chat template."""
    out = []
    for key, name, cfg in ((K.TOK_EOS, "eos_token", "eos_token_id"), (K.TOK_PAD, "pad_token", None),
                           (K.TOK_BOS, "bos_token", "bos_token_id")):
        val = _token_id(tok_config.get(name), ids)
        if val is None and cfg and isinstance(config.get(cfg), int):
            val = config[cfg]
        if val is not None:
            out.append(KV.u32(key, val))
    if isinstance(tok_config.get("add_bos_token"), bool):
        out.append(KV.boolean(K.TOK_ADD_BOS, tok_config["add_bos_token"]))
    tmpl = chat_template(root, tok_config)
    if tmpl:
        out.append(KV.string(K.TOK_CHAT_TEMPLATE, tmpl))
    return out
