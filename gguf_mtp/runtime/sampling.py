"""The target's sampler: greedy, or seeded temperature / top-k / top-p. It decides every emitted token, so
speculative and plain decoding emit the same tokens: one random draw per emitted token, in order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .options import check_sampling


@dataclass
class SamplerConfig:
    temp: float = 0.0  # <= 0: greedy
    top_k: int = 40
    top_p: float = 0.95
    seed: int = 0  # -1: a random seed (llama.cpp's default)


class Sampler:
    def __init__(self, cfg: SamplerConfig = SamplerConfig()) -> None:
        self.cfg, _ = check_sampling(cfg)  # NaN temperatures, top_p out of range, seed -1 -> a random seed
        cfg = self.cfg
        self.rng = np.random.default_rng(cfg.seed)

    @property
    def greedy(self) -> bool:
        return self.cfg.temp <= 0

    def __call__(self, logits: np.ndarray) -> int:
        if self.greedy:
            return int(np.argmax(logits))
        c = self.cfg
        k = min(c.top_k if c.top_k > 0 else logits.size, logits.size)
        idx = np.argpartition(logits, -k)[-k:] if k < logits.size else np.arange(logits.size)
        vals = logits[idx].astype(np.float64) / c.temp
        order = np.argsort(-vals, kind="stable")
        idx, vals = idx[order], vals[order]
        p = np.exp(vals - vals[0])
        p /= p.sum()
        if 0 < c.top_p < 1:
            keep = int(np.searchsorted(np.cumsum(p), c.top_p) + 1)
            idx, p = idx[:keep], p[:keep] / p[:keep].sum()
        u = self.rng.random()
        return int(idx[min(int(np.searchsorted(np.cumsum(p), u, side="right")), len(idx) - 1)])


def top1_prob(logits: np.ndarray) -> float:
    """Softmax probability of the argmax (for ``--spec-draft-p-min``)."""
    m = float(logits.max())
    return 1.0 / float(np.exp(logits.astype(np.float64) - m).sum())
