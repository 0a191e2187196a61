"""The main job on the embedded default, no download: the shipped tiny Qwen3.5 model with a trained MTP head
(examples/tiny-qwen35-mtp, trained by examples/train_tiny_mtp) converted in every layout, inspected, and run
with speculative decoding through every pairing, next to the acceptance PyTorch measured at training time.

Run with `make demo` (or `.venv/bin/python examples/quickstart.py [OUTDIR]`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gguf_mtp.runtime import MTPSession  # first: llama.cpp before numpy (see gguf_mtp.runtime)
from gguf_mtp import convert, inspect_file  # noqa: E402

TINY = Path(__file__).resolve().parent / "tiny-qwen35-mtp"


def main(outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    ref = json.loads((TINY / "reference.json").read_text())
    files = {}
    print(f"checkpoint: {TINY} ({ref['training']['params'] / 1e6:.1f} M parameters, trained on Python sources)")
    for layout, name in (("bundled", "BF16"), ("trunk-only", "BF16-trunk"), ("mtp-only", "BF16-MTP"),
                         ("head-only", "BF16-MTP-head")):
        r = convert(TINY, outfile=outdir / f"tiny-qwen35-mtp-{name}.gguf", layout=layout, force=True, progress=False)
        files[layout] = r.path
        print(f"  {layout:<10} -> {r.path.name:<36} {r.bytes_out / 1024:8.0f} KiB  {r.n_tensors:3d} tensors")
    print("\n" + inspect_file(files["bundled"]).format() + "\n")

    prompts = ref["prompts"][:8]
    print(f"greedy, {len(prompts)} held-out prompts x {ref['new_tokens']} tokens; PyTorch's expected acceptance "
          f"of one draft token: {ref['acceptance_k1'] * 100:.1f}%\n")
    print(f"{'pairing':<26}{'k':>3}{'accept':>8}  {'by position':<18}{'tok/step':>9}{'t/s':>8}")
    pairings = [("bundled", files["bundled"], "auto"),
                ("trunk + self-contained", files["trunk-only"], files["mtp-only"]),
                ("trunk + head-only", files["trunk-only"], files["head-only"]),
                ("no MTP", files["trunk-only"], False)]
    for name, model, mtp in pairings:
        for k in ((1, 3) if mtp is not False else (0,)):
            with MTPSession(model, mtp=mtp, n_draft=max(k, 1), n_ctx=1024) as s:
                for p in prompts:
                    s.generate(p, max_tokens=ref["new_tokens"])
                st = s.stats
            per = "/".join(f"{x * 100:.0f}" for x in st.acceptance_at) or "-"
            acc = f"{st.acceptance * 100:.1f}%" if st.drafted else "-"
            print(f"{name:<26}{k or '-':>3}{acc:>8}  {per:<18}{st.mean_accepted_length:9.2f}{st.decode_tps:8.0f}")
    print("\n(on a 2-core CPU decoding is compute-bound, so speed is judged on a GPU: see bench/)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("out/demo"))
