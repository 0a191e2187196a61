"""Where a decode step's host time goes, without a profiler: the runtime's calls timed by wrappers in one process, a
session loaded as `gguf-mtp run` loads it (warm-up included), one answer, then the step's parts per step: the time
inside ``llama_decode`` before the wait (the host's preparation of a decode), per context and batch size; the
waits; sampling reads; hidden-row reads; ``seq_rm``; the proposer's commit. ``--perf`` waits after every decode;
this does not, so the step is timed as users run it. The prompt's decode is listed on its own rows (its wait is in
the ``sync`` rows).

    python -m bench.host_time MODEL.gguf [-k 2] [-n 256] [-ngl 99] [--variant ro0|hostsamp]

``-k 0``: plain decoding. ``--variant ro0``: greedy picks through ``llama_sampler_sample`` (as before
``ContextSampler.read_only``); ``hostsamp``: sampling on the host from the logits, as llama-completion samples.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import time
from contextlib import AbstractContextManager
from typing import Any

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)
from bench import runtime_calls
from bench.oneshot import PROMPT
from gguf_mtp.runtime import proposer, rollback, sampling


class _Timed:
    """One timed call: its seconds and count go to ``timers`` under ``label``."""

    __slots__ = ("label", "t0", "timers")

    def __init__(self, timers: Timers, label: str) -> None:
        self.timers, self.label, self.t0 = timers, label, 0.0

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timers.seconds[self.label] += time.perf_counter() - self.t0
        self.timers.calls[self.label] += 1


class Timers:
    """Seconds and calls by label, counted while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()

    def around(self, label: str) -> AbstractContextManager[Any]:
        """What a wrapped call runs inside (``bench.runtime_calls``): timed under ``label`` while on."""
        return _Timed(self, label) if self.on else _OFF


_OFF = contextlib.nullcontext()


def instrument(variant: str) -> Timers:
    t = Timers()
    runtime_calls.wrap_runtime_calls(t.around)
    runtime_calls.wrap(proposer.MtpProposer, "commit", lambda p, *a: "proposer.commit (incl.)", t.around)
    runtime_calls.wrap(proposer.MtpProposer, "propose", lambda p, *a: "proposer.propose (incl.)", t.around)
    runtime_calls.wrap(rollback.Rollback, "settle", lambda r, *a: "rollback.settle (incl.)", t.around)
    if variant == "ro0":
        use = sampling.ContextSampler.use

        def use_sampler_sample(smp: sampling.ContextSampler, *a: Any, **kw: Any) -> None:
            use(smp, *a, **kw)
            smp.read_only = False

        sampling.ContextSampler.use = use_sampler_sample  # type: ignore[method-assign,assignment]
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("-k", type=int, default=2, help="draft length; 0: plain decoding")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-ngl", type=int, default=99)
    ap.add_argument("--variant", choices=["", "ro0", "hostsamp"], default="")
    a = ap.parse_args()
    from gguf_mtp.runtime.session import MTPSession

    timers = instrument(a.variant)
    with MTPSession(a.model, mtp=a.k > 0, n_draft=max(a.k, 1), n_gpu_layers=a.ngl, n_ctx=4096,
                    device_sampling=a.variant != "hostsamp") as s:
        s.generate(PROMPT, max_tokens=32)
        timers.on = True
        st = s.generate(PROMPT, max_tokens=a.n).stats
        timers.on = False
    steps = max(1, st.steps)
    print(f"k={a.k} {a.variant}: {st.emitted} tokens in {st.steps} steps, {st.decode_tps:.2f} t/s, step "
          f"{1e3 * st.decode_seconds / steps:.3f} ms, llama {1e3 * st.llama_seconds / steps:.3f} ms/step")
    for key in sorted(timers.seconds, key=lambda x: -timers.seconds[x]):
        sec, n = timers.seconds[key], timers.calls[key]
        print(f"  {key:40s} {1e3 * sec / steps:8.3f} ms/step  {n / steps:5.2f}/step  {1e6 * sec / n:8.1f} us each")


if __name__ == "__main__":
    main()
