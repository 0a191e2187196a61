"""Runtime options, checked before llama.cpp sees them (``run`` today, any later front end the same way).

llama.cpp takes these as C integers and floats: a value out of range wraps silently (``-c 4294967360`` becomes
64) or aborts the process (``-t 100000``, a batch smaller than a verify step). Each bad value is refused with a
one-line :class:`GgufMtpError` naming the option as llama.cpp spells it, or clamped with a note where a
clamped value is what the user meant (more threads than CPUs, a top-k above the vocabulary). Meanings follow
llama.cpp: ``--seed -1`` is a random seed, ``--temp`` <= 0 is greedy, ``--top-k 0`` and ``--top-p 1`` turn those
filters off, ``-c 0`` is the model's own context length, ``-ngl -1`` offloads every layer.

Sampling options reach llama.cpp through :func:`check_sampling` whichever front end sets them (``run``, ``serve``,
``MTPSession.generate``/``chat``): llama.cpp's samplers take single-precision floats and 32-bit integers, and its
top-k inside the decode graph aborts the process when k is larger than the vocabulary. The repetition penalties
divide logits by ``--repeat-penalty``, so it must be above 0.
"""

from __future__ import annotations

import math
import os
import secrets
from dataclasses import replace

from ..errors import GgufMtpError
from .config import (
    F32_MAX,
    MAX_CTX,
    MAX_DRAFT,
    MAX_THREADS,
    MIN_TEMP,
    SEED_RANDOM,
    U32_MAX,
    SamplerConfig,
    SessionConfig,
    parse_rollback,
)


def _fail(option: str, value: object, why: str) -> GgufMtpError:
    return GgufMtpError(f"{option} {value}: {why}")


def _int(option: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(option, repr(value), "expected a whole number")
    return value


def _float(option: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(option, value, "expected a finite number")
    return float(value)


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, as llama.cpp's default thread count uses)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_threads(n: int | None, option: str = "--threads", *,
                  zero_means_all: bool = False) -> tuple[int | None, list[str]]:
    """A thread count: None (llama.cpp's default), or 1..CPUs; more than the CPUs here is clamped with a note, more
    than :data:`MAX_THREADS` (ggml aborts the process there) is refused.
    ``zero_means_all`` (the quantizer's ``-t 0``) accepts 0 as "every core"."""
    if n is None:
        return None, []
    n = _int(option, n)
    if n == 0 and zero_means_all:
        return 0, []
    if n < 1:
        raise _fail(option, n, "must be at least 1"
                    + (" (0: all cores)" if zero_means_all else " (omit it for llama.cpp's default)"))
    if n > MAX_THREADS:
        raise _fail(option, n, f"must be at most {MAX_THREADS} (ggml's thread limit)")
    cpus = cpu_count()
    if n > cpus:
        return cpus, [f"{option} {n} is more than the {cpus} CPUs this process may use; using {cpus}"]
    return n, []


def check_session(cfg: SessionConfig, *, speculative: bool = True) -> tuple[SessionConfig, list[str]]:
    """Refuse or clamp a session's options; returns the options to use and notes for the user.
    ``speculative``: a head may run (``--no-mtp`` passes False: the batch need not hold a verify step)."""
    notes: list[str] = []
    k = _int("--spec-draft-n-max", cfg.n_draft)
    if not 1 <= k <= MAX_DRAFT:
        raise _fail("--spec-draft-n-max", k, f"must be between 1 and {MAX_DRAFT}")
    p_min = _float("--spec-draft-p-min", cfg.p_min)
    if not 0 <= p_min <= 1:
        raise _fail("--spec-draft-p-min", p_min, "must be between 0 and 1")
    n_ctx = _int("--ctx-size", cfg.n_ctx)
    if not 0 <= n_ctx <= MAX_CTX:
        raise _fail("--ctx-size", n_ctx, f"must be between 0 (the model's own context length) and {MAX_CTX}")
    n_batch = _int("--batch-size", cfg.n_batch)
    least = k + 2 if speculative else 1
    if n_batch < least:
        # a verify step decodes the last token and every draft in one batch, and llama.cpp keeps the last
        # n_rs_seq + 1 = k + 1 tokens of a hybrid model's batch in one ubatch, which must be larger (it asserts)
        raise _fail("--batch-size", n_batch, f"must be at least --spec-draft-n-max + 2 = {least}: a verify step "
                    "decodes the last token and every draft in one batch, and llama.cpp needs one row more"
                    if speculative else "must be at least 1")
    threads, tnotes = check_threads(cfg.n_threads)
    notes += tnotes
    for option, ngl in (("--n-gpu-layers", cfg.n_gpu_layers), ("--n-gpu-layers-draft", cfg.draft_gpu_layers)):
        if ngl is not None and not -1 <= _int(option, ngl) <= MAX_CTX:
            raise _fail(option, ngl, "must be -1 (all layers) or a layer count")
    window = _int("--spec-draft-prompt-window", cfg.prompt_window)
    if window < 0:
        raise _fail("--spec-draft-prompt-window", window, "must be 0 (the whole prompt) or more")
    parse_rollback(cfg.rollback)
    from .. import draft_vocab

    draft_vocab.check_n(cfg.draft_vocab, cfg.draft_vocab_from)
    return replace(cfg, n_threads=threads), notes


def check_sampling(cfg: SamplerConfig, n_vocab: int | None = None) -> tuple[SamplerConfig, list[str]]:
    """Refuse sampling options llama.cpp would misread or abort on, and clamp those it gives a meaning beyond their
    range (said in notes): ``--seed -1`` becomes a random seed; with ``n_vocab``, a top-k above the vocabulary keeps
    every token, as llama.cpp's host sampler does (its device sampler would abort); a temperature below
    :data:`MIN_TEMP` is greedy."""
    temp = _float("--temp", cfg.temp)
    notes: list[str] = []
    if temp > F32_MAX:
        raise _fail("--temp", temp, f"must be at most {F32_MAX:.6g} (llama.cpp samples in single precision)")
    if 0 < temp < MIN_TEMP:
        notes.append(f"--temp {temp:g} is below {MIN_TEMP:g}: greedy, as --temp 0 (a smaller temperature overflows "
                     "llama.cpp's single-precision sampler)")
        temp = 0.0
    top_p = _float("--top-p", cfg.top_p)
    if not 0 <= top_p <= 1:
        raise _fail("--top-p", top_p, "must be between 0 and 1 (1: off)")
    top_k = _int("--top-k", cfg.top_k)
    if top_k < 0:
        raise _fail("--top-k", top_k, "must be 0 (off) or more")
    if n_vocab is not None and top_k > n_vocab:
        if temp > 0:
            notes.append(f"--top-k {top_k} is more than the model's {n_vocab} tokens; using {n_vocab} (every token)")
        top_k = n_vocab
    seed = _int("--seed", cfg.seed)
    if seed == SEED_RANDOM:
        seed = secrets.randbelow(U32_MAX)
        if temp > 0:
            notes.append(f"--seed -1: random seed {seed}")
    elif not 0 <= seed <= U32_MAX:
        raise _fail("--seed", seed, f"must be between 0 and {U32_MAX}, or -1 for a random seed")
    min_p = _float("--min-p", cfg.min_p)
    if not 0 <= min_p <= 1:
        raise _fail("--min-p", min_p, "must be between 0 (off) and 1")
    typical = _float("--typical", cfg.typical_p)
    if not 0 <= typical <= 1:
        raise _fail("--typical", typical, "must be between 0 and 1 (1: off)")
    repeat = _float("--repeat-penalty", cfg.repeat_penalty)
    if not 0 < repeat <= F32_MAX:
        raise _fail("--repeat-penalty", repeat, "must be above 0 (1: off; above 1 makes repeats less likely)")
    present = _float("--presence-penalty", cfg.presence_penalty)
    freq = _float("--frequency-penalty", cfg.frequency_penalty)
    for option, v in (("--presence-penalty", present), ("--frequency-penalty", freq)):
        if abs(v) > F32_MAX:
            raise _fail(option, v, f"must be between -{F32_MAX:.6g} and {F32_MAX:.6g} (0: off)")
    last_n = _int("--repeat-last-n", cfg.repeat_last_n)
    if not -1 <= last_n <= MAX_CTX:
        raise _fail("--repeat-last-n", last_n, "must be -1 (the whole context), 0 (penalties off) or a token count")
    if not isinstance(cfg.ignore_eos, bool):
        raise _fail("--ignore-eos", repr(cfg.ignore_eos), "expected true or false")
    return replace(cfg, temp=temp, top_p=top_p, top_k=top_k, seed=seed, min_p=min_p, typical_p=typical,
                   repeat_penalty=repeat, presence_penalty=present, frequency_penalty=freq,
                   repeat_last_n=last_n), notes


__all__ = ["check_session", "check_sampling", "check_threads", "cpu_count", "MAX_DRAFT", "MAX_CTX", "MAX_THREADS"]
