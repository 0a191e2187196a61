"""tiktoken rank files (Kimi-K2's ``tiktoken.model``) -> GGUF ``gpt2`` tokenizer metadata, without tiktoken.

A rank file lists every mergeable byte string with its rank, one ``base64(bytes) rank`` per line; BPE merges the
adjacent pair whose concatenation has the lowest rank until none is mergeable. llama.cpp wants a GPT-2 style
vocabulary instead: token strings in the byte-to-unicode alphabet and a merge list ordered by priority. Each
multi-byte token yields the merge BPE itself would have made last when building it: run BPE on its own bytes with
only lower-ranked tokens allowed; when that stops at two parts, those two are the merge (a token it cannot reach
in two parts is never produced by BPE and gets no merge). Ordering merges by the rank of their result makes
llama.cpp's merge-priority BPE reproduce the rank-based one.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Any

from gguf import TokenType

from ..errors import FormatError
from ..files import read_input_text
from ..ggufio.format import KV
from .folder import load_json
from .vocab_kvs import gpt2_vocab_kvs, special_kvs, token_id  # shared with the tokenizer.json path

#: special-token slots after the base ranks: tokenization_kimi.py reserves 256 + 2 ids there and names the ones
#: in ``added_tokens_decoder``, the rest ``<|reserved_token_{id}|>``; all are special (control) tokens
RESERVED_SPECIALS = 256 + 2


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (printable Latin-1 bytes map to themselves)."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    out = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return out


_B2U = byte_to_unicode()


def byte_level(token: bytes) -> str:
    """A token's bytes in GPT-2's byte-level alphabet (the form llama.cpp's ``gpt2`` vocab stores)."""
    return "".join(_B2U[b] for b in token)


def read_ranks(path: Path) -> dict[bytes, int]:
    """``base64 rank`` lines -> {token bytes: rank}; ranks must be 0..n-1 without gaps (they are token ids)."""
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(read_input_text(path, "tiktoken rank file", encoding="ascii").splitlines(), 1):
        if not line.strip():
            continue
        try:
            b64, rank = line.split()
            ranks[base64.b64decode(b64, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise FormatError(f"{path}:{lineno}: expected 'base64-token rank', got {line[:60]!r}") from None
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise FormatError(f"{path}: ranks are not 0..{len(ranks) - 1} without gaps or repeats")
    return ranks


def bpe(ranks: dict[bytes, int], piece: bytes, max_rank: int | None = None) -> list[bytes]:
    """Rank-based BPE of ``piece``: merge the lowest-ranked adjacent pair (below ``max_rank``) until none is left."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None or (max_rank is not None and best >= max_rank):
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge list, highest priority first: for each multi-byte token in rank order, the two parts BPE
    reaches with lower-ranked tokens only (tokens it cannot reach in two parts get none)."""
    out = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) > 1:
            parts = bpe(ranks, token, max_rank=rank)
            if len(parts) == 2:
                out.append((parts[0], parts[1]))
    return out


def _specials(root: Path, tok_config: dict[str, Any], n_base: int, n: int) -> dict[int, str]:
    """id -> name of every special token: the reserved slots after the base ranks, named from
    ``added_tokens_decoder`` where it names them, plus any other id it lists (each below ``n``)."""

    where = root / "tokenizer_config.json"
    decoder = tok_config.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise FormatError(f"{where}: added_tokens_decoder is {type(decoder).__name__}, expected an object")
    named = {}
    for i, t in decoder.items():
        if isinstance(t, dict) and isinstance(t.get("content"), str):
            key = f"added_tokens_decoder[{i!r:.20}]"
            named[token_id(where, key, int(i) if re.fullmatch(r"\d{1,12}", i) else i, n)] = t["content"]
    out = {i: named.get(i, f"<|reserved_token_{i}|>") for i in range(n_base, min(n, n_base + RESERVED_SPECIALS))}
    out.update(named)
    bad = [i for i in named if i < n_base]
    if bad:
        raise FormatError(f"{root / 'tokenizer_config.json'}: added token id {bad[0]} collides with a base rank")
    return out


def tiktoken_kvs(root: Path, config: dict[str, Any], vocab_size: int, pre: str,
                 extra_specials: tuple[tuple[str, str], ...] = ()) -> list[KV]:
    """GGUF tokenizer metadata (``gpt2`` model, ``pre``) for a folder with ``tiktoken.model``.

    Ids below ``vocab_size`` that are neither a rank nor a special become ``[PAD<i>]`` (UNUSED), as llama.cpp's
    converter writes them.
    """

    ranks = read_ranks(root / "tiktoken.model")
    tc_path = root / "tokenizer_config.json"
    tok_config = load_json(tc_path, "") if tc_path.exists() else {}
    n_base = len(ranks)
    if n_base > vocab_size:
        raise FormatError(f"{root / 'tiktoken.model'}: {n_base} ranks, more than the {vocab_size} rows of the "
                          "embedding matrix; the tokenizer does not belong to these weights")
    specials = _specials(root, tok_config, n_base, vocab_size)
    n = vocab_size  # every id is below it (checked)
    by_id = {r: byte_level(t) for t, r in ranks.items()}
    tokens, types = [], []
    for i in range(n):
        if i in by_id:
            tokens.append(by_id[i])
            types.append(TokenType.NORMAL)
        elif i in specials:
            tokens.append(specials[i])
            types.append(TokenType.CONTROL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
    merges = [f"{byte_level(a)} {byte_level(b)}" for a, b in merges_from_ranks(ranks)]
    return (gpt2_vocab_kvs(pre, tokens, types, merges)
            + special_kvs(root, n, {s: i for i, s in specials.items()}, extra_specials))
