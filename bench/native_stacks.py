"""Sum py-spy's native stacks (``py-spy record --native --format raw``: one ``frame;frame;... count`` line a stack)
of the main thread's decode steps under chosen frames, level by level below each: which llama.cpp and ggml calls the
host's time inside a step goes to. py-spy pauses the process to read it, which inflates host work against the waits
for the GPU: the shares rank the parts; ``bench.host_time`` gives their milliseconds.

    py-spy record --native -r 1000 --format raw -o stacks.txt -- python -m bench.host_time MODEL.gguf -k 2 -n 512
    python -m bench.native_stacks stacks.txt [FRAME ...] [--within FRAME]

``--within FRAME`` keeps the stacks through another frame than a decode step's: ``--within _run _run`` shows what a
`gguf-mtp run` answer spends outside its steps (the prompt's decode, the text's decoding and printing).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

#: frames to look under by default, and how many levels below each
ANCHORS = {"batch_step": 4, "llama_context::decode": 4, "llama_context::process_ubatch": 4,
           "ggml_backend_sched_graph_compute_async": 6, "llama_batch_compat::init": 4,
           "llama_context::synchronize": 4, "llama_sampler_sample": 4}
STEP = "batch_step"  # the frame of a decode step: stacks without it are other threads, load or the prompt


def read_stacks(path: Path) -> list[tuple[list[str], int]]:
    """(frames, samples) of each stack line; a frame's ``(file:line)`` or ``(library)`` suffix dropped."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            out.append(([f.split(" (")[0] for f in stack.split(";")], int(n)))
    return out


def below(stacks: list[tuple[list[str], int]], anchor: str, depth: int) -> collections.Counter[str]:
    """Samples by the ``depth`` frames under ``anchor`` (fewer where the stack ends: marked ``(self)``)."""
    c: collections.Counter[str] = collections.Counter()
    for frames, n in stacks:
        if anchor in frames:
            sub = frames[frames.index(anchor) + 1:]
            c[" > ".join(sub[:depth]) + ("" if len(sub) >= depth else " (self)")] += n
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stacks", type=Path)
    ap.add_argument("frames", nargs="*", help="frames to look under (default: the decode's main parts)")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--within", default=STEP, help=f"keep only the stacks through this frame (default {STEP})")
    # intermixed: `STACKS --within F FRAME...` as well as `STACKS FRAME... --within F`
    a = ap.parse_intermixed_args()
    stacks = [(f, n) for f, n in read_stacks(a.stacks) if a.within in f]
    total = sum(n for _, n in stacks)
    print(f"{total} samples under {a.within}")
    for anchor in a.frames or ANCHORS:
        levels = ANCHORS.get(anchor, 4)
        inside = sum(n for f, n in stacks if anchor in f)
        if not inside:
            continue
        print(f"\n== {anchor}: {inside} samples ({100 * inside / total:.1f}% of those under {a.within})")
        for depth in range(1, levels + 1):
            print(f"  {depth} below:")
            for key, n in below(stacks, anchor, depth).most_common(a.top):
                print(f"    {100 * n / inside:5.1f}%  {key[-170:]}")


if __name__ == "__main__":
    main()
