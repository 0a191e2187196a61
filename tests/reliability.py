"""Helpers for the reliability tests: snapshots of folders (what changed), the CLI in-process and in a
subprocess, and the property every case asserts: only our error types escape, exit status 0/2/130/143
(129 for SIGHUP), no signal death, nothing outside the named output changes, inputs keep their bytes."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from gguf_mtp_cli.main import main

ROOT = Path(__file__).resolve().parents[1]
#: the CLI with write_all slowed down, so that a small fixture is still being written when a signal comes
SLOW_CLI = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job may inherit SIGINT ignored
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
import importlib
conv = importlib.import_module("gguf_mtp.convert")  # the module (gguf_mtp.convert is the function)
import gguf_mtp.ggufio.writer as w
real = w.write_all
delay = float(os.environ.get("SLOW_WRITE_S", "0.02"))
def slow(fh, data):
    time.sleep(delay)
    real(fh, data)
w.write_all = conv.write_all = slow
from gguf_mtp_cli.main import main
sys.exit(main(sys.argv[1:]))
"""

#: the CLI with every llama.cpp log line slowed down (``SLOW_LOG_S`` each, in the quantizer's child process too), so
#: that a signal lands while llama.cpp is inside one long C call (a quantization, a model load) on any CPU. The
#: delay sits inside the log callback's own work (its list of recent lines), where a real signal handler runs.
SLOW_LLAMA = """
import os, signal, sys, time
for s in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_DFL)
DELAY = float(os.environ.get("SLOW_LOG_S", "0.02"))
MARK = os.environ.get("SLOW_LOG_MARK")  # a file that gets each line: the test sees how far llama.cpp is
import gguf_mtp.runtime.llama as L

class SlowList(list):
    def append(self, x):
        if MARK:
            with open(MARK, "a") as fh:
                fh.write(x if x.endswith("\\n") else x + "\\n")
        time.sleep(DELAY)
        list.append(self, x)

L._log = SlowList()
"""
SLOW_LLAMA_CLI = SLOW_LLAMA + """
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job may inherit SIGINT ignored
try:  # the quantizer's child process gets the same slow log
    import gguf_mtp.runtime.quantizer as Q
    Q.CHILD = [sys.executable, "-c", SLOW_CHILD]
except ImportError:  # before the quantizer ran in a child process
    pass
from gguf_mtp_cli.main import main
sys.exit(main(sys.argv[1:]))
"""
SLOW_LLAMA_CLI = SLOW_LLAMA_CLI.replace("SLOW_CHILD", repr(SLOW_LLAMA + """
from gguf_mtp.runtime.quantizer import _child
_child(int(sys.argv[1]))
"""))


def tree(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` (symlinks not followed): kind and content hash / link target / device."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            rel = str(p.relative_to(folder))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode), st.st_rdev)
    return out


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def cli(capsys, argv: list[str]) -> tuple[int, str]:
    """Run the CLI in-process; assert the error contract; return (status, stderr)."""
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    check_contract(rc, err)
    return rc, err


def check_contract(rc: int, err: str) -> None:
    assert rc in (0, 2, 129, 130, 143), (rc, err)
    assert "Traceback" not in err, err
    if rc == 2:
        last = [ln for ln in err.splitlines() if ln.strip()][-1]
        assert last.startswith("error: ") and "internal error" not in last, err


def sub(argv: list[str], *, timeout: float = 120, slow: bool = False, env: dict[str, str] | None = None,
        preexec_fn=None, **kw) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    """Run the CLI in a subprocess (with a timeout: a blocked open fails the test instead of hanging it)."""
    cmd = [sys.executable, "-c", SLOW_CLI] if slow else [sys.executable, "-m", "gguf_mtp_cli.main"]
    e = dict(os.environ, **(env or {}))
    r = subprocess.run(cmd + [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=e,
                       preexec_fn=preexec_fn, cwd=kw.pop("cwd", ROOT), **kw)
    assert r.returncode >= 0, f"died by signal {-r.returncode}: {r.stderr}"
    check_contract(r.returncode, r.stderr)
    return r


def spawn(argv: list[str], *, slow: bool = True, env: dict[str, str] | None = None,
          prelude: str | None = None) -> subprocess.Popen:
    """The CLI in a subprocess, running ``prelude`` (default: :data:`SLOW_CLI` when ``slow``) as its main."""
    prelude = prelude or (SLOW_CLI if slow else None)
    cmd = [sys.executable, "-c", prelude] if prelude else [sys.executable, "-m", "gguf_mtp_cli.main"]
    return subprocess.Popen(cmd + [str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, **(env or {})), cwd=ROOT)


def temps(folder: Path) -> list[Path]:
    """Our temp and scratch files (and the old ``.head-*.gguf`` intermediates) in ``folder``."""
    return [p for p in folder.iterdir() if p.name.endswith(".partial") or p.name.startswith(".head-")]


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging forever) when the block takes longer than ``seconds`` (main thread only)."""

    def fire(signum, frame):  # type: ignore[no-untyped-def]
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def can_unshare_mount() -> bool:
    """Whether ``unshare -rm`` gives this user a private mount namespace (to mount a small tmpfs)."""
    try:
        r = subprocess.run(["unshare", "-rm", "sh", "-c", 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d" '
                            '&& umount "$d" && rmdir "$d"'], capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def dead_pid() -> int:
    """The pid of a process that has exited."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid
