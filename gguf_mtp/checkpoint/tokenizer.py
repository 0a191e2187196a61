"""Hugging Face byte-level BPE tokenizer files -> GGUF ``tokenizer.*`` metadata (no ``tokenizers`` needed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gguf import GGUFValueType, Keys, SpecialVocab, TokenType

from ..errors import FormatError, UnsupportedError
from ..files import open_input_fd
from ..ggufio.format import KV
from ..ggufio.validate import MAX_VOCAB
from .folder import load_json


def looks_special(token: str) -> bool:
    """Added tokens that llama.cpp's converter marks CONTROL even when tokenizer.json says ``special: false``
    (``<|fim_prefix|>``, ``<|file_sep|>``, ...: its loader would warn and override USER_DEFINED otherwise)."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or token.startswith("<|") and token.endswith("|>")
            or token.startswith("<\uff5c") and token.endswith("\uff5c>")  # <｜...｜> (DeepSeek)
            or token.startswith("<unused") and token.endswith(">"))


def added_token_type(token: str, special: bool) -> TokenType:
    return TokenType.CONTROL if special or looks_special(token) else TokenType.USER_DEFINED


def token_id(path: Path, key: str, v: Any, n: int) -> int:
    """A token id read from a tokenizer file: a whole number below ``n`` (the embedding's rows), else one line.
    Checked before anything is sized from it: an id of 1e9 would otherwise build a billion-entry vocabulary."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise FormatError(f"{path}: {key} = {v!r:.40} is not a token id (a whole number)")
    if not 0 <= v < n:
        raise FormatError(f"{path}: {key} = {v} is outside the vocabulary (0 to {n - 1}: the rows of the "
                          "embedding matrix); the tokenizer does not belong to these weights")
    return v


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
        from .tiktoken_bpe import tiktoken_kvs

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

    return gpt2_vocab_kvs(pre, tokens, types, merges) + special_kvs(root, n, vocab, extra_specials)


def gpt2_vocab_kvs(pre: str, tokens: list[str], types: list[TokenType], merges: list[str]) -> list[KV]:
    """The byte-level BPE vocabulary as llama.cpp's ``gpt2`` tokenizer reads it."""
    return [
        KV.string(Keys.Tokenizer.MODEL, "gpt2"),
        KV.string(Keys.Tokenizer.PRE, pre),
        KV.array(Keys.Tokenizer.LIST, GGUFValueType.STRING, tokens),
        KV.array(Keys.Tokenizer.TOKEN_TYPE, GGUFValueType.INT32, [int(t) for t in types]),
        KV.array(Keys.Tokenizer.MERGES, GGUFValueType.STRING, merges),
    ]


#: special-token types gguf-py's SpecialVocab reads and its writer has keys for (it skips cls), and those keys
SPECIAL_ID_KEYS = {"bos": Keys.Tokenizer.BOS_ID, "eos": Keys.Tokenizer.EOS_ID, "unk": Keys.Tokenizer.UNK_ID,
                   "sep": Keys.Tokenizer.SEP_ID, "pad": Keys.Tokenizer.PAD_ID,
                   "mask": Keys.Tokenizer.MASK_ID, "eot": Keys.Tokenizer.EOT_ID, "eom": Keys.Tokenizer.EOM_ID}


#: the files gguf-py's SpecialVocab reads from a checkpoint folder
_SPECIAL_VOCAB_FILES = ("tokenizer.json", "tokenizer_config.json", "config.json",
                        "chat_template.jinja", "chat_template.json")


def special_kvs(root: Path, n_vocab: int, ids: dict[str, int],
                extra: tuple[tuple[str, str], ...] = ()) -> list[KV]:
    """Special-token ids, ``add_{bos,eos,sep}_token`` and chat templates exactly as llama.cpp's converter writes
    them: gguf-py's ``SpecialVocab`` (tokenizer.json's post-processor, tokenizer_config.json, then config.json's
    ``*_token_id``; the first value wins), then the family's ``extra`` (type, token) pairs where still unset."""
    for name in _SPECIAL_VOCAB_FILES:  # SpecialVocab opens these itself: refuse FIFOs/devices before it blocks
        if os.path.lexists(root / name):
            os.close(open_input_fd(root / name, name))
    try:
        sv = SpecialVocab(root, load_merges=False, n_vocab=n_vocab)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OSError) as e:
        raise FormatError(f"{root}: tokenizer_config.json / tokenizer.json / config.json: unusable special-token "
                          f"entries ({e}); fix or replace these files") from None
    for typ, content in extra:
        tid = ids.get(content)
        if tid is not None and typ not in sv.special_token_ids and 0 <= tid < n_vocab:
            sv.special_token_ids[typ] = tid
    out = [KV.u32(SPECIAL_ID_KEYS[typ], int(tid))
           for typ, tid in sv.special_token_ids.items() if typ in SPECIAL_ID_KEYS]
    out += [KV.boolean(f"tokenizer.ggml.add_{typ}_token", bool(v)) for typ, v in sv.add_special_token.items()
            if typ in ("bos", "eos", "sep")]
    return out + chat_template_kvs(sv.chat_template)


def chat_template_kvs(tmpl: object) -> list[KV]:
    """``tokenizer.chat_template`` (the default), named ones as ``tokenizer.chat_template.<name>``, as gguf-py does."""
    if isinstance(tmpl, str):
        return [KV.string(Keys.Tokenizer.CHAT_TEMPLATE, tmpl)]
    if not isinstance(tmpl, list):
        return []
    out, names, default = [], [], None
    for choice in tmpl:
        if not isinstance(choice, dict) or not isinstance(choice.get("template"), str):
            continue
        name = "".join(c if c.isascii() and c.isalnum() else "_" for c in str(choice.get("name", "")))
        if name == "default":
            default = choice["template"]
        elif name:
            names.append(name)
            out.append(KV.string(f"{Keys.Tokenizer.CHAT_TEMPLATE}.{name}", choice["template"]))
    if names:
        out.append(KV.array(Keys.Tokenizer.CHAT_TEMPLATES, GGUFValueType.STRING, names))
    return out + ([KV.string(Keys.Tokenizer.CHAT_TEMPLATE, default)] if default is not None else [])
