"""GGUF ``tokenizer.*`` metadata shared by both tokenizer readers (tokenizer.json in tokenizer.py, tiktoken rank
files in tiktoken_bpe.py): checked token ids, the ``gpt2`` vocabulary keys, special tokens and chat templates."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gguf import GGUFValueType, Keys, SpecialVocab, TokenType

from ..errors import FormatError
from ..files import open_input_fd
from ..ggufio.format import KV


def token_id(path: Path, key: str, v: Any, n: int) -> int:
    """A token id read from a tokenizer file: a whole number below ``n`` (the embedding's rows), else one line.
    Checked before anything is sized from it: an id of 1e9 would otherwise build a billion-entry vocabulary."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise FormatError(f"{path}: {key} = {v!r:.40} is not a token id (a whole number)")
    if not 0 <= v < n:
        raise FormatError(f"{path}: {key} = {v} is outside the vocabulary (0 to {n - 1}: the rows of the "
                          "embedding matrix); the tokenizer does not belong to these weights")
    return v


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
