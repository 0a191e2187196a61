"""The Python of a speculative step: a step's wall time less the time inside llama.cpp's C functions (every function
of llama-cpp-python's two binding modules and of the runtime's own ctypes bindings, each timed by a thin wrapper),
per step, over several answers after a warm one; the median and the lowest answer. On a GPU all of it but what
overlaps the verify is time the device waits; on the CPU, where a decode computes inside ``llama_decode``, it is
what a step costs beyond llama.cpp. Compare two checkouts on one machine, alternating processes.

    python -m bench.step_python MODEL.gguf [-k 2] [-n 300] [--answers 10] [-ngl 0]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)
from bench.oneshot import PROMPT

#: the runtime's functools.cache'd binding getters (each returns ctypes functions, or a tuple of them)
BINDINGS = ("_device_token_fns", "_device_feed_fns", "_row_address_fns", "_mtp_chain_fn")


def timed(fn: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    def call(*a: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a)
        finally:
            spent[0] += time.perf_counter() - t
    return call


def instrument(spent: list[float]) -> None:
    """Time every C function the runtime can reach into ``spent[0]``."""
    import llama_cpp as ll
    import llama_cpp.llama_cpp_ext as ext

    from gguf_mtp.runtime import llama
    for mod in (ll, ext):
        for name in dir(mod):
            fn = getattr(mod, name)
            if name.startswith("llama_") and hasattr(fn, "argtypes"):  # a ctypes function, not a type or a struct
                setattr(mod, name, timed(fn, spent))
    for name in BINDINGS:
        getter = getattr(llama, name, None)
        if getter is None:
            continue
        try:
            got = getter()
        except AttributeError:  # a library without that patch's symbols: the runtime never calls it
            continue
        wrapped = tuple(timed(f, spent) for f in got) if isinstance(got, tuple) else (
            None if got is None else timed(got, spent))
        setattr(llama, name, lambda w=wrapped: w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("-k", type=int, default=2, help="draft length")
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--answers", type=int, default=10)
    ap.add_argument("-ngl", type=int, default=0)
    a = ap.parse_args()
    from gguf_mtp.runtime.session import MTPSession

    spent = [0.0]
    with MTPSession(a.model, n_draft=a.k, n_gpu_layers=a.ngl, n_ctx=4096) as s:
        s.generate(PROMPT, max_tokens=32)
        instrument(spent)
        per_step, walls = [], []
        for _ in range(a.answers):
            spent[0] = 0.0
            t = time.perf_counter()
            st = s.generate(PROMPT, max_tokens=a.n).stats
            wall = time.perf_counter() - t
            per_step.append(1e6 * (wall - spent[0]) / max(1, st.steps))
            walls.append(1e6 * wall / max(1, st.steps))
    print(f"k={a.k}: Python {statistics.median(per_step):.1f} us a step (median of {a.answers} answers; lowest "
          f"{min(per_step):.1f}) of {statistics.median(walls):.1f}, {st.steps} steps an answer")


if __name__ == "__main__":
    main()
