"""What a session and a sampler are asked to do, and the limits they are checked against: plain data, no
llama.cpp. The front ends build these before anything loads (``cli/run_cmd.py``, ``cli/serve_cmd.py``),
:mod:`.options` checks them, and the layers above (:mod:`.llama`, :mod:`.sampling`, the engine, the session)
read them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import GgufMtpError

#: longest draft a step may take (llama.cpp's --spec-draft-n-max is unbounded; longer drafts never pay off and
#: every draft token costs a row in each batch)
MAX_DRAFT = 16
#: llama.cpp's positions are int32
MAX_CTX = (1 << 31) - 1
#: ggml's thread pool limit (GGML_MAX_N_THREADS): more aborts the process
MAX_THREADS = 512
SEED_RANDOM = -1
U32_MAX = (1 << 32) - 1
#: the largest single-precision float: llama.cpp's samplers take floats, and a larger temperature becomes inf
F32_MAX = 3.4028234663852886e38
#: temperatures above 0 and below this are greedy: llama.cpp divides the logits by the temperature in single
#: precision, and below it the quotient overflows to inf and the probabilities become NaN (greedy is the limit of
#: sampling as the temperature goes to 0)
MIN_TEMP = 1e-30
#: draft length when none is given (``--spec-draft-n-max``). 2, not llama.cpp's 3: on release-shaped models with
#: heads right about 70-85% of the time at the first position, k=2 was the fastest fixed length on the 9B and
#: 35B-A3B shapes and within 2% of k=3 on the 27B (docs/benchmarks.md, "The default draft length")
DEFAULT_DRAFT = 2
#: longest draft ``--spec-draft-n-max auto`` tries (``auto:N`` sets another). 6, not 4: a head that is nearly always
#: right is fastest at k=6 on the 9B shape and a bound of 4 held auto well below it, while a ~70% head lost nothing to
#: a bound of 8; every length up to the bound is warmed up at load (docs/benchmarks.md, "auto's bound")
AUTO_DRAFT_MAX = 6


@dataclass
class SessionConfig:
    n_draft: int = DEFAULT_DRAFT
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
    # conversations held at once (server slots), each in its own llama.cpp sequence; n_ctx is split between them
    n_parallel: int = 1
    # how the target undoes rejected drafts: auto | native | replay[:store=..,every=..,merge=..] (rollback.py)
    rollback: str = "auto"
    # placement, in llama.cpp's terms (see runtime.placement): device names (None: llama.cpp's default, []: none)
    devices: list[str] | None = None
    draft_devices: list[str] | None = None  # the MTP head's device(s); None: where the target's layers put it
    split_mode: str = "layer"
    tensor_split: list[float] | None = None
    main_gpu: int = 0
    rpc: list[tuple[str, int]] | None = None  # RPC servers whose devices join the registry before loading
    # sampler chains inside the decode graph where the back-end can (only token ids come back); False: on the host
    device_sampling: bool = True
    # per-phase timing of each decode step into Stats.breakdown (None: the GGUF_MTP_TIMINGS environment variable)
    timings: bool | None = None
    # pad every MTP decode to one shape so llama.cpp (and CUDA) reuse its graph (None: when a dense head is offloaded)
    stable_shapes: bool | None = None
    # decode every shape the first answer uses once at load, as llama.cpp's tools do (None: when layers are
    # offloaded, where a shape's first use costs kernel loads and graph captures; on the CPU it costs more than
    # it saves)
    warmup: bool | None = None
    # llama.cpp's flash attention (-fa): True on, False off, None auto (llama.cpp decides)
    flash_attn: bool | None = None
    # a draft vocabulary for this session (--draft-vocab N, counted on --draft-vocab-from FILE): the file that holds
    # the head is served to llama.cpp with it, nothing is written; None: the file's own, if it names one
    draft_vocab: int | None = None
    draft_vocab_from: str | None = None


@dataclass
class SamplerConfig:
    temp: float = 0.0  # <= 0: greedy
    top_k: int = 40
    top_p: float = 0.95
    seed: int = 0  # -1: a random seed (llama.cpp's default)
    min_p: float = 0.0  # drop tokens less likely than min_p times the most likely one (0: off)
    typical_p: float = 1.0  # locally typical sampling (1: off)
    repeat_penalty: float = 1.0  # llama.cpp's penalties (1, 0, 0: off) over the last repeat_last_n tokens
    repeat_last_n: int = 64  # -1: the whole context; 0: penalties off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    ignore_eos: bool = False  # never pick an end-of-generation token (generate until the limit)

    @property
    def penalized(self) -> bool:
        """Whether the repetition penalties change anything (then the chain keeps a token history). llama.cpp
        reads them in single precision, and leaves its penalties out when they round to 1, 0, 0."""
        f32 = np.float32
        return self.repeat_last_n != 0 and (f32(self.repeat_penalty) != 1 or f32(self.presence_penalty) != 0
                                            or f32(self.frequency_penalty) != 0)

    @property
    def plain_greedy(self) -> bool:
        """Greedy with nothing before the pick: one shared chain, no history."""
        return self.temp <= 0 and not self.penalized and not self.ignore_eos


@dataclass(frozen=True)
class RollbackChoice:
    """``SessionConfig.rollback`` parsed (how rollback.py undoes rejected drafts)."""

    kind: str  # auto | native | replay
    store: str = "seq"
    every: int = 1
    merge: int = 0


def parse_rollback(spec: str) -> RollbackChoice:
    """``auto``, ``native``, ``replay`` or ``replay:store=seq|state|state-device,every=N,merge=N``."""
    kind, _, opts = spec.partition(":")
    if kind not in ("auto", "native", "replay") or (opts and kind != "replay"):
        raise GgufMtpError(f"rollback {spec!r}: use auto, native, or "
                           "replay[:store=seq|state|state-device,every=N,merge=N]")
    choice = RollbackChoice(kind)
    for item in filter(None, opts.split(",")):
        key, _, val = item.partition("=")
        if key == "store" and val in ("seq", "state", "state-device"):
            choice = replace(choice, store=val)
        elif key == "every" and val.isdigit():
            choice = replace(choice, every=int(val))
        elif key == "merge" and val.isdigit():
            choice = replace(choice, merge=int(val))
        else:
            raise GgufMtpError(f"rollback {spec!r}: unknown option {item!r} "
                               "(store=seq|state|state-device, every=N, merge=N)")
    return choice


__all__ = ["SessionConfig", "SamplerConfig", "RollbackChoice", "parse_rollback", "DEFAULT_DRAFT", "AUTO_DRAFT_MAX",
           "MAX_DRAFT", "MAX_CTX", "MAX_THREADS", "SEED_RANDOM", "U32_MAX", "F32_MAX", "MIN_TEMP"]
