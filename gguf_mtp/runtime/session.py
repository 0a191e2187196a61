"""The public runtime: a model with its MTP head, ready for completion and multi-turn chat.

Example:
    >>> from gguf_mtp.runtime import MTPSession
    >>> with MTPSession("Qwen3.5-9B-Q4_K_M.gguf", n_draft=3) as s:               # doctest: +SKIP
    ...     print(s.generate("def fib(n):", max_tokens=64).text)
    ...     print(s.chat([{"role": "user", "content": "Hi!"}]).text, s.stats.compact())
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import GgufMtpError
from ..ggufio import keys as K
from ..surgery import plan_graft
from .chat import ChatTemplate
from .llama import Context, Model
from .pairing import HeadSource, Pairing, resolve
from .rollback import Rollback, open_target
from .sampling import Sampler, SamplerConfig
from .speculative import Engine
from .stats import Stats


@dataclass
class Generation:
    """Result of one completion or chat turn."""

    text: str
    tokens: list[int]
    stats: Stats
    stopped: str  # "eog", "length", "interrupted"


@dataclass
class SessionConfig:
    n_draft: int = 3
    adaptive: bool = False
    p_min: float = 0.0
    n_ctx: int = 4096
    n_batch: int = 512
    n_threads: int | None = None
    n_gpu_layers: int = 0
    draft_gpu_layers: int | None = None
    require_mtp: bool = False
    # >0: the MTP head sees only the last N tokens of each prompt (bounds its prompt cost; lossless either way)
    prompt_window: int = 0
    # how the target undoes rejected drafts: auto | native | replay[:store=..,every=..,merge=..] (rollback.py)
    rollback: str = "auto"


class MTPSession:
    """A model paired with its MTP head (bundled, self-contained sidecar or head-only sidecar).

    ``mtp``: ``"auto"`` (the model's own head, else a sidecar beside it), a sidecar path, or ``False``.
    A head-only sidecar is merged with the model at load time through a virtual file: one copy of the
    embeddings and LM head, nothing written to disk.
    """

    def __init__(self, model: str | os.PathLike[str], *, mtp: str | os.PathLike[str] | bool | None = "auto",
                 config: SessionConfig | None = None, on_notice: Callable[[str], None] | None = None, **kw: Any) -> None:
        self.cfg = config or SessionConfig(**kw)
        self.notices: list[str] = []
        self._dirty = False  # an interrupted turn left the engine mid-step: start the next one afresh
        self._notify = on_notice or (lambda s: None)
        self._models: list[Model] = []
        self._contexts: list[Context] = []
        self.pairing: Pairing = resolve(model, mtp)
        if self.pairing.source == HeadSource.NONE and self.cfg.require_mtp:
            raise GgufMtpError(f"{model}: --require-mtp: {self.pairing.notice}")
        try:
            self._load()
        except GgufMtpError as e:
            if self.cfg.require_mtp or self.pairing.source == HeadSource.NONE:
                self.close()
                raise
            self.close()
            self.notices.append(f"MTP head failed to load ({e}); plain decoding")
            self.pairing = Pairing(HeadSource.NONE, self.pairing.model, notice=self.notices[-1])
            self._load()
        if self.pairing.notice and self.pairing.notice not in self.notices:
            self.notices.append(self.pairing.notice)
        for n in self.notices:
            self._notify(n)
        m = self.pairing.model
        toks = m.get(K.TOK_TOKENS) or []
        bos_id, eos_id = m.get(K.TOK_BOS), m.get(K.TOK_EOS)
        self.template = ChatTemplate(
            m.get(K.TOK_CHAT_TEMPLATE),  # type: ignore[arg-type]
            toks[bos_id] if isinstance(bos_id, int) and bos_id < len(toks) else "",  # type: ignore[index,arg-type]
            toks[eos_id] if isinstance(eos_id, int) and eos_id < len(toks) else "")  # type: ignore[index,arg-type]
        self.stats = Stats(n_draft_max=self.engine.n_draft_max)

    # -- loading -------------------------------------------------------------------------------
    def _load(self) -> None:
        c, p = self.cfg, self.pairing
        mtp_on = p.source != HeadSource.NONE
        k = max(1, c.n_draft)
        if p.source == HeadSource.HEAD_ONLY:
            from .virtual import VirtualFile, VirtualGGUF

            assert p.sidecar is not None
            vf = VirtualFile(VirtualGGUF(plan_graft(p.sidecar, p.model)))
            try:
                target = Model(f"{p.model.path} + {p.sidecar.path.name}", load_mtp=True,
                               n_gpu_layers=c.n_gpu_layers, file_ptr=vf.fp)
            finally:
                vf.close()  # llama.cpp has read every byte (no mmap on a FILE *)
        else:
            target = Model(p.model.path, load_mtp=p.source == HeadSource.BUNDLED, n_gpu_layers=c.n_gpu_layers)
        self._models.append(target)
        self.model = target

        def make(n_rs_seq: int, n_seq_max: int) -> Context:
            return Context(target, n_ctx=c.n_ctx, n_batch=max(c.n_batch, k + 1), n_threads=c.n_threads,
                           n_rs_seq=n_rs_seq, embeddings_nextn=mtp_on, n_seq_max=n_seq_max)

        rollback: Rollback | None = None
        if mtp_on:
            tctx, rollback, note = open_target(target, p.model.arch, k, make, c.rollback)
            if note:
                self.notices.append(note)
        else:
            tctx = make(0, 1)
        self._contexts.append(tctx)
        mctx = None
        if mtp_on:
            draft_model = target
            if p.source == HeadSource.SELF_CONTAINED:
                assert p.sidecar is not None
                ngl = c.n_gpu_layers if c.draft_gpu_layers is None else c.draft_gpu_layers
                draft_model = Model(p.sidecar.path, load_mtp=True, n_gpu_layers=ngl)
                self._models.append(draft_model)
            mctx = Context(draft_model, n_ctx=c.n_ctx, n_batch=max(c.n_batch, k + 1), n_threads=c.n_threads, mtp=True)
            self._contexts.append(mctx)
        self.engine = Engine(tctx, mctx, n_draft=k, p_min=c.p_min, adaptive=c.adaptive, prompt_window=c.prompt_window,
                             rollback=rollback)

    def set_draft(self, n_draft: int, *, adaptive: bool = False) -> None:
        """Change the draft length (up to the one the session was opened with) for the next turn."""
        e = self.engine
        k = max(1, min(n_draft, self.cfg.n_draft))
        self.engine = Engine(e.tgt, e.mtp, n_draft=k, p_min=self.cfg.p_min, adaptive=adaptive,
                             prompt_window=self.cfg.prompt_window, rollback=e.rollback)
        self.engine.stats = e.stats
        self.engine.stats.n_draft_max = k

    @property
    def mtp_enabled(self) -> bool:
        return self.engine.mtp is not None

    # -- generation ----------------------------------------------------------------------------
    def _run(self, new_tokens: list[int], max_tokens: int, sampling: SamplerConfig | None,
             on_text: Callable[[str], None] | None, reuse: bool) -> Generation:
        e = self.engine
        before = Stats(n_draft_max=e.n_draft_max)
        before.merge(e.stats)
        if reuse:
            self._sync(new_tokens)
        else:
            e.reset()
            e.feed(new_tokens)
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        out: list[int] = []
        pieces: list[str] = []
        stopped = "length"
        try:
            for t in e.generate(Sampler(sampling or SamplerConfig()), max_tokens, self.model.is_eog):
                out.append(t)
                if self.model.is_eog(t):
                    stopped = "eog"
                    break
                s = dec.decode(self.model.piece(t))
                if s:
                    pieces.append(s)
                    if on_text:
                        on_text(s)
        except KeyboardInterrupt:
            stopped = "interrupted"
            self._dirty = True
        tail = dec.decode(b"", final=True)
        if tail:
            pieces.append(tail)
            if on_text:
                on_text(tail)
        turn = _diff(e.stats, before)
        self.stats.merge(turn)
        return Generation("".join(pieces), out, turn, stopped)

    def _sync(self, tokens: list[int]) -> None:
        """Make the engine's context equal ``tokens`` minus its last token, reusing the common prefix."""
        e = self.engine
        if self._dirty:
            e.reset()
            self._dirty = False
        history = e.tokens + ([e.id_last] if e.id_last is not None else [])
        common = 0
        for a, b in zip(history, tokens):
            if a != b:
                break
            common += 1
        common = min(common, len(tokens) - 1)  # always leave a token to decode
        if common > len(e.tokens):  # id_last matches: keep it pending
            e.feed(tokens[common:])
            return
        if not e.rewind(common):
            e.reset()
            common = 0
        e.id_last = None
        e.feed(tokens[common:])

    def generate(self, prompt: str | list[int], *, max_tokens: int = 256, sampling: SamplerConfig | None = None,
                 on_text: Callable[[str], None] | None = None) -> Generation:
        """Complete ``prompt`` (text or tokens) from a fresh context."""
        toks = self.model.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        if not toks:
            raise GgufMtpError("empty prompt")
        return self._run(toks, max_tokens, sampling, on_text, reuse=False)

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int = 512, sampling: SamplerConfig | None = None,
             on_text: Callable[[str], None] | None = None) -> Generation:
        """Answer the last message of ``messages``; the shared prefix with the previous turn is not recomputed."""
        text = self.template.render(messages, add_generation_prompt=True)
        toks = self.model.tokenize(text, add_special=False, parse_special=True)
        return self._run(toks, max_tokens, sampling, on_text, reuse=True)

    def close(self) -> None:
        for c in reversed(self._contexts):
            c.close()
        for m in reversed(self._models):
            m.close()
        self._contexts, self._models = [], []

    def __enter__(self) -> "MTPSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _diff(now: Stats, before: Stats) -> Stats:
    d = Stats(n_draft_max=now.n_draft_max)
    d.prompt_tokens = now.prompt_tokens - before.prompt_tokens
    d.prompt_seconds = now.prompt_seconds - before.prompt_seconds
    d.emitted = now.emitted - before.emitted
    d.steps = now.steps - before.steps
    d.decode_seconds = now.decode_seconds - before.decode_seconds
    d.llama_seconds = now.llama_seconds - before.llama_seconds
    d.rollback_seconds = now.rollback_seconds - before.rollback_seconds
    d.replayed_tokens = now.replayed_tokens - before.replayed_tokens
    d.drafted_at = [a - (before.drafted_at[i] if i < len(before.drafted_at) else 0) for i, a in enumerate(now.drafted_at)]
    d.accepted_at = [a - (before.accepted_at[i] if i < len(before.accepted_at) else 0) for i, a in enumerate(now.accepted_at)]
    d.draft_lengths = {k: v - before.draft_lengths.get(k, 0) for k, v in now.draft_lengths.items()
                       if v - before.draft_lengths.get(k, 0)}
    return d


__all__ = ["MTPSession", "SessionConfig", "Generation", "SamplerConfig"]
