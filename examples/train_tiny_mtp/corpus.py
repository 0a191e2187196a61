"""Corpus and tokenizer for the tiny Qwen3.5 model (CPU, seeded, no network).

Text: the Python sources installed on this machine (the standard library and the system site-packages),
one document per file. Held out: every file whose path hashes to 0 mod 25. A byte-level BPE tokenizer is
trained on the training files with Qwen3.5's pre-tokenizer rules, so llama.cpp's ``qwen35`` pre-tokenizer
splits text exactly as the Hugging Face tokenizer does.

    python examples/train_tiny_mtp/corpus.py --out examples/train_tiny_mtp/work

writes ``tokenizer.json``, ``train.u16`` / ``heldout.u16`` (token ids, documents separated by
``<|endoftext|>``) and ``manifest.json`` (files, sizes, sha256, token counts).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

# llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN35 rule (Qwen2's, with combining marks joining letter runs).
QWEN35_PRE_REGEX = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>"]  # plain added tokens, as in Qwen3.5 (USER_DEFINED in GGUF)
ROOTS = ["/usr/lib/python3.11", "/usr/lib/python3/dist-packages"]
MAX_FILE = 400_000  # skip generated tables (unicode data, lexer maps): they teach nothing and dominate


def list_files(roots: list[str]) -> list[Path]:
    files = []
    for r in roots:
        for p in sorted(Path(r).rglob("*.py")):
            if "site-packages" in p.parts or not p.is_file():
                continue
            if 0 < p.stat().st_size <= MAX_FILE:
                files.append(p)
    return files


def is_heldout(path: Path) -> bool:
    return int(hashlib.sha1(str(path).encode()).hexdigest(), 16) % 25 == 0


def build_tokenizer(texts: list[str], vocab_size: int, seed: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PRE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    n_special = len(SPECIAL) + len(ADDED)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - n_special, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens(SPECIAL)
    tok.add_tokens(ADDED)
    return tok


def encode(tok, texts: list[str]) -> np.ndarray:
    eot = tok.token_to_id("<|endoftext|>")
    out: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(eot)
    return np.asarray(out, dtype=np.uint16)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "work")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    files = list_files(ROOTS)
    if not files:
        sys.exit(f"no Python sources under {ROOTS}")
    train, held = [], []
    meta = []
    for p in files:
        text = p.read_bytes().decode("utf-8", errors="replace")
        (held if is_heldout(p) else train).append(text)
        meta.append({"path": str(p), "bytes": p.stat().st_size, "heldout": is_heldout(p),
                     "sha256": hashlib.sha256(p.read_bytes()).hexdigest()})
    a.out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(train, a.vocab_size, a.seed)
    tok.save(str(a.out / "tokenizer.json"))
    tr, he = encode(tok, train), encode(tok, held)
    tr.tofile(a.out / "train.u16")
    he.tofile(a.out / "heldout.u16")
    man = {"roots": ROOTS, "files": meta, "n_train_files": len(train), "n_heldout_files": len(held),
           "train_tokens": int(tr.size), "heldout_tokens": int(he.size), "vocab": tok.get_vocab_size(),
           "bytes_per_token": sum(len(t.encode()) for t in train) / max(1, tr.size)}
    (a.out / "manifest.json").write_text(json.dumps(man, indent=1))
    print(f"{len(train)} training files ({tr.size:,} tokens), {len(held)} held out ({he.size:,} tokens), "
          f"vocab {tok.get_vocab_size()}, {man['bytes_per_token']:.2f} bytes/token -> {a.out}")


if __name__ == "__main__":
    main()
