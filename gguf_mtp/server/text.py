"""Token bytes to text deltas for one answer: UTF-8 decoded incrementally (a character split over tokens waits
for its last byte), cut at the first stop sequence, and a tail that could begin a stop sequence held back until
it is known not to. Streamed deltas therefore concatenate to exactly the non-streamed text. :func:`is_utf8` is the
one test of text coming in (a request's, a prompt on the command line, a line of chat)."""

from __future__ import annotations

import codecs


def is_utf8(text: str) -> bool:
    """False for text that cannot be written as UTF-8: it holds lone surrogates (bytes that were not UTF-8, which
    Python keeps as surrogates, or a JSON ``"\\ud800"``), which llama.cpp's tokenizer cannot take."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class TextStream:
    def __init__(self, stops: list[str] | None = None) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")
        self.stops = [s for s in (stops or []) if s]
        self._longest = max((len(s) for s in self.stops), default=0)
        self.text = ""  # decoded so far (cut at a stop sequence once one is seen)
        self.sent = 0  # characters of ``text`` already released
        self.stopped = False  # a stop sequence was found: generation should end
        self.word = ""  # the stop sequence found

    def push(self, data: bytes) -> str:
        """Add a token's bytes; returns the text that can be released now ('' if none)."""
        if self.stopped:
            return ""
        self.text += self._dec.decode(data)
        return self._release(final=False)

    def finish(self) -> str:
        """End of generation: release whatever is held back."""
        if not self.stopped:
            self.text += self._dec.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        end = len(self.text)
        if self.stops and not self.stopped:
            start = max(0, self.sent - self._longest)  # a stop cannot lie wholly inside released text
            hits = [(i, s) for i, s in ((self.text.find(s, start), s) for s in self.stops) if i >= 0]
            if hits:
                at, self.word = min(hits, key=lambda h: h[0])
                self.text = self.text[:at]
                self.stopped = True
                end = len(self.text)
            elif not final:
                end -= self._held_tail()
        out = self.text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out

    def _held_tail(self) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop sequence."""
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self.text)), best, -1):
                if self.text.endswith(s[:n]):
                    best = n
                    break
        return best
