"""Benchmark `gguf-mtp serve` (MTP on and off) against llama-server (`--spec-type draft-mtp` and plain) on the same
GGUF: 1, 4 and 8 concurrent streaming clients for a fixed time each. Reports time to first token, inter-token
latency and total tokens/s, and the ratios; writes JSON and, with matplotlib, a plot.

    python -m bench.serve --model M.gguf [--llama-server build/bin/llama-server] [--ngl 99]
    python -m bench.serve --make 1.0 ...        # the synthetic Qwen3.5-shaped model of bench/run.py

The client is the standard library only (http.client, threads), so it runs where only the server's packages are.
Each client sends greedy streaming /v1/completions requests (-n tokens, a different prompt each time) back to
back until the period ends; a request counts when it has finished. TTFT: request sent -> first text chunk.
Inter-token latency: (last chunk - first chunk) / (tokens - 1) per request (with MTP, tokens come in bursts).
Total t/s: tokens of the finished requests / the period's wall time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import machine, save, table

PROMPTS = [
    "def fibonacci(n):\n", "import os\n\n\ndef list_files(path):\n", "class Stack:\n    def __init__(self):\n",
    "# parse the command line\nimport argparse\n", "def read_json(path):\n    with open(path) as f:\n",
    "import re\n\nPATTERN = re.compile(", "def merge_sort(xs):\n    if len(xs) <= 1:\n", "class Config:\n    \"\"\"",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name: str, cmd: list[str], port: int, log: Path) -> None:
        self.name, self.port = name, port
        self.logf = open(log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{name} exited at start (see {log})")
            try:
                st, _ = request(port, "GET", "/health")
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"{name} did not become healthy (see {log})")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.logf.close()


def request(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request(method, path, json.dumps(body) if body else None, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    return r.status, data


def one_stream(port: int, prompt: str, n: int) -> dict | None:
    """One streaming completion; None when the server answered with an error."""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0,
                                                     "stream": True, "ignore_eos": True}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        r.read()
        return None
    first = last = None
    chunks = tokens = 0
    while line := r.readline():
        if line.startswith(b"data: [DONE]"):
            break  # llama-server keeps the connection open: reading on to EOF would wait for its keep-alive timeout
        if not line.startswith(b"data: "):
            continue
        ev = json.loads(line[6:])
        if "error" in ev:
            return None
        ch = ev.get("choices") or [{}]
        if "text" in ch[0] and ch[0].get("finish_reason") is None:  # a token event (its text may be held back)
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
        t = ev.get("timings") or {}
        u = ev.get("usage") or {}
        tokens = t.get("predicted_n") or u.get("completion_tokens") or tokens
    c.close()
    tokens = tokens or chunks
    if first is None or last is None:
        return None
    return {"ttft": first - t0, "itl": (last - first) / (tokens - 1) if tokens > 1 else 0.0, "tokens": tokens,
            "end": time.perf_counter()}


def drive(port: int, clients: int, seconds: float, n: int) -> dict:
    results: list[dict] = []
    lock = threading.Lock()
    t_start = time.perf_counter()
    stop_at = t_start + seconds

    def client(i: int) -> None:
        k = i
        while time.perf_counter() < stop_at:
            r = one_stream(port, PROMPTS[k % len(PROMPTS)], n)
            k += clients
            if r is not None:
                with lock:
                    results.append(r)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    toks = sum(r["tokens"] for r in results)
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else (xs[0] if xs else 0.0)  # noqa: E731
    ttft = [r["ttft"] for r in results]
    itl = [r["itl"] for r in results if r["tokens"] > 1]
    return {"clients": clients, "requests": len(results), "tokens": toks, "wall_s": round(wall, 2),
            "total_tps": round(toks / wall, 2) if wall else 0.0,
            "ttft_ms_p50": round(q(ttft, 50) * 1e3, 1), "ttft_ms_p90": round(q(ttft, 90) * 1e3, 1),
            "itl_ms_p50": round(q(itl, 50) * 1e3, 2), "itl_ms_p90": round(q(itl, 90) * 1e3, 2)}


def acceptance(port: int) -> float | None:
    st, text = request(port, "GET", "/metrics")
    if st != 200:
        return None
    vals = {}
    for line in text.splitlines():
        m = re.match(r"^(\S+) ([0-9.eE+-]+)$", line)
        if m:
            vals[m.group(1).split(":")[-1].removeprefix("gguf_mtp_")] = float(m.group(2))
    d, a = vals.get("spec_decode_num_draft_tokens_total"), vals.get("spec_decode_num_accepted_tokens_total")
    return round(a / d, 4) if d and a is not None else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--make", type=float, help="generate bench/run.py's synthetic model of this size (GB)")
    ap.add_argument("--head-noise", type=float, default=0.15)
    ap.add_argument("--workdir", type=Path, default=Path("out/bench-serve"))
    ap.add_argument("--llama-server", type=Path, help="llama-server binary built from the vendored llama.cpp")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--seconds", type=float, default=30.0, help="driving time per client count")
    ap.add_argument("-n", type=int, default=128, help="tokens per request")
    ap.add_argument("--draft", default="3",
                    help="--spec-draft-n-max: N, or auto for gguf-mtp (llama-server then gets 4, auto's k_max)")
    ap.add_argument("-c", "--ctx-size", type=int, default=0, help="total context (default: 1024 per slot)")
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", default="",
                    help="comma list of configs to run (gguf-mtp,gguf-mtp-no-mtp,llama-server-mtp,llama-server)")
    ap.add_argument("--out", type=Path, default=Path("out/bench-serve/serve.json"))
    ap.add_argument("--plot", type=Path, default=None, help="PNG (default: next to --out)")
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    if a.make:
        from bench.run import make_model  # bench/run.py's synthetic model

        model = make_model(a.workdir, a.make, a.head_noise, a.threads)[0]
    elif a.model:
        model = a.model
    else:
        ap.error("--model or --make")
    counts = [int(x) for x in a.clients.split(",")]
    np_ = max(counts)
    ctx = a.ctx_size or 1024 * np_
    common = ["-c", str(ctx), "-np", str(np_), "-ngl", str(a.ngl), "-t", str(a.threads)]
    configs = {
        "gguf-mtp": [sys.executable, "-m", "gguf_mtp_cli.main", "serve", str(model), *common,
                     "--spec-draft-n-max", str(a.draft)],
        "gguf-mtp-no-mtp": [sys.executable, "-m", "gguf_mtp_cli.main", "serve", str(model), *common, "--no-mtp"],
    }
    if a.llama_server:
        ls = [str(a.llama_server), "-m", str(model), *common, "--no-webui", "--metrics"]
        configs["llama-server-mtp"] = ls + ["--spec-type", "draft-mtp", "--spec-draft-n-max",
                                            "4" if a.draft == "auto" else str(a.draft)]
        configs["llama-server"] = ls
    if a.only:
        configs = {k: v for k, v in configs.items() if k in a.only.split(",")}
    rows = []
    for name, cmd in configs.items():
        port = free_port()
        cmd = cmd + ["--port", str(port)]
        print(f"# {name}: {' '.join(cmd)}", file=sys.stderr)
        srv = Server(name, cmd, port, a.workdir / f"{name}.log")
        try:
            one_stream(port, PROMPTS[0], 16)  # warm-up
            for c in counts:
                r = drive(port, c, a.seconds, a.n)
                r["server"] = name
                r["acceptance"] = acceptance(port)
                rows.append(r)
                print(table([r], COLS), file=sys.stderr)
        finally:
            srv.stop()
    for r in rows:  # ratios against the plain servers at the same client count
        for base in ("gguf-mtp-no-mtp", "llama-server"):
            b = next((x for x in rows if x["server"] == base and x["clients"] == r["clients"]), None)
            if b and b["total_tps"]:
                r[f"x_{base}"] = round(r["total_tps"] / b["total_tps"], 3)
    cols = COLS + [c for c in ("x_gguf-mtp-no-mtp", "x_llama-server") if any(c in r for r in rows)]
    print(table(rows, cols))
    payload = {"machine": machine(), "model": str(model), "n": a.n, "seconds": a.seconds, "draft": a.draft,
               "ngl": a.ngl, "threads": a.threads, "ctx": ctx, "slots": np_, "rows": rows}
    save(a.out, payload)
    _plot(rows, a.plot or a.out.with_suffix(".png"))


COLS = ["server", "clients", "requests", "tokens", "total_tps", "ttft_ms_p50", "ttft_ms_p90", "itl_ms_p50",
        "itl_ms_p90", "acceptance"]


def _plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for name in dict.fromkeys(r["server"] for r in rows):
        rs = [r for r in rows if r["server"] == name]
        xs = [r["clients"] for r in rs]
        for ax, key, label in zip(axes, ("total_tps", "ttft_ms_p50", "itl_ms_p50"),
                                  ("total tokens/s", "TTFT p50 (ms)", "inter-token latency p50 (ms)")):
            ax.plot(xs, [r[key] for r in rs], marker="o", label=name)
            ax.set_xlabel("concurrent clients")
            ax.set_title(label)
            ax.set_xticks(xs)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
