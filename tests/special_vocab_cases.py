"""Tokenizer files that exercise how llama.cpp's converter decides ``tokenizer.ggml.add_{bos,eos,sep}_token`` and
the special-token ids (gguf-py's ``SpecialVocab``): post-processors (none, ByteLevel as Qwen's, a ByteLevel +
TemplateProcessing sequence as DeepSeek's, templates, RobertaProcessing) against tokenizer_config.json's flags.

Shared by tests/test_special_vocab.py and scripts/make_special_vocab_reference.py, which records what the gguf-py
vendored in llama-cpp-python 0.3.36 makes of each case in tests/data/special_vocab_ref.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

N_VOCAB = 200
TOKENS = ["<s>", "</s>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "[CLS]", "[SEP]", "<pad>"]
IDS = {t: 100 + i for i, t in enumerate(TOKENS)}
BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def _piece(x: str) -> dict[str, Any]:
    return {"Sequence": {"id": x, "type_id": 0}} if x in ("A", "B") else {"SpecialToken": {"id": x, "type_id": 0}}


def template(single: list[str], pair: list[str]) -> dict[str, Any]:
    return {"type": "TemplateProcessing", "single": [_piece(x) for x in single], "pair": [_piece(x) for x in pair],
            "special_tokens": {t: {"id": t, "ids": [IDS[t]], "tokens": [t]} for t in single + pair if t in IDS}}


def _tok(t: str) -> dict[str, Any]:  # as transformers writes an AddedToken
    return {"__type": "AddedToken", "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False}


#: name -> (tokenizer.json's post_processor, tokenizer_config.json or None for no file, config.json)
CASES: dict[str, tuple[Any, dict[str, Any] | None, dict[str, Any]]] = {
    "no post-processor": (None, {"eos_token": "<|endoftext|>"}, {}),
    "no post-processor, config flags": (None, {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
                                               "eos_token": "</s>"}, {}),
    "ByteLevel (Qwen)": (BYTELEVEL, {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
                                     "pad_token": "<|endoftext|>"}, {"bos_token_id": 102, "eos_token_id": 104}),
    "ByteLevel, config asks to add": (BYTELEVEL, {"add_bos_token": True, "add_eos_token": True, "bos_token": "<s>",
                                                  "eos_token": "</s>"}, {}),
    "ByteLevel, no tokenizer_config": (BYTELEVEL, None, {"eos_token_id": 101}),
    "ByteLevel + template with BOS (DeepSeek)": (
        {"type": "Sequence", "processors": [BYTELEVEL, template(["<s>", "A"], ["<s>", "A", "<s>", "B"])]},
        {"add_bos_token": True, "add_eos_token": False, "bos_token": _tok("<s>"), "eos_token": _tok("</s>")},
        {"bos_token_id": 100, "eos_token_id": 101}),
    "template with BOS and EOS": (template(["<s>", "A", "</s>"], ["<s>", "A", "</s>", "</s>", "B", "</s>"]),
                                  {"bos_token": "<s>", "eos_token": "</s>"}, {}),
    "template closing with another token than EOS": (template(["<s>", "A", "<|im_end|>"], []),
                                                     {"bos_token": "<s>", "eos_token": "</s>"}, {}),
    "template opening with a token tokenizer_config does not name": (
        template(["[CLS]", "A"], []), {"eos_token": "</s>"}, {"bos_token_id": 100}),
    "template, tokenizer_config disagrees": (template(["<s>", "A"], []),
                                             {"add_bos_token": False, "add_eos_token": True, "bos_token": "<s>",
                                              "eos_token": "</s>"}, {}),
    "BERT-like pair with SEP": (template(["[CLS]", "A", "[SEP]"], ["[CLS]", "A", "[SEP]", "B", "[SEP]"]),
                                {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "<pad>"}, {}),
    "pair with a separator, no closing token": (template(["<s>", "A"], ["<s>", "A", "</s>", "B"]),
                                                {"bos_token": "<s>", "eos_token": "</s>"}, {}),
    "RobertaProcessing": ({"type": "RobertaProcessing", "sep": ["</s>", 101], "cls": ["<s>", 100]},
                          {"bos_token": "<s>", "eos_token": "</s>"}, {}),
}


def write_case(folder: Path, name: str) -> dict[str, Any]:
    """Write the case's tokenizer files into ``folder``; returns tokenizer.json's content."""
    post, tc, config = CASES[name]
    folder.mkdir(parents=True, exist_ok=True)
    tj = {"version": "1.0", "added_tokens": [{"id": i, "content": t, "special": True} for t, i in IDS.items()],
          "normalizer": None, "pre_tokenizer": None, "post_processor": post, "decoder": None,
          "model": {"type": "BPE", "vocab": {chr(97 + i): i for i in range(26)}, "merges": []}}
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    if tc is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(tc))
    (folder / "config.json").write_text(json.dumps(config))
    return tj
