"""The runtime calls the step tools wrap, in one list with one labelling: ``bench/host_time.py`` times each,
``bench/gpu_timeline.py`` puts a profiler range around each. A label names the call and its context's role (the
target's or the MTP head's, told apart by the hidden rows an MTP decode is given): ``decode[mtp] n=3``,
``sync[tgt]``, ``seq_rm[mtp]``, ``sample``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

#: what a wrapper enters around each call: ``around(label)``
Around = Callable[[str], AbstractContextManager[Any]]


def wrap(cls: type, name: str, label: Callable[..., str], around: Around) -> None:
    """Run ``cls.name`` inside ``around(label(self, *args))``."""
    real = getattr(cls, name)

    def wrapped(obj: Any, *a: Any, **kw: Any) -> Any:
        with around(label(obj, *a)):
            return real(obj, *a, **kw)

    setattr(cls, name, wrapped)


def wrap_runtime_calls(around: Around) -> None:
    """The llama.cpp calls a step makes that launch GPU work or wait for it: decodes, synchronizations, hidden-row
    and sampler reads, cache edits, and the device-slot copies where the library has them."""
    from gguf_mtp.runtime import llama, sampling

    mtp: set[int] = set()  # the contexts given hidden rows (batch.embd): the MTP head's

    def role(ctx: llama.Context) -> str:
        return "mtp" if id(ctx) in mtp else "tgt"

    def decode_label(ctx: llama.Context, b: llama.Batch) -> str:
        if b.embd is not None:
            mtp.add(id(ctx))
        return f"decode[{role(ctx)}] n={b.n}"

    wrap(llama.Context, "decode_batch", decode_label, around)
    for name in ("synchronize", "h_rows", "seq_rm", "keep_sampled_token", "keep_nextn_rows"):
        if hasattr(llama.Context, name):
            short = "sync" if name == "synchronize" else name
            wrap(llama.Context, name, lambda ctx, *a, n=short: f"{n}[{role(ctx)}]", around)
    wrap(sampling.ContextSampler, "sample", lambda smp, i: "sample", around)
