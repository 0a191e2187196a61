"""A small byte-level BPE tokenizer trained in pure Python, written as Hugging Face tokenizer files.

Byte-level like Qwen's (GPT-2 byte-to-unicode alphabet, merges file), so llama.cpp's BPE path and
the Qwen pre-tokenizer apply to it exactly as to a real checkpoint.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ADDED_TOKENS = ("<think>", "</think>")

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

DEFAULT_CORPUS = """\
Multi-token prediction heads let a model guess the next few tokens at once. A draft is checked by the
full model in one batch, and every token that matches is accepted for free. The quick brown fox jumps
over the lazy dog. def main(argv): return sum(int(x) for x in argv if x.isdigit()) # numbers 0123456789
The head is small: one decoder block, two norms and a projection. It reads the hidden state of the last
layer and the embedding of the token that was just chosen, and it predicts the token after that.
Quantized models are published as GGUF files; llama.cpp loads them on CPU, CUDA, Metal and Vulkan.
"""

_SPLIT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train_bpe(text: str, n_merges: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary (256 byte symbols + merges) and the merge list, most frequent pair first."""
    b2u = bytes_to_unicode()
    words = Counter(tuple(b2u[b] for b in w.encode("utf-8")) for w in _SPLIT.findall(text))
    vocab = {c: i for i, c in enumerate(b2u[b] for b in range(256))}
    merges: list[tuple[str, str]] = []
    for _ in range(n_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, f in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += f
        if not pairs:
            break
        (a, b), _count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        vocab[a + b] = len(vocab)
        new_words: Counter[tuple[str, ...]] = Counter()
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += f
        words = new_words
    return vocab, merges


GLM_SPECIAL_TOKENS = ("<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                      "<|assistant|>", "<|observation|>")
DS_SPECIAL_TOKENS = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>")
DS_CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
                    "{% elif m['role'] == 'assistant' %}<｜Assistant｜>{{ m['content'] }}<｜end▁of▁sentence｜>"
                    "{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
                    "{% if add_generation_prompt %}<｜Assistant｜>{% endif %}")
GLM_CHAT_TEMPLATE = ("[gMASK]<sop>{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endfor %}"
                     "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def write_tokenizer(root: Path, *, n_merges: int = 200, corpus: str = DEFAULT_CORPUS, style: str = "qwen") -> int:
    """Write tokenizer.json, tokenizer_config.json and chat_template.jinja; returns the token count.

    ``style``: ``qwen`` (ChatML specials, eos ``<|im_end|>``) or ``glm`` (GLM-4.5 specials, eos ``<|endoftext|>``).
    """
    vocab, merges = train_bpe(corpus, n_merges)
    specials = {"glm": GLM_SPECIAL_TOKENS, "deepseek": DS_SPECIAL_TOKENS}.get(style, SPECIAL_TOKENS)
    extra = ADDED_TOKENS if style == "qwen" else ()
    added = []
    for content in specials + extra:
        added.append({"id": len(vocab), "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": content in specials})
        vocab[content] = len(vocab)
    tj = {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": {k: v for k, v in vocab.items() if k not in specials + extra},
                  "merges": [[a, b] for a, b in merges]},
    }
    (root / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    tc = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None,
          "eos_token": "<|endoftext|>" if style == "glm" else "<|im_end|>",
          "pad_token": "<|endoftext|>", "model_max_length": 4096, "tokenizer_class": "Qwen2Tokenizer",
          "errors": "replace", "unk_token": None}
    if style == "deepseek":
        tc.update(add_bos_token=True, bos_token=DS_SPECIAL_TOKENS[0], eos_token=DS_SPECIAL_TOKENS[1],
                  pad_token=DS_SPECIAL_TOKENS[1], tokenizer_class="LlamaTokenizerFast")
    (root / "tokenizer_config.json").write_text(json.dumps(tc, indent=1), encoding="utf-8")
    template = {"glm": GLM_CHAT_TEMPLATE, "deepseek": DS_CHAT_TEMPLATE}.get(style, CHAT_TEMPLATE)
    (root / "chat_template.jinja").write_text(template, encoding="utf-8")
    return len(vocab)
