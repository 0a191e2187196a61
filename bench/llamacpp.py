"""llama.cpp's own tools as baselines: find them, run them, read their numbers.

``llama-completion`` gives plain decode speed ("eval time": llama_decode calls only); ``llama-speculative-simple
--spec-type draft-mtp`` is llama.cpp's MTP driver (decode loop wall time, drafted/accepted, acceptance by draft
position from its statistics line, the generated text). Both are run greedy (``--temp 0``) unless told
otherwise, with the same prompt (``write_prompt``: byte for byte, see there) and token count as the gguf-mtp
runs they are compared with.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


def find_tool(name: str, bin_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """``bin_dir/name``, else ``$LLAMA_CPP_BIN/name``, else ``name`` on PATH."""
    for d in (bin_dir, os.environ.get("LLAMA_CPP_BIN")):
        if d and (Path(d) / name).is_file():
            return Path(d) / name
    found = shutil.which(name)
    return Path(found) if found else None


@dataclass
class ToolRun:
    tps: float  # decode tokens per second as the tool reports it
    n_decoded: int
    text: str = ""
    drafted: int = 0
    accepted: int = 0
    acceptance_at: list[float] = field(default_factory=list)  # share of steps with >= i+1 drafts accepted
    mean_len: float = 0.0  # tokens per target step
    graphs_reused: int | None = None
    log: str = ""
    # llama-completion: tokens per second over its eval time plus its sampling time (host sampling is outside
    # "eval time", while a gguf-mtp run's t/s is wall time over the whole decode loop, sampling included)
    tps_with_sampling: float = 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def write_prompt(path: Path, text: str) -> Path:
    """Write ``text`` so that ``-f path`` gives the tools exactly ``text``: their ``-f`` drops one trailing
    newline (so one is added back), and ``--no-escape`` (always passed) keeps backslashes as they are."""
    path.write_text(text + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
    return path


def _common(model: Path, prompt_file: Path, n: int, ngl: int, threads: int | None, ctx: int, temp: float,
            seed: int) -> list[str]:
    args = ["-m", str(model), "-f", str(prompt_file), "--no-escape", "-n", str(n), "-ngl", str(ngl),
            "-c", str(ctx), "--temp", str(temp), "--seed", str(seed)]
    if threads:
        args += ["-t", str(threads), "-tb", str(threads)]
    return args


def tool_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for one of llama.cpp's own tools: this process's, less the patch switches gguf-mtp's runtime
    turned on for itself here (``patches.switched_on_here``: a baseline runs as stock llama.cpp, even when this
    process ran a session first), plus ``extra`` (an A/B's variables, switches included)."""
    from gguf_mtp.runtime import patches  # no llama.cpp loaded by this import

    env = {k: v for k, v in os.environ.items() if k not in patches.switched_on_here()}
    env.update(extra or {})
    return env


def _run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    p = subprocess.run(cmd, capture_output=True, timeout=timeout, env=tool_env() if env is None else env,
                       stdin=subprocess.DEVNULL)
    # the generated text can end inside a UTF-8 sequence (a token is a byte piece)
    out = p.stdout.decode("utf-8", "replace") + "\n" + p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        tail = "\n".join(out.strip().splitlines()[-15:])
        raise RuntimeError(f"{Path(cmd[0]).name} failed (exit {p.returncode}):\n{tail}")
    return out


def _retry(fn):  # type: ignore[no-untyped-def]
    """Run a tool up to 3 times: its log is written by a thread, and on an overloaded machine a run can exit
    (status 0) before the log has caught up, so its summary lines are missing."""
    def run(*a, **kw):  # type: ignore[no-untyped-def]
        for attempt in range(3):
            try:
                return fn(*a, **kw)
            except RuntimeError:
                if attempt == 2:
                    raise
    return run


@_retry
def completion(tool: Path, model: Path, prompt_file: Path, n: int, *, ngl: int = 0, threads: int | None = None,
               ctx: int = 4096, temp: float = 0.0, seed: int = 0, timeout: float = 600,
               env: dict[str, str] | None = None) -> ToolRun:
    """Plain decoding with llama-completion; t/s from its ``eval time`` line."""
    out = _run([str(tool), *_common(model, prompt_file, n, ngl, threads, ctx, temp, seed), "-no-cnv",
                "--ignore-eos"], timeout, env)
    m = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs.*?([\d.]+) tokens per second", out)
    if not m:
        tail = "\n".join(out.strip().splitlines()[-8:])
        raise RuntimeError(f"{tool.name}: no 'eval time' line in its output:\n{tail}")
    reused = re.search(r"graphs reused =\s*(\d+)", out)
    smp = re.search(r"sampling time =\s*([\d.]+) ms", out)
    eval_ms, n_eval = float(m.group(1)), int(m.group(2))
    with_sampling = 1e3 * n_eval / (eval_ms + float(smp.group(1))) if smp and eval_ms > 0 else 0.0
    return ToolRun(tps=float(m.group(3)), n_decoded=n_eval, log=out,
                   graphs_reused=int(reused.group(1)) if reused else None, tps_with_sampling=with_sampling)


@_retry
def speculative(tool: Path, model: Path, prompt_file: Path, n: int, k: int, *, ngl: int = 0,
                threads: int | None = None, ctx: int = 4096, temp: float = 0.0, seed: int = 0,
                extra: list[str] | None = None, timeout: float = 600, env: dict[str, str] | None = None) -> ToolRun:
    """llama.cpp's MTP driver (llama-speculative-simple --spec-type draft-mtp) with draft length ``k``."""
    cmd = [str(tool), *_common(model, prompt_file, n, ngl, threads, ctx, temp, seed), "--spec-type", "draft-mtp",
           "--spec-draft-n-max", str(k), "-lv", "4", *(extra or [])]
    out = _run(cmd, timeout, env)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+(\S+) t/s", out)
    if not m:
        tail = "\n".join(out.strip().splitlines()[-8:])
        raise RuntimeError(f"{tool.name}: no 'decoded ... t/s' line in its output:\n{tail}")
    try:
        tps = float(m.group(3))  # "inf" when it stopped at once (an end-of-generation token)
    except ValueError:
        tps = 0.0
    run = ToolRun(tps=tps if tps < float("inf") else 0.0, n_decoded=int(m.group(1)), log=out)
    d = re.search(r"n_drafted\s*=\s*(\d+)", out)
    a = re.search(r"n_accept\s*=\s*(\d+)", out)
    if not d or not a:  # its log is written by a thread; under load the end of it can be missing
        raise RuntimeError(f"{tool.name}: its summary (n_drafted, n_accept) is incomplete")
    run.drafted, run.accepted = int(d.group(1)), int(a.group(1))
    s = re.search(r"#mean acc len = ([\d.]+), #acc rate/pos = \(([^)]*)\)", out)
    if s:
        run.mean_len = float(s.group(1))
        run.acceptance_at = [float(x) for x in s.group(2).split(",") if x.strip()]
    return run


