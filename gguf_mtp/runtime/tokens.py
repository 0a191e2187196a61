"""Tokenizing untrusted text with bounded time and memory, to exactly the tokens one llama.cpp call gives.

``llama_tokenize`` first splits the special tokens out of the text, and each one it finds walks its list of
fragments from the start: the cost is quadratic in the number of special tokens in one call (a chat of many short
messages is mostly special tokens). It also wants an output buffer as long as the text, and our list of the
tokens is larger still. So a long text goes to llama.cpp in pieces of about :data:`PIECE` bytes, each cut right
after a special token that llama.cpp is bound to split out at that very place (no special token it tries before
that one overlaps it): llama.cpp then handles the text on either side of the cut independently, so the pieces give
exactly the tokens of the whole. Tokenizing stops once the tokens pass the caller's limit, and a text longer than
the limit times the longest token (in bytes) is refused before any of it is tokenized: every token stands for at
most that many bytes of text, so it could not fit (whitespace that a special token marked lstrip/rstrip swallows
is counted too: a text padded with megabytes of it is refused although it might fit).
"""

from __future__ import annotations

import ctypes
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import GgufMtpError
from .llama import Model

import llama_cpp as _ll  # isort: skip  (after .llama, which loads llama.cpp's libraries first)

#: bytes handed to llama.cpp in one call (a piece ends at the first safe cut after this many bytes)
PIECE = 1 << 14
#: candidate cuts examined per piece before the piece is allowed to grow (bounds the Python work on texts whose
#: special tokens all overlap one another)
MAX_TRIES = 64
_SPECIAL = _ll.LLAMA_TOKEN_ATTR_CONTROL | _ll.LLAMA_TOKEN_ATTR_USER_DEFINED | _ll.LLAMA_TOKEN_ATTR_UNKNOWN
_PARSED_ALWAYS = _ll.LLAMA_TOKEN_ATTR_USER_DEFINED  # split out even when special tokens are not parsed


class PromptTooLong(GgufMtpError):
    """The text needs more tokens than ``limit``; ``n_tokens`` is its exact count, or a lower bound when
    ``exact`` is False (tokenizing stopped, or the text was refused by its length in bytes)."""

    def __init__(self, n_tokens: int, limit: int, n_ctx: int, exact: bool) -> None:
        self.n_tokens, self.limit, self.n_ctx, self.exact = n_tokens, limit, n_ctx, exact
        has = f"{n_tokens} tokens" if exact else f"at least {n_tokens} tokens"
        super().__init__(f"context is full: the prompt has {has}, and the context holds {n_ctx} "
                         f"(at most {limit} for the prompt); shorten it, or raise -c/--ctx-size")


class Cancelled(GgufMtpError):
    """Tokenizing was stopped by the caller (a server shutting down)."""


@dataclass
class _Specials:
    """The special tokens llama.cpp splits out for one value of ``parse_special``."""

    texts: tuple[bytes, ...]  # longest first
    pattern: re.Pattern[bytes] | None  # the longest special token at a position wins (alternatives longest first)
    rstrip: frozenset[bytes]  # those that swallow the whitespace after them
    longest: int


class VocabFacts:
    """What bounded tokenization needs to know about a model's vocabulary (read once, on first use)."""

    def __init__(self, model: Model) -> None:
        vocab = model.vocab
        texts: dict[bool, list[bytes]] = {True: [], False: []}
        rstrip: set[bytes] = set()
        longest_piece = 1
        buf = ctypes.create_string_buffer(256)
        for t in range(model.n_vocab):
            attr = int(_ll.llama_vocab_get_attr(vocab, t))
            n = _ll.llama_token_to_piece(vocab, t, buf, 256, 0, True)
            longest_piece = max(longest_piece, abs(n))  # a negative n: the piece needs -n bytes
            if attr & _SPECIAL:
                text = _ll.llama_vocab_get_text(vocab, t) or b""
                if not text:
                    continue  # nothing to find (and nothing a regular expression could cut at)
                texts[True].append(text)
                if attr & _PARSED_ALWAYS:
                    texts[False].append(text)
                if attr & _ll.LLAMA_TOKEN_ATTR_RSTRIP:
                    rstrip.add(text)
        #: no token stands for more bytes of text than this (4: an unknown character becomes one token)
        self.longest_piece = max(longest_piece, 4)
        self.specials = {k: _make_specials(v, rstrip) for k, v in texts.items()}
        empty = model.tokenize("", add_special=True)
        n_head = 1 if empty and empty[0] == _ll.llama_vocab_bos(vocab) and (
            _ll.llama_vocab_get_add_bos(vocab) or _ll.llama_vocab_type(vocab) == _ll.LLAMA_VOCAB_TYPE_WPM) else 0
        #: what add_special puts after the text (an EOS or SEP), moved to the end when a text goes in pieces
        self.tail = empty[n_head:]


def _make_specials(texts: list[bytes], rstrip: set[bytes]) -> _Specials:
    if not texts:
        return _Specials((), None, frozenset(), 0)
    ordered = sorted(set(texts), key=len, reverse=True)
    return _Specials(tuple(ordered), re.compile(b"|".join(re.escape(t) for t in ordered)),
                     frozenset(rstrip & set(ordered)), len(ordered[0]))


_facts: weakref.WeakKeyDictionary[Model, VocabFacts] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def facts(model: Model) -> VocabFacts:
    """The model's :class:`VocabFacts`, read on first use (one pass over the vocabulary)."""
    with _lock:
        f = _facts.get(model)
        if f is None:
            f = _facts[model] = VocabFacts(model)
        return f


