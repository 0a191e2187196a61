"""The draft vocabulary: the N target tokens an MTP draft may propose (``--draft-vocab N``).

A file names them in one metadata array, ``gguf_mtp.draft_vocab`` (INT32 token ids, ascending, unique, every
control / user-defined / end-of-generation token included). It adds no tensor, so every loader accepts the file
and stock llama.cpp ignores the key; gguf-mtp's ``draft-vocab`` llama.cpp patch (patches/llama.cpp) makes the MTP
graph read only those N rows of the draft LM head and scatter their logits into the full row. The target still
verifies over the whole vocabulary, so output is unchanged; only acceptance may move.

The rows are chosen by token frequency: by default the N lowest ids of a byte-level BPE vocabulary, whose ids
follow merge order (a token made by an earlier merge is more frequent in the tokenizer's training text), or
counted on a text the user gives (``--draft-vocab-from FILE``), tokenized by llama.cpp with the file's own
vocabulary; there, for a vocabulary in merge order, ``RANK_SHARE`` of the rows still go by rank.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, Keys, TokenType

from .errors import FormatError, GgufMtpError, UnsupportedError
from .ggufio.format import KV

__all__ = ["KEY", "OPTION", "FROM_OPTION", "MAX_TEXT_BYTES", "RANK_SHARE", "check_n", "required_ids", "unused_ids",
           "check_rank_order", "by_rank", "by_counts", "count_tokens", "choose", "to_kv", "read", "head_rows", "apply",
           "of"]

KEY = "gguf_mtp.draft_vocab"
OPTION = "--draft-vocab"
FROM_OPTION = "--draft-vocab-from"
MAX_TEXT_BYTES = 256 << 20  # a text to count tokens on: bounded, it is read whole
#: of a map counted on a text, the share of its room (after the required tokens) given to the lowest ids instead
#: (a BPE vocabulary in merge order): text unlike the counted one keeps the common tokens. Chosen on held-out
#: text with the real Qwen3.5/3.6 vocabulary (docs/upstream/draft-vocab.md, bench/reference/vocab-coverage/)
RANK_SHARE = 0.125
TOKENIZE_CHUNK = 1 << 20  # bytes of text per llama_tokenize call (split at a line end)
#: token texts llama.cpp's vocabulary treats as end-of-generation even where the file types them as normal
EOG_TEXTS = frozenset({"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>",
                       "<|end_of_text|>", "</s>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<|return|>",
                       "<|call|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"})
_SPECIAL_ID_KEYS = ("bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask", "fim_pre", "fim_suf", "fim_mid",
                    "fim_pad", "fim_rep", "fim_sep")

Getter = Callable[[str], Any]


def check_n(n: int | None, text: str | os.PathLike[str] | None) -> None:
    """Refuse a bad ``--draft-vocab`` before anything is read."""
    if n is None:
        if text is not None:
            raise UnsupportedError(f"{FROM_OPTION} needs {OPTION} N (how many tokens the drafts keep)")
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UnsupportedError(f"{OPTION} {n!r}: give a positive number of tokens (e.g. 32768)")


def _tokens(get: Getter, where: object) -> list[str]:
    tokens = get(Keys.Tokenizer.LIST)
    if not isinstance(tokens, list) or not tokens:
        raise FormatError(f"{where}: no {Keys.Tokenizer.LIST}: {OPTION} needs the model's vocabulary")
    return tokens


def required_ids(get: Getter, where: object = "model") -> set[int]:
    """Tokens every draft vocabulary keeps: control, user-defined and unknown tokens, the ones the metadata names
    (bos, eos, eot, ...) and those llama.cpp treats as end-of-generation by their text."""
    tokens = _tokens(get, where)
    types = get(Keys.Tokenizer.TOKEN_TYPE) or []
    keep = {i for i, t in enumerate(types)
            if t in (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)}
    keep |= {i for i, s in enumerate(tokens) if s in EOG_TEXTS}
    for k in _SPECIAL_ID_KEYS:
        v = get(f"tokenizer.ggml.{k}_token_id")
        if isinstance(v, int) and 0 <= v < len(tokens):
            keep.add(v)
    eog = get("tokenizer.ggml.eog_token_ids")
    if isinstance(eog, list):
        keep |= {v for v in eog if isinstance(v, int) and 0 <= v < len(tokens)}
    return keep


def check_rank_order(get: Getter, where: object) -> None:
    """Refuse, in one line, a vocabulary whose ids do not follow merge order (then low ids are not frequent ones)."""
    model = get(Keys.Tokenizer.MODEL)
    merges = get(Keys.Tokenizer.MERGES)
    if model != "gpt2" or not isinstance(merges, list) or not merges:
        raise UnsupportedError(f"{where}: a {model!r} tokenizer's ids do not follow token frequency; count them on "
                               f"a text instead: {FROM_OPTION} FILE")
    index = {s: i for i, s in enumerate(_tokens(get, where))}
    last = -1
    for m in merges:
        a, sep, b = m.partition(" ")
        i = index.get(a + b) if sep else None
        if i is None:
            continue
        if i <= last:
            raise UnsupportedError(f"{where}: the BPE vocabulary's ids do not follow merge order (merge {m!r} makes "
                                   f"token {i} after token {last}); count tokens on a text instead: {FROM_OPTION} FILE")
        last = i


def unused_ids(get: Getter) -> set[int]:
    """Tokens typed UNUSED (a vocabulary's padding rows): never chosen to fill a map."""
    types = get(Keys.Tokenizer.TOKEN_TYPE) or []
    return {i for i, t in enumerate(types) if t == TokenType.UNUSED}


def _check_room(n: int, n_vocab: int, required: set[int], where: object) -> None:
    if n > n_vocab:
        raise UnsupportedError(f"{OPTION} {n}: {where} has only {n_vocab} tokens; give at most {n_vocab}")
    if n < len(required):
        raise UnsupportedError(f"{OPTION} {n}: {where} has {len(required)} control and end-of-generation tokens, "
                               "which every draft vocabulary keeps; give more")


def by_rank(n: int, n_vocab: int, required: set[int], skip: set[int] = frozenset()) -> np.ndarray:  # type: ignore[assignment]
    """The required tokens and the lowest other ids, ``n`` in all, ascending (``skip``: never chosen to fill)."""
    room = n - len(required)
    fill = (i for i in range(n_vocab) if i not in required and i not in skip)
    chosen = set(required)
    for i in fill:
        if room <= 0:
            break
        chosen.add(i)
        room -= 1
    for i in range(n_vocab):  # fewer usable tokens than n: take skipped ones too, so the count is exact
        if len(chosen) >= n:
            break
        chosen.add(i)
    return np.array(sorted(chosen), dtype=np.int32)


def by_counts(n: int, counts: np.ndarray, required: set[int], *, rank_share: float = 0.0,
              skip: set[int] = frozenset()) -> np.ndarray:  # type: ignore[assignment]
    """The required tokens and the most frequent others (ties and unseen tokens by lower id), ``n`` in all.
    ``rank_share``: that share of the room (after the required tokens) goes instead to the lowest ids not chosen
    yet (merge order; ``skip``: never), so text unlike the counted one keeps the default's common tokens."""
    if not 0.0 <= rank_share <= 1.0:
        raise ValueError(f"rank_share {rank_share}: must be 0 to 1")
    room = max(0, n - len(required))
    counted = n - int(round(rank_share * room))
    order = np.lexsort((np.arange(len(counts)), -counts.astype(np.int64)))
    chosen = set(required)
    for i in order.tolist():
        if len(chosen) >= counted:
            break
        chosen.add(i)
    if len(chosen) < n:
        chosen.update(by_rank(n, len(counts), chosen, skip).tolist())
    return np.array(sorted(chosen), dtype=np.int32)


def _read_text(path: Path) -> bytes:
    """The text's bytes, checked to be UTF-8."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise UnsupportedError(f"{FROM_OPTION} {path}: cannot read it ({e.strerror or e})") from None
    if not path.is_file():
        raise UnsupportedError(f"{FROM_OPTION} {path}: not a regular file")
    if size == 0:
        raise UnsupportedError(f"{FROM_OPTION} {path}: the file is empty; give a text to count tokens on")
    if size > MAX_TEXT_BYTES:
        raise UnsupportedError(f"{FROM_OPTION} {path}: {size} bytes, more than the {MAX_TEXT_BYTES} bytes this "
                               "counts; give a sample of the text")
    try:
        data = path.read_bytes()
        data.decode("utf-8")
        return data
    except UnicodeDecodeError as e:
        raise UnsupportedError(f"{FROM_OPTION} {path}: not UTF-8 text (byte {e.start}); give a UTF-8 text "
                               "file") from None
    except OSError as e:
        raise UnsupportedError(f"{FROM_OPTION} {path}: cannot read it ({e.strerror or e})") from None


def _chunks(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        j = min(len(data), i + TOKENIZE_CHUNK)
        if j < len(data):
            nl = data.rfind(b"\n", i, j)
            j = nl + 1 if nl > i else j
            while j < len(data) and (data[j] & 0xC0) == 0x80:  # never inside a UTF-8 sequence
                j += 1
        out.append(data[i:j])
        i = j
    return out


def count_tokens(kvs: Sequence[KV], text_path: str | os.PathLike[str], n_vocab: int) -> np.ndarray:
    """How often each token occurs in the UTF-8 text at ``text_path``, tokenized by llama.cpp with the vocabulary
    in ``kvs`` (written to a temporary metadata-only GGUF and loaded vocab-only: works for any layout)."""
    text = _read_text(Path(text_path))
    import ctypes

    import gguf_mtp.runtime  # noqa: F401  (llama.cpp's libraries before numpy's, see gguf_mtp.runtime)
    from gguf_mtp.runtime import llama as rt

    from .ggufio.writer import write_gguf

    counts = np.zeros(n_vocab, dtype=np.int64)
    with tempfile.TemporaryDirectory(prefix="gguf-mtp-vocab-") as d:
        vocab_file = Path(d) / "vocab.gguf"
        write_gguf(vocab_file, [kv for kv in kvs if not kv.key.startswith("split.")], [])
        ll = rt._ll
        rt._init()
        p = ll.llama_model_default_params()
        p.vocab_only = True
        model = ll.llama_model_load_from_file(str(vocab_file).encode(), p)
        if not model:
            raise GgufMtpError(f"llama.cpp could not load the model's vocabulary to count {text_path}: "
                               f"{rt.last_error()}")
        try:
            vocab = ll.llama_model_get_vocab(model)
            for chunk in _chunks(text):
                n_max = len(chunk) + 16
                buf = (ll.llama_token * n_max)()
                n = ll.llama_tokenize(vocab, chunk, len(chunk), buf, n_max, False, False)
                if n < 0:
                    raise GgufMtpError(f"{text_path}: tokenization needs {-n} tokens, more than expected")
                ids = np.ctypeslib.as_array(ctypes.cast(buf, ctypes.POINTER(ctypes.c_int32)), (n,))
                counts += np.bincount(ids[(ids >= 0) & (ids < n_vocab)], minlength=n_vocab)
        finally:
            ll.llama_model_free(model)
    return counts


def choose(kvs: Sequence[KV], n: int, text: str | os.PathLike[str] | None, where: object) -> np.ndarray:
    """The draft vocabulary of ``n`` tokens for the model whose metadata is ``kvs``: counted on ``text`` if
    given, else by merge rank (refused for a tokenizer whose ids do not follow it)."""
    table = {kv.key: kv for kv in kvs}

    def get(key: str) -> Any:
        kv = table.get(key)
        return None if kv is None else kv.scalar()

    check_n(n, text)
    n_vocab = len(_tokens(get, where))
    required = required_ids(get, where)
    _check_room(n, n_vocab, required, where)
    unused = unused_ids(get)
    if text is None:
        check_rank_order(get, where)
        return by_rank(n, n_vocab, required, unused)
    counts = count_tokens(kvs, text, n_vocab)
    try:
        check_rank_order(get, where)
    except UnsupportedError:  # low ids are not frequent ones: the text alone chooses
        return by_counts(n, counts, required)
    return by_counts(n, counts, required, rank_share=RANK_SHARE, skip=unused)


def to_kv(ids: np.ndarray) -> KV:
    return KV.array(KEY, GGUFValueType.INT32, np.asarray(ids, dtype=np.int32))


def read(get: Getter, where: object) -> np.ndarray | None:
    """A file's draft vocabulary (None without one), checked as the patched llama.cpp checks it."""
    ids = get(KEY)
    if ids is None:
        return None
    n_vocab = len(_tokens(get, where))
    a = np.asarray(ids) if isinstance(ids, list) else None
    if a is None or a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
        raise FormatError(f"{where}: {KEY} is not an array of token ids; rewrite the file with {OPTION}")
    if a[0] < 0 or a[-1] >= n_vocab or (a.size > 1 and bool(np.any(np.diff(a) <= 0))):
        raise FormatError(f"{where}: {KEY} must hold ascending unique token ids below {n_vocab}; rewrite the file "
                          f"with {OPTION}")
    return a.astype(np.int32)


def head_rows(ids: np.ndarray | None, n_vocab: int) -> int:
    """How many rows of the LM head a draft reads."""
    return n_vocab if ids is None else int(ids.size)


def apply(kvs: Sequence[KV], carried: np.ndarray | None, n: int | None, text: str | os.PathLike[str] | None,
          where: object) -> list[KV]:
    """``kvs`` with the output's draft vocabulary: a new one of ``n`` tokens when asked, else ``carried`` (the
    head's own map travels with it), else none."""
    out = [kv for kv in kvs if kv.key != KEY]
    if n is not None:
        out.append(to_kv(choose(out, n, text, where)))
    elif carried is not None:
        out.append(to_kv(carried))
    return out


def of(kvs: Sequence[KV], where: object) -> np.ndarray | None:
    """The draft vocabulary in ``kvs`` (checked), or None."""
    table = {kv.key: kv for kv in kvs}
    return read(lambda k: table[k].scalar() if k in table else None, where)
