"""A digest of every logit a greedy decode computes: one row at a time (``run --no-mtp``), then the same tokens as
verifies of N rows stepping back one row each time (``run`` at k = N - 1 accepting all but the last draft), so two
builds or two settings of one build can be compared bit for bit (a patch that must not change a single float, such
as 0014's shared q8_1 activations, ``GGML_CUDA_MMVQ_SHARE_Q8_1``).

  GGML_CUDA_MMVQ_SHARE_Q8_1=1 python3 -m bench.logits_digest MODEL -ngl 99 --out on.json
  GGML_CUDA_MMVQ_SHARE_Q8_1=0 python3 -m bench.logits_digest MODEL -ngl 99 --out off.json
  cmp on.json off.json

The JSON holds the greedy tokens and the sha256 of the plain rows' and of the verify rows' float32 bytes, and
nothing that depends on the setting compared, so equal files mean equal logits. ``verify_argmax_agree`` (the share
of verify rows whose argmax is the plain decode's token there) is a diagnostic: several rows take other kernels
than one, so their floats may differ from a plain decode's, never from another verify's."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy: tests/test_bench_imports.py)

# isort: split
from bench.common import exit_after
from bench.gpu_kernels import WARM_TEXT


def digest(model_path: str, *, ngl: int, n: int, rows: int, prompt: int = 48) -> dict[str, object]:
    """Greedy ``n`` tokens after ``prompt`` tokens of a fixed text, plain and as verifies of ``rows`` rows."""
    import numpy as np

    from gguf_mtp.runtime.llama import Batch, Context, Model
    from gguf_mtp.runtime.session import tokens_sha256

    model = Model(model_path, n_gpu_layers=ngl)
    toks = model.tokenize(WARM_TEXT * 4)[:prompt]
    n_ctx = 64 * ((prompt + n + rows + 63) // 64)
    n_batch = max(prompt, 8)
    plain_sha, verify_sha = hashlib.sha256(), hashlib.sha256()
    out: list[int] = []
    with Context(model, n_ctx=n_ctx, n_batch=n_batch) as ctx:
        b = Batch(n_batch)
        b.fill(toks, 0, last_logits=True)
        ctx.decode_batch(b)
        for i in range(n):
            row = ctx.logits_view(-1)
            plain_sha.update(row.tobytes())
            out.append(int(np.argmax(row)))
            if i + 1 < n:
                b.clear()
                b.add(out[-1], prompt + i, logits=True)
                ctx.decode_batch(b)
    agree = total = 0
    with Context(model, n_ctx=n_ctx, n_batch=n_batch, n_rs_seq=rows - 1, n_outputs_max=rows,
                 n_outputs_per_seq=rows) as ctx:
        b = Batch(n_batch)
        b.fill(toks[:-1], 0)
        ctx.decode_batch(b)
        seq = [toks[-1]] + out  # verify rows: the last prompt token, then the greedy tokens
        p = 0
        while p + rows <= len(out):  # each row's prediction is a plain greedy token
            b.clear()
            for j in range(rows):
                b.add(seq[p + j], prompt - 1 + p + j, logits=True)
            ctx.decode_batch(b)
            for j in range(rows):
                row = ctx.logits_view(j)
                verify_sha.update(row.tobytes())
                agree += int(np.argmax(row)) == out[p + j]
                total += 1
            p += rows - 1  # the last row rolls back, as after a step that accepted all but the last draft
            if not ctx.seq_rm(prompt - 1 + p):
                raise SystemExit("error: the context refused to roll back one row (no recurrent-state snapshots)")
    model.close()
    return {"model": Path(model_path).name, "n": n, "rows": rows, "tokens": out,
            "tokens_sha256": tokens_sha256(out),
            "plain_sha256": plain_sha.hexdigest(), "verify_sha256": verify_sha.hexdigest(),
            "verify_rows": total, "verify_argmax_agree": round(agree / max(total, 1), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0)
    ap.add_argument("-n", type=int, default=64, help="greedy tokens (default 64)")
    ap.add_argument("--rows", type=int, default=3, help="rows a verify (default 3: k=2)")
    ap.add_argument("--out", type=Path, help="the JSON to this file (default: stdout)")
    a = ap.parse_args()
    if not 1 <= a.n <= 4096 or not 2 <= a.rows <= 8:
        sys.exit("error: -n from 1 to 4096 and --rows from 2 to 8")
    text = json.dumps(digest(a.model, ngl=a.n_gpu_layers, n=a.n, rows=a.rows), indent=1) + "\n"
    if a.out:
        a.out.write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    exit_after(main)
