"""Benchmark `gguf-mtp run`: decode tokens/s with and without MTP on the same model in the same run,
acceptance per draft position, prompt-processing tokens/s with and without MTP, the share of each decode
step spent outside llama.cpp, and peak memory of the three pairings. Prints tables, writes JSON.

    python -m bench.run --make 1.0 [--ngl 99]          # generate a ~1 GB Qwen3.5-shaped model with a head
    python -m bench.run --model M.gguf [--mtp S.gguf]  # any model

The generated model is a bigram trunk with an "oracle" head (see tests.synthetic) plus noise in the head
(--head-noise), so acceptance is high but not perfect (~70/60/55% by position); speed, not text quality, is
measured here.
Targets (issue 4): Python overhead < 5% of step time; prompt-processing cost of MTP no more than the MTP
block's share of the layers + 5 points. The prompt table also shows the MTP block's matrix work as a share of
the trunk's (what its cost should be if nothing but FLOPs counted), and the cost with
--spec-draft-prompt-window W (the head sees only the last W prompt tokens; --prompt-window, 0 to skip).
Decode is compute-bound on a 2-core CPU (MTP cannot speed it up there): judge acceptance on CPU and speed on
a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp's libraries before numpy: see README, CUDA pitfall)

# isort: split

# isort: split
from bench.common import exit_after, machine, save, table

PROMPT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
          "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n") * 40


def make_model(work: Path, size_gb: float, head_noise: float, threads: int) -> tuple[Path, Path, Path, Path]:
    from gguf_mtp.convert import convert
    from tests.synthetic import SyntheticSpec, write_checkpoint

    widths: dict[str, Any]
    if size_gb >= 4:  # Qwen3.5-9B widths (hidden 4096): ~232 MB of Q8_0 per layer
        widths = dict(hidden=4096, heads=16, kv_heads=4, head_dim=256, intermediate=12288, lin_k_heads=16,
                      lin_v_heads=32, lin_head_dim=128, vocab_size=65536)
        per_layer, emb = 232e6, 2 * 65536 * 4096 * 1.0625
    else:  # small widths for CPU runs
        widths = dict(hidden=2048, heads=16, kv_heads=4, head_dim=128, intermediate=8192, lin_k_heads=8,
                      lin_v_heads=16, lin_head_dim=128, vocab_size=32768)
        per_layer, emb = 70e6, 2 * 32768 * 2048 * 1.0625
    layers = max(4, round((size_gb * 1e9 - emb) / per_layer / 4) * 4)
    spec = SyntheticSpec("qwen35", layers=layers, **widths, oracle_head=True, trunk_scale=0.0,
                         head_noise=head_noise, n_shards=4)
    ck = work / f"bench-ckpt-{size_gb}-{head_noise}"
    if not (ck / "config.json").exists():
        write_checkpoint(ck, spec)
    out = {}
    for layout in ("bundled", "trunk-only", "mtp-only", "head-only"):
        p = work / f"bench-{size_gb}-{head_noise}-{layout}.gguf"
        if not p.exists():
            convert(ck, outfile=p, outtype="q8_0", layout=layout, progress=False, threads=threads)
        out[layout] = p
    return out["bundled"], out["trunk-only"], out["mtp-only"], out["head-only"]


def mtp_matrix_share(path: Path) -> float:
    """Percent: the MTP blocks' matrix elements over the trunk blocks' (2 FLOPs per element per token each)."""
    import re

    from gguf_mtp.ggufio.model import GGUFModel

    m = GGUFModel(path)
    n_trunk = int(m.arch_get("{arch}.block_count", 0) or 0) - int(m.arch_get("{arch}.nextn_predict_layers", 0) or 0)
    trunk = head = 0
    for name, t in m.tensors.items():
        blk = re.match(r"blk\.(\d+)\.", name)
        if blk and len(t.info.shape) >= 2 and "ssm_conv" not in name:  # conv kernels are not matmuls
            if int(blk.group(1)) < n_trunk:
                trunk += t.info.n_elements
            else:
                head += t.info.n_elements
    return 100 * head / max(1, trunk)


def peak_rss(model: Path | None, mtp: str | bool, ngl: int) -> dict:
    """Load a pairing in a fresh process, decode a few tokens, report its peak RSS (VmHWM: per process,
    unlike ru_maxrss, which a child inherits from its parent) and GPU memory if any."""
    code = (f"import json; from gguf_mtp.runtime import MTPSession\n"
            f"s = MTPSession({str(model)!r}, mtp={mtp!r}, n_ctx=2048, n_gpu_layers={ngl}, n_draft=3)\n"
            f"s.generate('hello world', max_tokens=8)\n"
            f"hwm = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
            f"print(json.dumps({{'rss_mb': hwm / 1024, "
            f"'source': s.pairing.source.value}}))")
    env = dict(os.environ)
    gpu_before = _gpu_used()
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         text=True)
    peak_gpu = 0
    while p.poll() is None:
        peak_gpu = max(peak_gpu, _gpu_used() - gpu_before)
        time.sleep(0.2)
    out, err = p.communicate()
    if p.returncode:
        raise SystemExit(f"memory probe failed: {err[-2000:]}")
    d = json.loads(out.strip().splitlines()[-1])
    d["gpu_mb"] = peak_gpu if ngl else None
    return d


def _gpu_used() -> int:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
        return int(r.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path)
    ap.add_argument("--mtp", default="auto")
    ap.add_argument("--make", type=float, help="generate a model of about this many GB (Q8_0)")
    ap.add_argument("--head-noise", type=float, default=0.15,
                    help="0: the head is always right; 0.15: ~70/60/55%% by position")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/gguf-mtp-bench"))
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("--drafts", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--prompt-window", type=int, default=256,
                    help="also time the prompt with --spec-draft-prompt-window W (0: skip)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "run.json")
    a = ap.parse_args()
    from gguf_mtp.runtime import MTPSession, devices

    dev_line = devices.startup_line(a.ngl)  # which backend: "devices: CUDA0: NVIDIA H100 ...", "Vulkan0: ..."

    a.workdir.mkdir(parents=True, exist_ok=True)
    side_full = side_head = trunk = None
    if a.make:
        model, trunk, side_full, side_head = make_model(a.workdir, a.make, a.head_noise,
                                                        a.threads or os.cpu_count() or 2)
    elif a.model:
        model = a.model
    else:
        ap.error("pass --model or --make")
    kmax = max(a.drafts)
    prompt_rows: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    with MTPSession(model, mtp=False, n_ctx=4096, n_gpu_layers=a.ngl, n_threads=a.threads) as plain:
        toks = plain.model.tokenize(PROMPT)[:2048]
        plain.generate(toks[:64], max_tokens=8)  # warm-up
        best = min((plain.generate(toks, max_tokens=1).stats for _ in range(a.repeats)), key=lambda s: s.prompt_seconds)
        prompt_rows.append({"mode": "plain", "prompt tokens": best.prompt_tokens,
                            "prompt t/s": round(best.prompt_tps, 1)})
        short = toks[:128]
        base = max((plain.generate(short, max_tokens=a.n_predict).stats for _ in range(a.repeats)),
                   key=lambda s: s.decode_tps)
        ref_tokens = plain.generate(short, max_tokens=a.n_predict).tokens
        rows.append({"mode": "plain", "t/s": round(base.decode_tps, 1), "x plain": 1.0, "tok/step": 1.0,
                     "accept by position %": "", "overhead %": round(100 * base.python_overhead, 1)})
    with MTPSession(model, mtp=a.mtp, n_ctx=4096, n_gpu_layers=a.ngl, n_threads=a.threads, n_draft=kmax) as s:
        if not s.mtp_enabled:
            raise SystemExit(f"no MTP head: {s.notices}")
        s.generate(toks[:64], max_tokens=8)
        pb = min((s.generate(toks, max_tokens=1).stats for _ in range(a.repeats)), key=lambda x: x.prompt_seconds)
        prompt_rows.append({"mode": "MTP", "prompt tokens": pb.prompt_tokens, "prompt t/s": round(pb.prompt_tps, 1)})
        if a.prompt_window:
            s.engine.prompt_window = a.prompt_window
            pw = min((s.generate(toks, max_tokens=1).stats for _ in range(a.repeats)), key=lambda x: x.prompt_seconds)
            prompt_rows.append({"mode": f"MTP, window {a.prompt_window}", "prompt tokens": pw.prompt_tokens,
                                "prompt t/s": round(pw.prompt_tps, 1)})
            s.engine.prompt_window = 0
        lossless = True
        for k in a.drafts + ["auto"]:
            s.set_draft(kmax if k == "auto" else k, adaptive=k == "auto")
            runs = []
            for _ in range(a.repeats):
                g = s.generate(short, max_tokens=a.n_predict)
                lossless &= g.tokens == ref_tokens
                runs.append(g.stats)
            st = max(runs, key=lambda x: x.decode_tps)
            rows.append({"mode": f"MTP k={k}", "t/s": round(st.decode_tps, 1),
                         "x plain": round(st.decode_tps / base.decode_tps, 2),
                         "tok/step": round(st.mean_accepted_length, 2),
                         "accept by position %": "/".join(f"{x * 100:.0f}" for x in st.acceptance_at),
                         "overhead %": round(100 * st.python_overhead, 1),
                         **({"chosen k": dict(sorted(st.draft_lengths.items()))} if k == "auto" else {})})
        n_layers = s.model.n_nextn, int(s.pairing.model.arch_get("{arch}.block_count", 0) or 0)
    share = 100 * n_layers[0] / max(1, n_layers[1])
    flops = mtp_matrix_share(model) if s.pairing.source.value == "bundled" else None
    for r in prompt_rows:  # cost = the share of the MTP run's prompt time that plain decoding does not spend
        r["cost %"] = round(100 * (1 - r["prompt t/s"] / prompt_rows[0]["prompt t/s"]), 1)
        r["target %"] = round(share + 5, 1)
    pp_cost = prompt_rows[1]["cost %"]
    mem_rows = []
    if not a.no_memory and a.make:
        for name, m, mtp in (("bundled", model, "auto"), ("trunk + head-only sidecar", trunk, str(side_head)),
                             ("trunk + self-contained sidecar", trunk, str(side_full)),
                             ("trunk, no MTP", trunk, False)):
            d = peak_rss(m, mtp, a.ngl)
            mem_rows.append({"pairing": name, "peak RSS MB": round(d["rss_mb"]), "GPU MB": d["gpu_mb"] or ""})
    dev = f"GPU (-ngl {a.ngl})" if a.ngl else f"CPU ({a.threads or os.cpu_count()} threads)"
    print(f"model: {model} ({model.stat().st_size / 1e9:.2f} GB), {dev}, {a.n_predict} tokens, best of {a.repeats}")
    print(dev_line)
    print(table(rows, ["mode", "t/s", "x plain", "tok/step", "accept by position %", "overhead %", "chosen k"]))
    print(f"\noutput identical to plain decoding in every MTP run: {lossless}")
    print(table(prompt_rows, ["mode", "prompt tokens", "prompt t/s", "cost %", "target %"]))
    print(f"prompt-processing cost of MTP: {pp_cost:.1f}% (MTP block = {share:.1f}% of the layers; "
          f"target <= {share + 5:.1f}%)"
          + (f"; its matrices are {flops:.1f}% of the trunk's" if flops is not None else ""))
    if mem_rows:
        print(table(mem_rows, ["pairing", "peak RSS MB", "GPU MB"]))
    save(a.out, {"machine": machine(), "device": dev, "devices": dev_line, "model": str(model), "decode": rows,
                 "prompt": prompt_rows,
                 "prompt_cost_pct": pp_cost, "mtp_layer_share_pct": share, "mtp_matrix_share_pct": flops,
                 "lossless": lossless, "memory": mem_rows})


if __name__ == "__main__":
    exit_after(main)
