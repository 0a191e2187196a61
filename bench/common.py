"""Shared helpers for benchmarks: run a command in a fresh process and measure wall time and peak RSS."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of ``cmd`` run as a child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(cmd)}\n{err}")
    return dt, ru.ru_maxrss * 1024


def best_of(cmd: list[str], outputs: list[Path], repeats: int = 3) -> tuple[float, float, int]:
    """Best wall time, best time until the output is on disk (the run plus a ``sync``), and the largest
    peak RSS over ``repeats`` runs. Before each run the outputs are removed and dirty pages flushed, so
    no contender pays for freeing or writing back another's data."""
    best_t, best_durable, max_rss = float("inf"), float("inf"), 0
    for _ in range(repeats):
        for p in outputs:
            if p.is_dir():
                for f in p.iterdir():
                    f.unlink()
            elif p.exists():
                p.unlink()
        subprocess.run(["sync"], check=False)
        t, rss = run_measured(cmd)
        t0 = time.perf_counter()
        subprocess.run(["sync"], check=False)
        durable = t + time.perf_counter() - t0
        best_t, best_durable, max_rss = min(best_t, t), min(best_durable, durable), max(max_rss, rss)
    return best_t, best_durable, max_rss


ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny-qwen35-mtp"  # the shipped tiny model: the default where a script needs a head


def tiny_reference() -> dict:
    """The shipped tiny model's ``reference.json``: its ``prompts`` and ``new_tokens``."""
    return json.loads((TINY / "reference.json").read_text())


def tiny_gguf(folder: Path) -> Path:
    """The shipped tiny model converted (BF16) into ``folder``; made once there."""
    from gguf_mtp.convert import convert

    out = folder / "tiny-qwen35-mtp-BF16.gguf"
    if not out.exists():
        convert(TINY, outfile=out, progress=False)
    return out


def prompts_from(path: Path | None) -> list[str]:
    """The JSON list of prompts in ``path`` (``--prompts``), or the tiny model's reference prompts; a file that is
    not a list of non-empty strings stops with one line."""
    try:
        prompts = json.loads(path.read_text()) if path else tiny_reference()["prompts"]
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: --prompts {path}: {exc}; give a JSON list of strings") from None
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise SystemExit(f"error: --prompts {path}: give a JSON list of non-empty strings")
    return prompts


def cpu_model() -> str:
    """The host CPU's model name (Linux: /proc/cpuinfo), or what ``platform`` knows: rows that sample or prepare
    decodes on the host (llama.cpp's tools, every decode's set-up) move with it."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, object]:
    return {"cpus": os.cpu_count(), "cpu": cpu_model(), "machine": platform.machine(), "python": sys.version.split()[0],
            "platform": platform.platform()}


def table(rows: list[dict[str, object]], cols: list[str]) -> str:
    w = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    line = "  ".join(f"{c:<{w[c]}}" for c in cols)
    out = [line, "  ".join("-" * w[c] for c in cols)]
    out += ["  ".join(f"{str(r.get(c, '')):<{w[c]}}" for c in cols) for r in rows]
    return "\n".join(out)


def save(path: Path, payload: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))


def exit_after(main: Callable[[], object]) -> NoReturn:
    """Run a benchmark's ``main``, then leave at once with its status, stdout and stderr flushed.

    Why: bench processes crashed (SIGSEGV) on CUDA machines after writing their results. What is left of the
    interpreter's exit then is freeing llama.cpp objects in no set order and the back-ends' own exit handlers,
    which may log. Two causes seen on the CPU are fixed in the runtime (a model freed before its contexts; a log
    line after the interpreter freed the log callback: gguf_mtp/runtime/llama.py); skipping the teardown also
    covers what a script left open and anything CUDA-only.
    """
    try:
        main()
        code = 0
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - reported as the interpreter would, then the same quick exit
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
