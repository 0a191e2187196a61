"""The main job on the embedded default, no download: make a small Qwen3.5-architecture checkpoint with an
MTP head, convert it in every layout, inspect the files, and run speculative decoding with the real llama.cpp
through every pairing (bundled, self-contained sidecar, head-only sidecar).

The embedded model is synthetic: a bigram trunk and an "oracle" head that computes the same function, so
every draft is accepted (a wrongly converted head would get none). Its text is noise.

Run with `make demo` (or `.venv/bin/python examples/quickstart.py [OUTDIR]`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gguf_mtp import convert, inspect_file
from gguf_mtp.runtime import MTPSession
from gguf_mtp.runtime.llama import Context, Model
from gguf_mtp.synthetic import SyntheticSpec, write_checkpoint


def main(outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    ck = outdir / "tiny-qwen35"
    if not (ck / "config.json").exists():
        write_checkpoint(ck, SyntheticSpec("qwen35", layers=8, hidden=256, intermediate=512, vocab_size=1024,
                                           oracle_head=True, trunk_scale=0.0))
    print(f"checkpoint: {ck}")

    files = {}
    for layout in ("bundled", "trunk-only", "mtp-only", "head-only"):
        name = {"bundled": "tiny-qwen35-Q8_0.gguf", "trunk-only": "tiny-qwen35-Q8_0-trunk.gguf",
                "mtp-only": "tiny-qwen35-Q8_0-MTP.gguf", "head-only": "tiny-qwen35-Q8_0-MTP-head.gguf"}[layout]
        r = convert(ck, outfile=outdir / name, outtype="q8_0", layout=layout, force=True, progress=False)
        files[layout] = r.path
        print(f"  {layout:<10} -> {r.path.name:<32} {r.bytes_out / 1024:8.0f} KiB  {r.n_tensors:3d} tensors")

    print("\n" + inspect_file(files["bundled"]).format() + "\n")

    prompt = "The head is small: one decoder block"
    with Model(files["bundled"], load_mtp=True) as m, Context(m) as ctx:
        toks = m.tokenize(prompt)
        out = ctx.greedy(toks, 16)
        print(f"llama.cpp loaded the bundled model: {m.n_vocab} tokens, {m.n_nextn} MTP layer")
        print(f"greedy continuation of {prompt!r} (synthetic weights: noise): {m.detokenize(out)!r}")
        with Context(m, mtp=True):
            print("MTP draft context created on the bundled model")
    with Model(files["mtp-only"], load_mtp=True) as m, Context(m, mtp=True):
        print("MTP draft context created on the self-contained sidecar")

    print("\nspeculative decoding (gguf-mtp run), 32 tokens, draft length 3:")
    pairings = [("bundled", files["bundled"], "auto"), ("self-contained", files["trunk-only"], files["mtp-only"]),
                ("head-only", files["trunk-only"], files["head-only"]), ("no MTP", files["trunk-only"], False)]
    for name, model, mtp in pairings:
        with MTPSession(model, mtp=mtp, n_draft=3, n_ctx=1024) as s:
            g = s.generate(prompt, max_tokens=32)
            print(f"  {name:<15} {g.stats.compact()}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("out/demo"))
