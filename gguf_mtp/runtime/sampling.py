"""Sampling with llama.cpp's own sampler chains, run inside the decode graph where the back-end can.

The target's chain decides every emitted token, in plain and in speculative decoding alike, so both emit the
same tokens: greedy, or seeded top-k / top-p / min-p / temperature, after the repetition penalties and
``--ignore-eos``'s bias where set (llama.cpp's order, as ``common/sampling.cpp`` builds it).
A seeded chain draws one uniform number per emitted token, in order: when a verify batch samples k+1 rows on
the device, llama.cpp's ``dist`` sampler draws them from a copy of its generator and advances the real one
only for the rows that are accepted (``llama_sampler_accept``), so the n-th emitted token always uses the
n-th draw, as plain decoding does. The penalties keep a token history: like ``llama-completion`` and
``llama-server``, the chain is given the prompt's tokens first (:meth:`ContextSampler.use`), then accepts exactly
the emitted tokens in order (each row's pick before the next row is sampled), so a verify row sees the history
plain decoding would. llama.cpp cannot run the penalties inside the decode graph, so a chain with them runs on
the host. Where the back-end cannot run a chain (or logits are asked for), the same
chain runs on the host from the logits: same draws, same rule.

Every configuration passes :func:`~gguf_mtp.runtime.options.check_sampling` against the model's vocabulary right
before its chain is made (:meth:`ContextSampler.use`), whoever built it: llama.cpp's top-k inside the decode graph
aborts the process for a k above the vocabulary. The MTP head's drafts are greedy (no top-k, no temperature).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# isort: split
# Not sorted on purpose: .llama comes before llama_cpp, as it turns a missing or broken llama-cpp-python
# into one clear error (llama_cpp itself would raise a bare ImportError or OSError first).
from .config import SamplerConfig
from .llama import Context
from .options import check_sampling

# isort: split
import llama_cpp as _ll


class Sampler:
    """What the target samples with: a config, whether it may run on the device, and an optional observer that
    sees every row's logits before the pick (which forces host sampling: the logits must come back)."""

    def __init__(self, cfg: SamplerConfig | None = None, *, device: bool = True,
                 on_logits: Callable[[np.ndarray], None] | None = None) -> None:
        # NaN temperatures, top_p out of range, seed -1 -> a random seed
        self.cfg, _ = check_sampling(cfg if cfg is not None else SamplerConfig())
        self.device = device
        self.on_logits = on_logits

    @property
    def greedy(self) -> bool:
        """Plain greedy (no penalties, no bias): the target's chain needs no configuration."""
        return self.cfg.plain_greedy


def _eog_tokens(ctx: Context) -> list[int]:
    """The model's end-of-generation tokens (for ``ignore_eos``), found once per model."""
    model = ctx.model
    found: list[int] | None = getattr(model, "_eog_tokens", None)
    if found is None:
        found = [t for t in range(model.n_vocab) if model.is_eog(t)]
        model._eog_tokens = found  # type: ignore[attr-defined]
    return found


def _chain(cfg: SamplerConfig | None, ctx: Context | None = None) -> int:
    """A llama.cpp sampler chain in llama.cpp's order: the EOG bias (``ignore_eos``), the penalties, then greedy
    (``cfg`` None or temp <= 0), else top-k, typical, top-p, min-p, temperature, dist. ``ctx`` (needed for the bias and
    the penalties) gives the vocabulary and the context length."""
    chain = _ll.llama_sampler_chain_init(_ll.llama_sampler_chain_default_params())
    add = lambda s: _ll.llama_sampler_chain_add(chain, s)  # noqa: E731
    if cfg is not None and ctx is not None:
        if cfg.ignore_eos:
            eog = _eog_tokens(ctx)
            if eog:
                bias = (_ll.llama_logit_bias * len(eog))(*(_ll.llama_logit_bias(t, float("-inf")) for t in eog))
                add(_ll.llama_sampler_init_logit_bias(ctx.model.n_vocab, len(eog), bias))
        if cfg.penalized:
            # a window longer than the context holds nothing more (llama.cpp would allocate all of it)
            last_n = ctx.n_ctx_seq if cfg.repeat_last_n < 0 else min(cfg.repeat_last_n, ctx.n_ctx_seq)
            add(_ll.llama_sampler_init_penalties(ctx.model.n_vocab, last_n, cfg.repeat_penalty, cfg.frequency_penalty,
                                                 cfg.presence_penalty))
    if cfg is None or cfg.temp <= 0:
        add(_ll.llama_sampler_init_greedy())
        return chain
    if cfg.top_k > 0:
        add(_ll.llama_sampler_init_top_k(cfg.top_k))
    if cfg.typical_p < 1:
        add(_ll.llama_sampler_init_typical(cfg.typical_p, 1))
    if 0 < cfg.top_p < 1:
        add(_ll.llama_sampler_init_top_p(cfg.top_p, 1))
    if cfg.min_p > 0:
        add(_ll.llama_sampler_init_min_p(cfg.min_p, 1))
    add(_ll.llama_sampler_init_temp(cfg.temp))
    _ll.llama_sampler_chain_add(chain, _ll.llama_sampler_init_dist(cfg.seed & 0xFFFFFFFF))
    return chain