def max_bytes(model: Model, n_tokens: int) -> int:
    """The longest text (in UTF-8 bytes) that could tokenize to ``n_tokens`` tokens or fewer."""
    return n_tokens * facts(model).longest_piece


def tokenize(model: Model, text: str | bytes, *, add_special: bool = True, parse_special: bool = True,
             limit: int | None = None, n_ctx: int | None = None,
             cancelled: Callable[[], bool] | None = None) -> list[int]:
    """``model.tokenize(text)``'s tokens, in linear time; with ``limit``, raises :class:`PromptTooLong` as soon as
    they are known to be more than ``limit`` (``n_ctx`` is named in its message), without tokenizing the rest.
    ``cancelled`` is asked between pieces; True raises :class:`Cancelled`."""
    ctx = n_ctx if n_ctx is not None else (limit or 0)
    if limit is not None and len(text) > PIECE:  # a character is a byte or more: no need to encode a text to refuse it
        longest = facts(model).longest_piece
        if len(text) > limit * longest:
            raise PromptTooLong(-(-len(text) // longest), limit, ctx, exact=False)
    data = text.encode("utf-8") if isinstance(text, str) else text
    if len(data) <= PIECE:  # the common case: one call, as before
        return _bounded(_call(model, data, add_special, parse_special, limit), limit, ctx)
    f = facts(model)
    if limit is not None and len(data) > limit * f.longest_piece:
        raise PromptTooLong(-(-len(data) // f.longest_piece), limit, ctx, exact=False)
    tail = f.tail if add_special else []
    out: list[int] = []
    for i, piece in enumerate(_pieces(data, f.specials[parse_special])):
        if cancelled is not None and cancelled():
            raise Cancelled("tokenizing was cancelled")
        first = add_special and i == 0  # the piece that gets add_special's tokens (the tail is moved to the end)
        extra = 0 if first else len(tail)  # tokens the total will have beside this piece's and those before
        room = None if limit is None else limit - len(out) - extra
        got = _call(model, piece, first, parse_special, room)
        if isinstance(got, int):
            raise PromptTooLong(len(out) + got + extra, limit or 0, ctx, exact=False)
        if first and tail:
            if got[len(got) - len(tail):] != tail:  # not the layout llama.cpp's tokenizers use: no pieces
                return _bounded(_call(model, data, add_special, parse_special, limit), limit, ctx)
            del got[len(got) - len(tail):]
        out += got
    return _bounded(out + tail, limit, ctx)


def _bounded(got: list[int] | int, limit: int | None, n_ctx: int) -> list[int]:
    if isinstance(got, int):
        raise PromptTooLong(got, limit or 0, n_ctx, exact=True)
    if limit is not None and len(got) > limit:
        raise PromptTooLong(len(got), limit, n_ctx, exact=True)
    return got


def _call(model: Model, data: bytes, add_special: bool, parse_special: bool, room: int | None) -> list[int] | int:
    """One ``llama_tokenize``: the tokens, or (more than ``room`` of them) their count, without a list."""
    n_max = len(data) + 16 if room is None else min(len(data) + 16, room + 1)
    while True:
        buf = (_ll.llama_token * max(n_max, 1))()
        n = _ll.llama_tokenize(model.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n >= 0:
            return buf[:n]
        if n == -(1 << 31):
            raise GgufMtpError(f"{model.path}: llama.cpp could not tokenize a text of {len(data)} bytes")
        if room is not None and -n > room:
            return -n
        n_max = -n  # more tokens than bytes (a space before each fragment): ask again with room for them


def _pieces(data: bytes, sp: _Specials) -> Iterator[bytes]:
    """``data`` cut into pieces of at least :data:`PIECE` bytes at safe places (see the module's doc)."""
    pos = 0
    while len(data) - pos > PIECE and sp.pattern is not None:
        start: int | None = pos + PIECE
        cut = None
        while cut is None and start is not None:
            cut, start = _safe_cut(data, start, sp)
        if cut is None:  # no special token further on: the rest is one piece
            break
        yield data[pos:cut]
        pos = cut
    yield data[pos:]


def _safe_cut(data: bytes, start: int, sp: _Specials) -> tuple[int | None, int | None]:
    """The first safe cut among the next :data:`MAX_TRIES` special tokens from ``start``; else None and where to
    look on (None: no special token further on)."""
    assert sp.pattern is not None
    for tries, m in enumerate(sp.pattern.finditer(data, start)):
        if tries >= MAX_TRIES:
            return None, max(m.start(), start + PIECE)
        if m.end() < len(data) and _matched_here(data, m.start(), m.group(), sp):
            return m.end(), None
    return None, None


def _matched_here(data: bytes, a: int, s: bytes, sp: _Specials) -> bool:
    """Whether llama.cpp is bound to split special token ``s`` out at ``a``: it tries its special tokens longest
    first (ties in no set order), each left to right without overlaps, so the occurrence is taken unless a special
    token at least as long overlaps it, or an earlier occurrence of itself does. One that swallows the whitespace
    after it is not a cut either (the next piece would keep that whitespace)."""
    assert sp.pattern is not None
    if s in sp.rstrip:
        return False
    size, end = len(s), a + len(s)
    for q in range(max(0, a - sp.longest + 1), end):
        if q == a:
            continue
        m = sp.pattern.match(data, q)  # the longest special token starting at q
        if m is None or m.end() <= a:
            continue
        n = m.end() - q
        if n > size or (n == size and (q < a or m.group() != s)):
            return False
    return True


__all__ = ["tokenize", "max_bytes", "facts", "PromptTooLong", "Cancelled", "PIECE"]
