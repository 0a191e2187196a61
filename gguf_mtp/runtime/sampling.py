"""Sampling with llama.cpp's own sampler chains, run inside the decode graph where the back-end can.

The target's chain decides every emitted token, in plain and in speculative decoding alike, so both emit the
same tokens: greedy, or seeded top-k / top-p / temperature (llama.cpp's order, as ``llama-cli --temp``).
A seeded chain draws one uniform number per emitted token, in order: when a verify batch samples k+1 rows on
the device, llama.cpp's ``dist`` sampler draws them from a copy of its generator and advances the real one
only for the rows that are accepted (``llama_sampler_accept``), so the n-th emitted token always uses the
n-th draw, as plain decoding does. Where the back-end cannot run a chain (or logits are asked for), the same
chain runs on the host from the logits: same draws, same rule.

Every configuration passes :func:`~gguf_mtp.runtime.options.check_sampling` against the model's vocabulary right
before its chain is made (:meth:`ContextSampler.use`), whoever built it: llama.cpp's top-k inside the decode graph
aborts the process for a k above the vocabulary. The MTP head's drafts are greedy (no top-k, no temperature).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# isort: split
# Not sorted on purpose: .llama comes before llama_cpp, as it turns a missing or broken llama-cpp-python
# into one clear error (llama_cpp itself would raise a bare ImportError or OSError first).
from .llama import Context
from .options import check_sampling

# isort: split
import llama_cpp as _ll


@dataclass
class SamplerConfig:
    temp: float = 0.0  # <= 0: greedy
    top_k: int = 40
    top_p: float = 0.95
    seed: int = 0  # -1: a random seed (llama.cpp's default)


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
        return self.cfg.temp <= 0


def _chain(cfg: SamplerConfig | None) -> int:
    """A llama.cpp sampler chain: greedy (``cfg`` None or temp <= 0), else top-k, top-p, temperature, dist."""
    chain = _ll.llama_sampler_chain_init(_ll.llama_sampler_chain_default_params())
    if cfg is None or cfg.temp <= 0:
        _ll.llama_sampler_chain_add(chain, _ll.llama_sampler_init_greedy())
        return chain
    if cfg.top_k > 0:
        _ll.llama_sampler_chain_add(chain, _ll.llama_sampler_init_top_k(cfg.top_k))
    if 0 < cfg.top_p < 1:
        _ll.llama_sampler_chain_add(chain, _ll.llama_sampler_init_top_p(cfg.top_p, 1))
    _ll.llama_sampler_chain_add(chain, _ll.llama_sampler_init_temp(cfg.temp))
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

    def use(self, cfg: SamplerConfig | None, *, device: bool = True,
            on_logits: Callable[[np.ndarray], None] | None = None) -> None:
        """Sample with ``cfg`` (None: greedy) from the next decode on; a seeded chain starts from its seed again."""
        device = device and on_logits is None
        if cfg is not None:  # the one gate to llama.cpp: the vocabulary bounds top-k (Sampler checked the rest)
            cfg = check_sampling(cfg, self.ctx.model.n_vocab)[0]
        key = (cfg if cfg is not None and cfg.temp > 0 else None, device)
        self.on_logits = on_logits
        if key == self.key and self.chain is not None:
            _ll.llama_sampler_reset(self.chain)
            return
        self.close()
        self.chain = _chain(key[0])
        self.key = key
        # attaching makes llama.cpp rebuild its graphs once; False: the chain runs on the host from the logits
        self.on_device = device and self.ctx.set_sampler(self.chain, self.seq)

    def sample(self, i: int) -> int:
        """Pick batch entry ``i``'s token and accept it (accept rows in order; stop at the first rejected one)."""
        assert self.chain is not None
        if self.on_logits is not None:
            self.on_logits(self.ctx.logits_view(i))
        return int(_ll.llama_sampler_sample(self.chain, self.ctx.ptr, i))

    def close(self) -> None:
        if self.chain is not None:
            if self.on_device and self.ctx.ptr:
                self.ctx.set_sampler(None, self.seq)
            _ll.llama_sampler_free(self.chain)
        self.chain, self.key, self.on_device = None, None, False


def top1_prob(logits: np.ndarray) -> float:
    """Softmax probability of the argmax (for ``--spec-draft-p-min``)."""
    m = float(logits.max())
    return 1.0 / float(np.exp(logits.astype(np.float64) - m).sum())


__all__ = ["SamplerConfig", "Sampler", "ContextSampler", "top1_prob"]
