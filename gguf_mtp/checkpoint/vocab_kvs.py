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
from .folder import load_json


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
                extra: tuple[tuple[str, str], ...] = (), tokenizer: dict[str, Any] | None = None) -> list[KV]:
    """Special-token ids, ``add_{bos,eos,sep}_token`` and chat templates exactly as llama.cpp's converter writes
    them: gguf-py's ``SpecialVocab`` (tokenizer.json's post-processor, tokenizer_config.json, then config.json's
    ``*_token_id``; the first value wins), then the family's ``extra`` (type, token) pairs where still unset.

    ``tokenizer``: tokenizer.json's content. The ``add_*`` flags follow the gguf-py that llama.cpp's converter
    runs (its own copy, newer than the gguf package's release): :func:`add_token_flags`."""
    for name in _SPECIAL_VOCAB_FILES:  # SpecialVocab opens these itself: refuse FIFOs/devices before it blocks
        if os.path.lexists(root / name):
            os.close(open_input_fd(root / name, name))
    try:
        sv = SpecialVocab(root, load_merges=False, n_vocab=n_vocab)
        if tokenizer is not None:
            tc_path = root / "tokenizer_config.json"
            tc = load_json(tc_path, "") if tc_path.is_file() else None
            sv.add_special_token, bos = add_token_flags(tokenizer, tc)
            if bos is not None:  # read from tokenizer_config.json's side, ahead of config.json's bos_token_id
                tid = next((t.get("id") for t in tokenizer.get("added_tokens") or [] if t.get("content") == bos), None)
                if isinstance(tid, int) and 0 <= tid < n_vocab:
                    sv.special_token_ids["bos"] = tid
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


def _special_id(piece: object) -> object:
    """The token a template piece (``{"SpecialToken": {"id": ...}}``) names, else None."""
    return piece.get("SpecialToken", {}).get("id") if isinstance(piece, dict) else None


def add_token_flags(tokenizer: dict[str, Any], config: dict[str, Any] | None) -> tuple[dict[str, bool], object]:
    """``{"bos": ..., "eos": ..., "sep": ...}``: whether the tokenizer adds each special token, as the gguf-py of
    llama.cpp's converter decides (llama-cpp-python 0.3.36's copy), and the BOS token that its template names when
    tokenizer_config.json names none (None: unchanged).

    Its rules, which the released gguf package (0.19) lacks in part: tokenizer.json's post-processor decides first
    (``ByteLevel``: adds neither BOS nor EOS; ``RobertaProcessing``: adds BOS, EOS and SEP; ``TemplateProcessing``:
    adds the special tokens that open and close its ``single`` template); tokenizer_config.json's ``add_*_token``
    only where the post-processor said nothing. Values are compared as the files give them (a token written as an
    object is not equal to its text, there as here).
    """
    tc = dict(config) if config else {}
    bos, cls, eos, sep = (tc.get(f"{t}_token") for t in ("bos", "cls", "eos", "sep"))
    if not bos and cls and tc:
        bos = cls
    if not eos and sep and tc:
        eos = sep
    bos_named = None
    flags: dict[str, bool] = {}
    post = tokenizer.get("post_processor")
    steps = (post.get("processors", [post]) if isinstance(post, dict) else None) or []
    for step in steps:
        kind = step.get("type") if isinstance(step, dict) else None
        if kind == "ByteLevel":
            flags.setdefault("bos", False)
            flags.setdefault("eos", False)
        elif kind == "RobertaProcessing":
            flags.update(bos=True, eos=True, sep=True)
            if not cls and tc:
                cls = step.get("cls", [bos])[0]
            if not sep and tc:
                sep = step.get("sep", [eos])[0]
        elif kind == "TemplateProcessing":
            single, pair = step.get("single") or [], step.get("pair") or []
            first = last = None
            if len(single) > 1:
                first = _special_id(single[0])
                if first:
                    if not tc:
                        bos = first
                    elif first not in (bos, cls):
                        if not bos:
                            bos = bos_named = first
                        if not cls:
                            cls = first
                    flags["bos"] = first in (bos, cls)
                last = _special_id(single[-1])
                if last:
                    eos = last  # a closing token other than EOS becomes EOS (the old one EOT)
                    flags["eos"] = True
            if pair:
                start = 1 if first and _special_id(pair[0]) == first else 0
                stop = -1 if last and _special_id(pair[-1]) == last else None
                middle = pair[start:stop]
                a = middle[0].get("Sequence", {}).get("id") if middle and isinstance(middle[0], dict) else None
                b = middle[-1].get("Sequence", {}).get("id") if middle and isinstance(middle[-1], dict) else None
                if a == "A" and b == "B" and len(middle) > 2:
                    between = middle[1:-1]
                    entry = _special_id(between[0])
                    add_sep = bool(entry) and entry in (sep, eos) and not last
                    if len(between) == 2 and _special_id(between[1]) in (sep, eos) and _special_id(between[1]):
                        add_sep = True
                    flags["sep"] = add_sep
    if tc:
        for typ in ("bos", "eos", "sep"):
            value = tc.get(f"add_{typ}_token")
            if isinstance(value, bool):
                flags.setdefault(typ, value)
    return {t: v for t, v in flags.items() if t in ("bos", "eos", "sep")}, bos_named


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
