"""The public runtime: a model with its MTP head, ready for completion and multi-turn chat.

Example:
    >>> from gguf_mtp.runtime import MTPSession
    >>> with MTPSession("Qwen3.5-9B-Q4_K_M.gguf", n_draft=3) as s:               # doctest: +SKIP
    ...     print(s.generate("def fib(n):", max_tokens=64).text)
    ...     print(s.chat([{"role": "user", "content": "Hi!"}]).text, s.stats.compact())
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import Keys

from .. import draft_vocab
from ..errors import GgufMtpError
from ..ggufio.format import KV
from ..ggufio.model import GGUFModel
from ..head import GraftPlan, find_head, plan_graft
from . import devices, patches, placement, rpc, tokens, virtual
from .adaptive import DraftLength
from .chat import ChatTemplate
from .config import SamplerConfig, SessionConfig
from .llama import Context, Model, has_device_feed
from .options import check_session
from .pairing import HeadSource, Pairing, resolve
from .rollback import Rollback, open_target
from .sampling import Sampler
from .speculative import ContextFull, Engine
from .stats import Stats
from .virtual import VirtualFile, VirtualGGUF


@dataclass
class Generation:
    """Result of one completion or chat turn."""

    text: str
    tokens: list[int]
    stats: Stats
    stopped: str  # "eog", "length", "stop" (a stop text), "context" (no limit, the context is full), "interrupted"

    def tokens_sha256(self) -> str:
        """The sha256 of the answer's token ids (``tokens_sha256``): two runs printed the same tokens exactly when
        these match, which a printed text cannot show (pieces that print nothing, or the same text from other
        tokens).

        >>> g.tokens_sha256() == plain.tokens_sha256()  # doctest: +SKIP
        True
        """
        return tokens_sha256(self.tokens)


def tokens_sha256(tokens: Sequence[int]) -> str:
    """The sha256 of token ids as little-endian int32, the one digest of an answer's tokens (``run --stats-json``,
    bench/logits_digest.py)."""
    return hashlib.sha256(np.asarray(tokens, dtype="<i4").tobytes()).hexdigest()


class MTPSession:
    """A model paired with its MTP head (bundled, self-contained sidecar or head-only sidecar).

    ``mtp``: ``"auto"`` (the model's own head, else a sidecar beside it), a sidecar path, or ``False``.
    A head-only sidecar is merged with the model at load time through a virtual file: one copy of the
    embeddings and LM head, nothing written to disk.
    """

    def __init__(self, model: str | os.PathLike[str], *, mtp: str | os.PathLike[str] | bool | None = "auto",
                 config: SessionConfig | None = None, on_notice: Callable[[str], None] | None = None,
                 chat_template: str | None = None, **kw: Any) -> None:
        # options first: a bad one is refused before any file is opened or llama.cpp is reached
        self.cfg, self.notices = check_session(config or SessionConfig(**kw), speculative=mtp not in (False, None))
        self._dirty = False  # an interrupted turn left the engine mid-step: start the next one afresh
        self._notify = on_notice or (lambda s: None)
        self._models: list[Model] = []
        self._contexts: list[Context] = []
        self.pairing: Pairing = resolve(model, mtp)
        if self.pairing.source == HeadSource.NONE and self.cfg.require_mtp:
            raise GgufMtpError(f"{model}: --require-mtp: {self.pairing.notice}")
        if self.cfg.rpc:  # their devices join the registry before anything counts devices
            rpc.add_servers(self.cfg.rpc)
        note = devices.offload_note(max(self.cfg.n_gpu_layers, self.cfg.draft_gpu_layers or 0))
        if note:  # -ngl with no GPU to take the layers: say so rather than run on the CPU silently
            self.notices.append(note)
        self.placement: dict[str, str] = {}  # "target" / "draft" -> where their layers go
        self._params = self._make_params()  # option mistakes are errors here, never a plain-decoding fallback
        #: the draft vocabulary this session serves llama.cpp in place of the file's (--draft-vocab), or None
        self.draft_vocab: np.ndarray | None = self._choose_draft_vocab()
        try:
            self._load()
        except GgufMtpError as e:
            if self.cfg.require_mtp or self.pairing.source == HeadSource.NONE:
                self.close()
                raise
            self.close()
            self.notices.append(f"MTP head failed to load ({e}); plain decoding")
            self.pairing = Pairing(HeadSource.NONE, self.pairing.model, notice=self.notices[-1])
            self._params = self._make_params()
            self._load()
        if self.pairing.notice and self.pairing.notice not in self.notices:
            self.notices.append(self.pairing.notice)
        if self.pairing.source != HeadSource.NONE:  # a draft vocabulary this library cannot use: say so
            sidecar = self.pairing.sidecar.path if self.pairing.sidecar is not None else None
            vocab_note = patches.draft_vocab_note(self.pairing.model.path, sidecar)
            if vocab_note:
                self.notices.append(vocab_note)
            head_file = self.pairing.sidecar if self.pairing.source == HeadSource.SELF_CONTAINED else None
            has_map = self.draft_vocab is not None or any(
                f is not None and draft_vocab.KEY in f.kv for f in (self.pairing.model, self.pairing.sidecar))
            hint = patches.draft_vocab_hint(self.pairing.model.arch, len((head_file or self.pairing.model).get(
                Keys.Tokenizer.LIST) or []), has_map)
            if hint:
                self.notices.append(hint)
        why = next((m.host_sampling for m in self._models if m.host_sampling), None)
        if why and self.cfg.device_sampling:  # a back-end that must not run sampler chains in its decode graph
            self.notices.append(f"sampling on the host, not in the decode graph ({why})")
        for n in self.notices:
            self._notify(n)
        m = self.pairing.model
        toks = m.get(Keys.Tokenizer.LIST) or []
        bos_id, eos_id = m.get(Keys.Tokenizer.BOS_ID), m.get(Keys.Tokenizer.EOS_ID)
        self.template = ChatTemplate(
            chat_template or m.get(Keys.Tokenizer.CHAT_TEMPLATE),
            toks[bos_id] if isinstance(bos_id, int) and bos_id < len(toks) else "",
            toks[eos_id] if isinstance(eos_id, int) and eos_id < len(toks) else "")
        self.stats = Stats(n_draft_max=self.engine.n_draft_max)
        if self._warms_up:
            self.engine.warm_up(self.model.warmup_tokens())

    @property
    def _warms_up(self) -> bool:
        """Whether the session runs its decodes once at load (``--warmup``; by default where layers are offloaded)."""
        warmup = self.cfg.warmup
        return self.cfg.n_gpu_layers != 0 or bool(self.cfg.draft_gpu_layers) if warmup is None else warmup

    # -- loading -------------------------------------------------------------------------------
    def _choose_draft_vocab(self) -> np.ndarray | None:
        """The token ids of ``--draft-vocab N`` for the head's vocabulary (the model's; a self-contained sidecar's
        own list is the same, pairing checked it), chosen before anything loads: a bad request is an error, not a
        reason to decode plainly. None without the option, a head, or a library that can use it (then a note)."""
        c, p = self.cfg, self.pairing
        if c.draft_vocab is None or p.source == HeadSource.NONE:
            return None
        src = p.sidecar if p.source == HeadSource.SELF_CONTAINED else p.model
        assert src is not None
        ids = draft_vocab.choose(src.model_kvs(), c.draft_vocab, c.draft_vocab_from, src.path)  # checked everywhere
        if "draft-vocab" not in patches.names():
            self.notices.append(f"{draft_vocab.OPTION} {c.draft_vocab}: this llama.cpp build cannot use a draft "
                                "vocabulary (no draft-vocab patch): the drafts read the full LM head; `bash "
                                "scripts/setup.sh` builds the patched library")
            return None
        archs = patches.draft_vocab_archs()
        if p.model.arch not in archs:
            self.notices.append(f"{draft_vocab.OPTION} {c.draft_vocab}: {p.model.arch}'s MTP graph reads no draft "
                                f"vocabulary in this llama.cpp build (only {', '.join(sorted(archs))}'s): the drafts "
                                "read the full LM head")
            return None
        why = virtual.unavailable()
        if why:  # the file cannot be served with the map here: the head as it is, rather than no head at all
            self.notices.append(f"{draft_vocab.OPTION} {c.draft_vocab}: cannot serve the file with it ({why}): the "
                                "drafts read the full LM head; `gguf-mtp extract --draft-vocab` writes it into a file")
            return None
        return ids

    def _virtual_model(self, model: GGUFModel, name: str, params: placement.ModelParams | None,
                       plan: GraftPlan | None = None) -> Model:
        """Load ``model`` (or the graft ``plan``) with its MTP head through a ``FILE *`` that serves its metadata
        with this session's draft vocabulary: llama.cpp reads every byte now, without mmap."""
        base: list[KV] = plan.kvs if plan is not None else model.model_kvs()
        if self.draft_vocab is not None:
            base = draft_vocab.apply(base, self.draft_vocab, None, None, model.path)
        vf = VirtualFile(VirtualGGUF.grafted(plan, base) if plan is not None else VirtualGGUF.as_is(model, base))
        try:
            return Model(name, load_mtp=True, file_ptr=vf.fp, placement=params)
        finally:
            vf.close()  # llama.cpp has read every byte (no mmap on a FILE *)

    def _n_layer_all(self) -> int:
        """The target's layers as llama.cpp counts them for -ngl: its trunk and the MTP blocks it loads with (a
        head-only sidecar's are grafted on)."""
        p = self.pairing
        n = int(p.model.arch_get(Keys.LLM.BLOCK_COUNT, 0) or 0)
        if p.source == HeadSource.HEAD_ONLY and p.sidecar is not None:
            own, head = find_head(p.model), find_head(p.sidecar)
            n += (head.n_mtp if head else 0) - (own.n_mtp if own else 0)
        return n

    def _make_params(self) -> tuple[placement.ModelParams, placement.ModelParams | None]:
        """Placement of the target and (a self-contained sidecar's) draft model, checked against the devices."""
        c, p = self.cfg, self.pairing
        self.placement.clear()
        tparams = self._target_params()
        self.placement = {"target": tparams.describe(), **self.placement}
        if p.source != HeadSource.SELF_CONTAINED:
            return tparams, None
        ngl = c.n_gpu_layers if c.draft_gpu_layers is None else c.draft_gpu_layers
        if c.draft_gpu_layers is None and c.draft_devices:  # a device named for the head: all of it goes there
            ngl = 999
        dpl = placement.Placement(c.devices, c.split_mode, c.tensor_split, c.main_gpu)  # as the target's
        if c.draft_devices is not None:  # llama.cpp: a draft pinned to one device is split by layer
            dpl = placement.Placement(c.draft_devices, "layer" if len(c.draft_devices) <= 1 else c.split_mode)
        dparams = placement.ModelParams(dpl, n_gpu_layers=ngl)
        assert p.sidecar is not None  # a self-contained pairing has its sidecar
        placement.place_embeddings(dparams, p.sidecar, int(p.sidecar.arch_get(Keys.LLM.BLOCK_COUNT, 0) or 0))
        self.placement["draft"] = dparams.describe() + " (its own embeddings and LM head)"
        return tparams, dparams

    def _target_params(self) -> placement.ModelParams:
        """The target's placement. A bundled or head-only head lives in the target model, so --device-draft
        moves its layers (and the LM head after them) by the model's layer split; see placement.draft_split."""
        c, p = self.cfg, self.pairing
        pl = placement.Placement(c.devices, c.split_mode, c.tensor_split, c.main_gpu)
        if c.draft_devices is None or p.source not in (HeadSource.BUNDLED, HeadSource.HEAD_ONLY):
            mp = placement.ModelParams(pl, n_gpu_layers=c.n_gpu_layers)
            placement.place_embeddings(mp, p.model, self._n_layer_all())
            return mp
        if len(c.draft_devices) != 1:
            raise GgufMtpError(f"--device-draft {','.join(c.draft_devices) or 'none'}: a {p.source.value} head is "
                               "part of the target model and takes one device (its layers and the LM head after them); "
                               "it stays on the CPU only with the whole model (-ngl 0, no --device-draft)")
        src = p.model if p.source == HeadSource.BUNDLED else p.sidecar
        assert src is not None  # a head-only pairing has its sidecar
        head = find_head(src)
        assert head is not None
        mp = placement.ModelParams(pl, draft_layers=(head.n_trunk + head.n_mtp, head.n_mtp),
                                   draft_device=c.draft_devices[0], n_gpu_layers=c.n_gpu_layers)
        placement.place_embeddings(mp, p.model, self._n_layer_all())
        blocks = f"blk.{head.n_trunk}" + (f"-{head.n_trunk + head.n_mtp - 1}" if head.n_mtp > 1 else "")
        self.placement["draft"] = f"{c.draft_devices[0]} ({blocks} and the LM head, shared with the target)"
        return mp

    def _load_placed(self, role: str, params: placement.ModelParams,
                     load: Callable[[placement.ModelParams], Model]) -> Model:
        """``load(params)``; where gguf-mtp moved the token embedding to a device (placement.place_embeddings) and
        the load fails, once more with llama.cpp's placement, and a notice: the move is an optimisation, and its
        room is an estimate made before the load."""
        try:
            return load(params)
        except GgufMtpError as e:
            dev = params.embd_device
            if dev is None:
                raise
            params.embed_on_cpu()
            model = load(params)
            if role in self.placement:
                self.placement[role] = self.placement[role].replace(f", token embeddings on {dev.name}", "")
            self.notices.append(f"the token embedding stays on the CPU: the load with it on {dev.name} failed "
                                f"({e}); GGUF_MTP_EMBD_ON_DEVICE=0 skips the attempt")
            return model

    def _load(self) -> None:
        c, p = self.cfg, self.pairing
        mtp_on = p.source != HeadSource.NONE
        k = max(1, c.n_draft)
        tparams, dparams = self._params
        if p.source == HeadSource.HEAD_ONLY:
            sidecar = p.sidecar
            assert sidecar is not None
            # a sidecar named for a model with a head of its own takes that head's place (pairing.resolve pairs
            # a bundled model with a sidecar only when --mtp names one)
            target = self._load_placed("target", tparams, lambda mp: self._virtual_model(
                p.model, f"{p.model.path} + {sidecar.path.name}", mp, plan_graft(sidecar, p.model, replace=True)))
        elif p.source == HeadSource.BUNDLED and self.draft_vocab is not None:
            target = self._load_placed("target", tparams,
                                       lambda mp: self._virtual_model(p.model, str(p.model.path), mp))
        else:
            target = self._load_placed("target", tparams, lambda mp: Model(
                p.model.path, load_mtp=p.source == HeadSource.BUNDLED, placement=mp))
        self._models.append(target)
        self.model = target
        n_seq = max(1, c.n_parallel)
        n_batch = max(c.n_batch, n_seq * (k + 1))  # a step of every sequence fits one batch (server slots)

        # outputs per decode: a verify step (draft + 1 rows) of every sequence, and under auto warmed up at load the
        # prompt's last rows the head's first draft is checked on (DraftLength.PROMPT_ROWS: checked only after a
        # warm-up; each row costs a vocabulary's worth of llama.cpp's host buffers); this also bounds a device sampler
        checks = DraftLength.PROMPT_ROWS if mtp_on and c.adaptive and self._warms_up else 0
        per_seq = max(k + 1, checks) if mtp_on else 1

        def make(n_rs_seq: int, n_seq_max: int, kv_unified: bool) -> Context:
            # n_seq_max > n_seq: rollback's spare sequences (rollback.SeqStore), in one shared KV stream
            return Context(target, n_ctx=c.n_ctx, n_batch=n_batch, n_threads=c.n_threads, n_rs_seq=n_rs_seq,
                           embeddings_nextn=mtp_on, flash_attn=c.flash_attn, n_seq_max=n_seq_max, kv_unified=kv_unified,
                           n_outputs_max=n_seq * per_seq, n_outputs_per_seq=per_seq)

        rollbacks: list[Rollback | None] = [None] * n_seq  # one per sequence (server slot)
        if mtp_on:
            tctx, rbs, note = open_target(target, p.model.arch, k, make, c.rollback, n_seq)
            rollbacks = list(rbs)
            if note:
                self.notices.append(note)
        else:
            tctx = make(0, n_seq, False)
        self._contexts.append(tctx)
        mctx = None
        #: a step's drafts chained in one decode of the MTP context (the mtp-draft-chain patch)
        self.chained = False
        #: a verify takes its last draft's id on the device (the device-draft-tokens patch, drafts sampled on the
        #: device)
        self.device_tokens = False
        self._device_tokens_asked = self._device_feed_asked = False
        if mtp_on:
            draft_model = target
            if p.source == HeadSource.SELF_CONTAINED:
                assert p.sidecar is not None
                side = p.sidecar
                assert dparams is not None  # made for a self-contained sidecar
                if self.draft_vocab is not None:
                    draft_model = self._load_placed("draft", dparams, lambda mp: self._virtual_model(
                        side, str(side.path), mp))
                else:
                    draft_model = self._load_placed("draft", dparams, lambda mp: Model(side.path, load_mtp=True,
                                                                                       placement=mp))
                self._models.append(draft_model)
            # greedy drafts of a single head, chained in one decode where the library can (patches.py): a step's
            # k drafts come back as k outputs of one sequence; otherwise one draft per sequence and decode
            self.chained = draft_model.n_nextn <= 1 and c.p_min <= 0 and patches.chains_drafts(p.model.arch)
            self._device_tokens_asked = patches.device_tokens()
            # the head's next decode behind the verify: an output on each of a verify's k + 1 rows
            self._device_feed_asked = (self._device_tokens_asked and not self.chained
                                       and patches.device_feed(p.model.arch) and has_device_feed())
            per_mtp = max(k if self.chained else 1, k + 1 if self._device_feed_asked else 1, checks)
            mctx = Context(draft_model, n_ctx=c.n_ctx, n_batch=n_batch, n_threads=c.n_threads, mtp=True,
                           flash_attn=c.flash_attn,
                           n_seq_max=n_seq, n_outputs_max=max(n_seq, per_mtp), n_outputs_per_seq=per_mtp)
            self._contexts.append(mctx)
        #: one engine per sequence; ``engine`` (sequence 0) is the one generate() and chat() use
        self.engines = [self._engine(tctx, mctx, k, c.adaptive, seq=i, rollback=rollbacks[i]) for i in range(n_seq)]
        self.engine = self.engines[0]
        self.device_tokens = self.engine.head.defers
        #: the head's next decode queued behind the verify, fed from its rows on the device (GGUF_MTP_DEVICE_FEED=1)
        self.device_feed = self.engine.head.feeds
        #: each draft after a step's first decoded from the one before on the device (GGUF_MTP_SELF_FEED=1)
        self.self_feed = self.engine.head.self_feeds

    def _engine(self, tctx: Context, mctx: Context | None, k: int, adaptive: bool, *, seq: int = 0,
                rollback: Rollback | None = None) -> Engine:
        c = self.cfg
        stable = c.stable_shapes
        if stable is None:  # the padding costs compute: worth it where launches, not arithmetic, dominate
            ngl = c.draft_gpu_layers if self.pairing.source == HeadSource.SELF_CONTAINED else None
            # an MoE head too: its padded rows route to more experts, but a rebuilt graph and a CUDA graph
            # captured again cost more than reading a few more experts (bench/reference/oneshot-h100-35b-a3b*)
            stable = (c.n_gpu_layers if ngl is None else ngl) != 0
        return Engine(tctx, mctx, n_draft=k, p_min=c.p_min, adaptive=adaptive, prompt_window=c.prompt_window,
                      seq=seq, rollback=rollback, timings=c.timings, device_sampling=c.device_sampling,
                      stable_shapes=stable, chained_drafts=self.chained,
                      device_tokens=self._device_tokens_asked, device_feed=self._device_feed_asked)

    def set_draft(self, n_draft: int, *, adaptive: bool = False) -> None:
        """Change the draft length for the next turn: 1 up to the length the session was opened with (a longer one
        is clamped), fixed or (``adaptive``) chosen by ``auto`` up to it. The session's totals carry on; the model
        stays loaded. Benchmarks compare lengths this way on one load.

        Example:
            >>> with MTPSession("Qwen3.5-9B-Q4_K_M.gguf", n_draft=4) as s:               # doctest: +SKIP
            ...     for k in (1, 2, 4):
            ...         s.set_draft(k)
            ...         print(k, s.generate("def fib(n):", max_tokens=64).stats.compact())
        """
        e = self.engine
        k = max(1, min(n_draft, self.cfg.n_draft))
        self.engine = self._engine(e.tgt, e.mtp, k, adaptive, rollback=e.rollback)
        self.engine.adopt_stats(e.stats)
        self.engine.stats.n_draft_max = k
        self.engines[0] = self.engine

    @property
    def mtp_enabled(self) -> bool:
        return self.engine.mtp is not None

    def describe_mtp(self) -> str:
        """How this session drafts, in one line (``run``'s ``MTP:`` line, ``serve``'s start-up line).

        Example: ``bundled, draft 2, rollback native (n_rs_seq=3), last draft verified from the device``.
        """
        if not self.mtp_enabled:
            return "none"
        sidecar = self.pairing.sidecar
        rollback = self.engine.rollback.name
        parts = [self.pairing.source.value + (f" {sidecar.path.name}" if sidecar else ""),
                 f"draft auto (max {self.cfg.n_draft})" if self.cfg.adaptive else f"draft {self.cfg.n_draft}"]
        parts += [f"rollback {rollback}"] if rollback != "kv" else []
        parts += ["drafts chained in one decode"] if self.chained else []
        parts += ["last draft verified from the device"] if self.device_tokens else []
        parts += ["first draft decoded behind the verify"] if self.device_feed else []
        parts += ["drafts fed from the one before on the device"] if self.self_feed else []
        parts += [f"draft vocabulary {self.cfg.draft_vocab} (this session's)"] if self.draft_vocab is not None else []
        return ", ".join(parts)

    # -- generation ----------------------------------------------------------------------------
    def _run(self, new_tokens: list[int], max_tokens: int, sampling: SamplerConfig | None,
             on_text: Callable[[str], None] | None, reuse: bool, stop: Sequence[str] = ()) -> Generation:
        e = self.engine
        unlimited = max_tokens < 0  # llama.cpp's -n -1: until the end of the text or a full context
        if unlimited:
            max_tokens = e.n_ctx
        stop = [x for x in stop if x]  # an empty stop text would end every answer at its first piece
        longest = max((len(x) for x in stop), default=0)
        sampler = Sampler(sampling or SamplerConfig())  # a bad configuration fails before the context changes
        before = e.stats.copy()
        if reuse:
            self._sync(new_tokens)
        else:
            e.reset()
            e.feed(new_tokens)
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        out: list[int] = []
        pieces: list[str] = []
        stopped = "length"
        tail_text = ""  # the end of the text, as long as the longest stop text
        try:
            for t in e.generate(sampler, max_tokens, self.model.is_eog):
                out.append(t)
                if self.model.is_eog(t):
                    stopped = "eog"
                    break
                s = dec.decode(self.model.piece(t))
                if s:
                    pieces.append(s)
                    if on_text:
                        on_text(s)
                    if longest:  # as llama-completion's -r: the text ends with a stop text
                        tail_text = (tail_text + s)[-longest:]
                        if any(tail_text.endswith(x) for x in stop):
                            stopped = "stop"
                            break
        except ContextFull:
            if not unlimited:
                raise
            stopped = "context"
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
        if self._dirty:
            self.engine.reset()
            self._dirty = False
        self.engine.sync(tokens)

    @property
    def prompt_room(self) -> int:
        """The most tokens a prompt may have: the context less one verify step (the engine's own rule)."""
        return self.engine.n_ctx - self.engine.n_draft_max

    def _too_long(self, n: int, exact: bool) -> tokens.PromptTooLong:
        return tokens.PromptTooLong(n, self.prompt_room, self.engine.n_ctx, exact)

    def generate(self, prompt: str | list[int], *, max_tokens: int = 256, sampling: SamplerConfig | None = None,
                 on_text: Callable[[str], None] | None = None, stop: Sequence[str] = ()) -> Generation:
        """Complete ``prompt`` (text or tokens) from a fresh context. A prompt the context cannot hold raises
        :class:`~gguf_mtp.runtime.tokens.PromptTooLong` before it is all tokenized. ``max_tokens`` -1: until the
        end of the text or a full context (``stopped`` "context"); ``stop``: end once the text ends with one of
        these (it is kept, as llama-completion's ``-r`` does)."""
        if isinstance(prompt, str):
            toks = tokens.tokenize(self.model, prompt, limit=self.prompt_room, n_ctx=self.engine.n_ctx)
        else:
            toks = list(prompt)
            if len(toks) > self.prompt_room:
                raise self._too_long(len(toks), True)
        if not toks:
            raise GgufMtpError("empty prompt")
        return self._run(toks, max_tokens, sampling, on_text, reuse=False, stop=stop)

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int = 512, sampling: SamplerConfig | None = None,
             on_text: Callable[[str], None] | None = None, stop: Sequence[str] = ()) -> Generation:
        """Answer the last message of ``messages``; the shared prefix with the previous turn is not recomputed.
        ``max_tokens`` and ``stop`` as in :meth:`generate`."""
        if len(messages) > self.prompt_room:  # each message takes a token or more: refused before rendering
            raise self._too_long(len(messages), False)
        text = self.template.render(messages, add_generation_prompt=True)
        toks = tokens.tokenize(self.model, text, add_special=False, parse_special=True, limit=self.prompt_room,
                               n_ctx=self.engine.n_ctx)
        return self._run(toks, max_tokens, sampling, on_text, reuse=True, stop=stop)

    def close(self) -> None:
        for c in reversed(self._contexts):
            c.close()
        for m in reversed(self._models):
            m.close()
        self._contexts, self._models = [], []

    def __enter__(self) -> MTPSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _diff(now: Stats, before: Stats) -> Stats:
    return now.since(before)


__all__ = ["MTPSession", "SessionConfig", "Generation", "SamplerConfig"]
