"""Signals and the exit-status contract of ``gguf-mtp``: SIGINT and SIGTERM in the middle of a conversion
(exit 130 / 143, one line, no temp file, no output, inputs unchanged), and the one place in cli/main.py that
turns every other failure into a one-line ``error:`` (exit 2): OS errors, out of memory, internal errors
(tracebacks only with --debug), usage errors, invalid UTF-8 on stdin."""

from __future__ import annotations

import hashlib
import importlib
import io
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gguf_mtp_cli import main as cli_main
from gguf_mtp_cli.main import main

from .reliability import SLOW_LLAMA_CLI, cli, spawn, sub, temps, tree

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: signals `run` too


def _interrupt_mid_write(ck: Path, tmp_path: Path, sig: int, argv_extra: list[str] | None = None) -> tuple[int, str]:
    out = tmp_path / "out"
    out.mkdir()
    before = tree(ck)
    p = spawn(["convert", ck, "-o", out / "o.gguf", "--outtype", "q8_0", "-q"] + (argv_extra or []))
    t0 = time.monotonic()
    while True:  # wait until the temp file holds data: the signal lands mid-write
        ts = temps(out)
        if ts and ts[0].stat().st_size > 4096:
            break
        assert p.poll() is None, p.communicate()
        assert time.monotonic() - t0 < 120, "the conversion never started writing"
        time.sleep(0.02)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode >= 0, f"died by signal {-p.returncode}"
    assert "Traceback" not in err, err
    assert not list(out.iterdir()), list(out.iterdir())  # no output, no temp file
    assert tree(ck) == before
    return p.returncode, err.strip()


@pytest.fixture()
def ck(checkpoint, tmp_path: Path) -> Path:
    return shutil.copytree(checkpoint("qwen35"), tmp_path / "ck")


def test_sigint_mid_convert(ck: Path, tmp_path: Path) -> None:
    rc, err = _interrupt_mid_write(ck, tmp_path, signal.SIGINT)
    assert rc == 130 and err.endswith("interrupted: nothing was written")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_mid_convert(ck: Path, tmp_path: Path, sig: signal.Signals) -> None:
    rc, err = _interrupt_mid_write(ck, tmp_path, sig)
    assert rc == 128 + sig and err == f"terminated ({sig.name}): nothing was written"


def test_ctrl_c_through_main_is_130_not_0(ck: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """typer turns KeyboardInterrupt into a returned Exit(130) with standalone_mode=False; main must not
    report success."""
    def interrupted(*a, **k):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("gguf_mtp.convert"), "convert", interrupted)
    rc, err = cli(capsys, ["convert", ck, "-o", tmp_path / "o.gguf"])
    assert rc == 130 and "interrupted" in err