class ContextSampler:
    """The sampler chain of one sequence of a context (made once per configuration, reset between generations),
    attached to the decode graph when the back-end can run it; ``sample(i)`` picks and accepts the token of
    batch entry i (a row of this sequence)."""

    def __init__(self, ctx: Context, seq: int = 0) -> None:
        self.ctx, self.seq = ctx, seq
        self.key: tuple | None = None
        self.chain: int | None = None
        self.on_device = False
        self.on_logits: Callable[[np.ndarray], None] | None = None
        #: the chain is greedy and runs in the graph: a row's token is read as it is (nothing to apply or accept)
        self.read_only = False

    def use(self, cfg: SamplerConfig | None, *, device: bool = True,
            on_logits: Callable[[np.ndarray], None] | None = None, history: Sequence[int] = ()) -> None:
        """Sample with ``cfg`` (None: greedy) from the next decode on; a seeded chain starts from its seed again.
        ``history``: the tokens already in the context (the prompt), which the penalties count as
        ``llama-completion`` and ``llama-server`` do."""
        device = device and on_logits is None
        if cfg is not None:  # the one gate to llama.cpp: the vocabulary bounds top-k (Sampler checked the rest)
            cfg = check_sampling(cfg, self.ctx.model.n_vocab)[0]
        if cfg is not None and cfg.plain_greedy:
            cfg = None
        # llama.cpp has no device version of the penalties nor of typical sampling: such a chain runs on the
        # host, all of it
        device = device and not (cfg is not None and (cfg.penalized or (cfg.temp > 0 and cfg.typical_p < 1)))
        key = (cfg, device)
        self.on_logits = on_logits
        if key == self.key and self.chain is not None:
            _ll.llama_sampler_reset(self.chain)
        else:
            self.close()
            self.chain = _chain(cfg, self.ctx)
            self.key = key
            # attaching makes llama.cpp rebuild its graphs once; False: the chain runs on the host from the logits
            self.on_device = device and self.ctx.set_sampler(self.chain, self.seq)
        self.read_only = self.on_device and cfg is None
        if cfg is not None and cfg.penalized and history:
            # only the last repeat_last_n tokens stay in the penalties' window: accepting just those is the same
            # (into the penalties alone: the rest of the chain must not count the prompt as emitted tokens)
            last_n = len(history) if cfg.repeat_last_n < 0 else cfg.repeat_last_n
            pen = _ll.llama_sampler_chain_get(self.chain, chain_names(self.chain).index("penalties"))
            for t in history[-last_n:]:
                _ll.llama_sampler_accept(pen, int(t))

    def sample(self, i: int) -> int:
        """Pick batch entry ``i``'s token and accept it (accept rows in order; stop at the first rejected one)."""
        assert self.chain is not None
        if self.read_only:
            # llama_sampler_sample would return the same token after four synchronisations, a debug log line (a
            # Python callback) and a greedy accept that changes nothing: a few of these run every step
            tok = _ll.llama_get_sampled_token_ith(self.ctx.ptr, i)
            if tok >= 0:
                return int(tok)
        if self.on_logits is not None:
            self.on_logits(self.ctx.logits_view(i))
        return int(_ll.llama_sampler_sample(self.chain, self.ctx.ptr, i))

    def close(self) -> None:
        if self.chain is not None:
            if self.on_device and self.ctx.ptr:
                self.ctx.set_sampler(None, self.seq)
            _ll.llama_sampler_free(self.chain)
        self.chain, self.key, self.on_device, self.read_only = None, None, False, False


def context_sampler(ctx: Context, seq: int = 0) -> ContextSampler:
    """The sampler chain of sequence ``seq`` of ``ctx``, made on first use and closed with the context."""
    smp = ctx.attached.get((ContextSampler, seq))
    if not isinstance(smp, ContextSampler):
        smp = ctx.attached[(ContextSampler, seq)] = ContextSampler(ctx, seq)
    return smp


def chain_names(chain: int) -> list[str]:
    """The names of a chain's samplers, in order (llama.cpp marks those it runs on the device with "+")."""
    return [(_ll.llama_sampler_name(_ll.llama_sampler_chain_get(chain, i)) or b"").decode().lstrip("+")
            for i in range(_ll.llama_sampler_chain_n(chain))]


def top1_prob(logits: np.ndarray) -> float:
    """Softmax probability of the argmax (for ``--spec-draft-p-min``)."""
    m = float(logits.max())
    return 1.0 / float(np.exp(logits.astype(np.float64) - m).sum())


__all__ = ["SamplerConfig", "Sampler", "ContextSampler", "context_sampler", "chain_names", "top1_prob"]