@pytest.mark.parametrize("exc,needle", [
    (OSError(28, "No space left on device", "/x/o.gguf"), "error: /x/o.gguf: No space left on device (ENOSPC); free"),
    (IsADirectoryError(21, "Is a directory", "/x"), "error: /x: Is a directory (EISDIR); it is a folder"),
    (PermissionError(13, "Permission denied", "/x"), "error: /x: Permission denied (EACCES); check its permissions"),
    (OSError(30, "Read-only file system"), "error: Read-only file system (EROFS); the file system is read-only"),
    (MemoryError(), "error: out of memory"),
    (ValueError("bad\nthing"), "error: internal error: ValueError: bad thing (rerun with --debug for the traceback)"),
    (RecursionError("maximum recursion depth exceeded"), "error: internal error: RecursionError"),
])
def test_every_failure_is_one_line(ck: Path, tmp_path: Path, capsys, monkeypatch, exc: BaseException,
                                   needle: str) -> None:
    def fail(*a, **k):  # type: ignore[no-untyped-def]
        raise exc

    monkeypatch.setattr(importlib.import_module("gguf_mtp.convert"), "convert", fail)
    rc = main(["convert", str(ck)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith(needle), err
    rc = main(["--debug", "convert", str(ck)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback (most recent call last)" in err and err.splitlines()[-1].startswith(needle[:20])


def test_usage_errors_are_one_line(capsys) -> None:
    for argv, needle in ((["convert", "--outtype", "f16"], "Missing argument"), (["convert", "x", "--nope"], "No such option"),
                         (["run", "m.gguf", "-n", "many"], "Invalid value for '--n-predict'"),
                         (["convert", "x", "--head-only"], "--head-only applies to the sidecar")):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
        assert "--help'" in err


def test_sigterm_handler_is_installed_only_around_main(monkeypatch) -> None:
    seen = []

    def record(*a, **k):  # type: ignore[no-untyped-def]
        seen.append(signal.getsignal(signal.SIGTERM))
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("gguf_mtp.convert"), "convert", record)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["convert", "x"]) == 130
    assert seen == [cli_main._on_terminate if before == signal.SIG_DFL else before]
    assert signal.getsignal(signal.SIGTERM) == before


def test_closed_stdout_is_141_without_a_message(capsys, monkeypatch) -> None:
    def closed(*a, **k):  # type: ignore[no-untyped-def]
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(importlib.import_module("gguf_mtp.file_report"), "inspect_file", closed)
    assert main(["inspect", "x.gguf"]) == 141
    assert capsys.readouterr().err == ""


def test_invalid_utf8_on_stdin_skips_that_message(converted, capsys, monkeypatch) -> None:
    model = converted("qwen35", "bundled")
    stdin = io.TextIOWrapper(io.BytesIO(b"hello\n\xff\xfe not utf-8\nagain\n"), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    rc, err = cli(capsys, ["run", model, "-n", "3", "-c", "256"])
    assert rc == 0 and err.count("error: stdin: this message is not valid UTF-8 text") == 1
    assert err.count("tok/step") >= 3  # two answers and the session line
    rc, err = cli(capsys, ["run", model, "-n", "3", "-c", "256", "-p", "bad \udcff byte"])
    assert rc == 2 and "--prompt is not valid UTF-8" in err


# -- signals inside llama.cpp: the quantizer (a child process) and a model load (a callback) ------------------------
def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: every process's parent, from its stat line
        kids = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(d.name))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
        return kids


def _gone(pid: int) -> bool:
    """Exited (a zombie that no init reaps counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _wait_for(what: str, done, p: subprocess.Popen, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while not done():
        assert p.poll() is None, (what, p.communicate())
        assert time.monotonic() - t0 < timeout, f"{what} never happened"
        time.sleep(0.02)


def _quantize_mid_write(src: Path, out: Path) -> tuple[subprocess.Popen, list[int]]:
    """``quantize`` with llama.cpp's log slowed, waited for until llama.cpp has written into the temp file."""
    p = spawn(["quantize", src, out / "q.gguf", "Q4_K_M"], prelude=SLOW_LLAMA_CLI)
    _wait_for("the quantizer writing", lambda: any(t.stat().st_size > 0 for t in temps(out)), p)
    return p, _children(p.pid)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_quantize_stops_it(converted, tmp_path: Path, sig: signal.Signals) -> None:
    """Issue 23: the signal ran inside llama.cpp's log callback and was lost ("Exception ignored"); the
    quantization ran to its end, wrote the output and exited 0. Now the quantizer is a child process."""
    src = converted("qwen35", "bundled", "bf16")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    out = tmp_path / "out"
    out.mkdir()
    p, kids = _quantize_mid_write(src, out)
    t0 = time.monotonic()
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == (130 if sig == signal.SIGINT else 143), err
    assert err.strip().endswith("interrupted: nothing was written" if sig == signal.SIGINT
                                else "terminated (SIGTERM): nothing was written"), err
    assert "Exception ignored" not in err and "Traceback" not in err, err
    assert not list(out.iterdir())  # no output, no temp file
    assert kids and all(_gone(k) for k in kids), kids  # the quantizer went with it
    assert time.monotonic() - t0 < 60  # not after the whole quantization (generous for a loaded machine)
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest


def test_a_killed_quantize_leaves_no_quantizer_and_its_temp_goes_next_time(converted, tmp_path: Path) -> None:
    """SIGKILL cannot be handled: the child notices its parent is gone and stops; the next run removes the temp."""
    src = converted("qwen35", "bundled", "bf16")
    out = tmp_path / "out"
    out.mkdir()
    p, kids = _quantize_mid_write(src, out)
    assert kids, "no quantizer process"
    p.kill()
    p.communicate(timeout=60)
    t0 = time.monotonic()
    while not all(_gone(k) for k in kids):
        assert time.monotonic() - t0 < 60, "the quantizer outlived its killed parent"
        time.sleep(0.05)
    r = sub(["quantize", src, out / "q.gguf", "Q4_K_M"])
    assert r.returncode == 0, r.stderr
    assert [x.name for x in out.iterdir()] == ["q.gguf"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_during_a_model_load_is_not_lost(converted, tmp_path: Path, sig: signal.Signals) -> None:
    """A Ctrl-C (or SIGTERM) while llama.cpp loads the model used to be dropped in its log callback: the run went on
    and answered. Now the load stops at its next progress report and the run exits 130 (143) without answering."""
    model = converted("qwen35", "bundled")
    mark = tmp_path / "log.txt"
    p = spawn(["run", model, "-p", "hello", "-n", "8", "-c", "256"], prelude=SLOW_LLAMA_CLI,
              env={"SLOW_LOG_MARK": str(mark)})

    def loading() -> bool:  # llama.cpp is inside llama_model_load_from_file, far from its end
        return mark.exists() and mark.read_text().count("llama_model_loader:") >= 10

    _wait_for("the model load", loading, p)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == (130 if sig == signal.SIGINT else 143), err
    assert out == "" and "tok/step" not in err, (out, err)  # no answer
    assert "Exception ignored" not in err and "Traceback" not in err, err
