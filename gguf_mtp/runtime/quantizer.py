"""llama.cpp's quantizer in a child process, so that Ctrl-C and SIGTERM stop it at once.

``llama_model_quantize`` is one C call that runs for minutes on a large model and cannot be cancelled, and a
signal handler that runs inside it (in llama.cpp's log callback) cannot stop it. In a child process it can be
stopped: this process waits for the child, and on Ctrl-C or SIGTERM kills it and unwinds as usual (the caller's
temp file is removed), within a second whatever the model size. A crash of llama.cpp (an abort) ends the child,
not the caller, and becomes one line.

The child has its own session, so a Ctrl-C at the terminal reaches only this process, which decides; and it exits
by itself when this process is gone (a pipe it holds reaches end of file), so a killed caller (SIGKILL) never
leaves a quantizer writing behind it.

The request (paths, type, overrides, importance matrix) goes to the child's stdin as a pickle, its answer comes back
as one JSON line on stdout: both ends are this module, in the same installation.

Progress: llama.cpp logs one line per tensor as it quantizes it (``[  12/ 291] blk.0.attn_k.weight ...`` then
``size = 64.00 MiB -> 18.00 MiB``). The child relays each finished tensor's input size over a pipe of its own, and
this process draws :class:`~gguf_mtp.progress.Progress` from it: the count and bytes are llama.cpp's own, not a
guess from the output file's size (which llama.cpp writes ahead, padding included).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GgufMtpError

if TYPE_CHECKING:
    import numpy as np

#: the child's command, given the pipe's descriptor (tests slow the child down through it). The folder that holds
#: gguf_mtp goes at the end of its path: found as in this process (whatever sys.path the caller was given), and
#: nothing it holds shadows the standard library
_BOOT = """
import os, sys
sys.path.append(os.environ.pop("GGUF_MTP_PACKAGE_ROOT"))
from gguf_mtp.runtime.quantizer import _child
_child(int(sys.argv[1]), int(sys.argv[2]))
"""
CHILD = [sys.executable, "-c", _BOOT]


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *, threads: int = 0,
             tensor_types: Sequence[tuple[str, int]] = (), imatrix: dict[str, np.ndarray] | None = None,
             allow_requantize: bool = False, progress: bool = False, label: str | None = None) -> None:
    """:func:`gguf_mtp.runtime.llama.quantize_file` in a child process (same arguments; ``progress``: a progress
    line on stderr, tensor by tensor, showing ``label``, default ``dst``'s name).

    A failed write (full disk, file size limit, quota) raises an ``OSError`` with ``dst`` as its file name, which
    :func:`~gguf_mtp.ggufio.atomic.atomic_paths` turns into a one-line error naming the output.
    """
    request = pickle.dumps({"src": os.fspath(src), "dst": os.fspath(dst), "ftype": ftype, "threads": threads,
                            "tensor_types": list(tensor_types), "imatrix": imatrix,
                            "allow_requantize": allow_requantize}, protocol=pickle.HIGHEST_PROTOCOL)
    env = dict(os.environ, GGUF_MTP_PACKAGE_ROOT=str(Path(__file__).resolve().parents[2]))
    verbose = bool(os.environ.get("GGUF_MTP_LLAMA_LOG"))
    life_r, life_w = os.pipe()  # the child holds the read end: end of file there means this process is gone
    prog_r, prog_w = os.pipe()  # the child's per-tensor progress
    relay: threading.Thread | None = None
    try:
        try:
            child = subprocess.Popen(CHILD + [str(life_r), str(prog_w)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None if verbose else subprocess.PIPE,
                                     pass_fds=(life_r, prog_w), start_new_session=True, env=env)
        except OSError as e:
            raise GgufMtpError(f"cannot start the quantizer process ({sys.executable}: {e.strerror})") from None
        finally:
            os.close(life_r)
            os.close(prog_w)
        relay = threading.Thread(target=_draw, args=(prog_r, label or Path(dst).name, Path(src), progress), daemon=True)
        relay.start()
        try:
            out, err = child.communicate(request)
        except BaseException:  # Ctrl-C, SIGTERM (Terminated), anything: the quantizer stops with us
            _stop(child)
            raise
    finally:
        os.close(life_w)
        if relay is not None:
            relay.join(5)  # the child is gone: its end of the pipe is closed, the relay ends at once
        if relay is None or not relay.is_alive():
            os.close(prog_r)
    _check(child.returncode, out, err or b"", Path(dst), ftype)


def _stop(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    try:
        child.wait()
    except BaseException:  # noqa: BLE001 - a second Ctrl-C while it goes: it is killed already
        pass


def _check(rc: int, out: bytes, err: bytes, dst: Path, ftype: str) -> None:
    try:
        answer: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
    except (ValueError, UnicodeDecodeError):
        answer = {}
    if rc == 0 and answer.get("ok"):
        return
    if "error" in answer:
        code = int(answer.get("errno") or 0) or _write_errno(dst, answer.get("log", ""))
        if code:
            raise OSError(code, os.strerror(code), os.fspath(dst))
        raise GgufMtpError(answer["error"])
    code = _write_errno(dst, "")
    if code:
        raise OSError(code, os.strerror(code), os.fspath(dst))
    lines = [ln.strip() for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
    said = next((ln for ln in lines if "GGML_ASSERT" in ln or "error" in ln.lower()), lines[-1] if lines else "")
    how = f"was killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.Signals._value2member_map_ \
        else f"exited with status {rc}"
    raise GgufMtpError(f"llama.cpp's quantizer {how} while writing {dst.name} as {ftype}"
                       + (f": {said[:300]}" if said else "") + " (out of memory? rerun with GGUF_MTP_LLAMA_LOG=1)")


def _write_errno(dst: Path, log: str) -> int:
    """When the child could not say why a write failed: a file at the size limit, or a full disk."""
    import errno

    try:
        size = os.stat(dst).st_size
    except OSError:
        return 0
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and size >= soft - (1 << 20):
        return errno.EFBIG
    if "iostream" in log or "basic_ios" in log or not log:
        try:
            st = os.statvfs(dst.parent)
        except OSError:
            return 0
        if st.f_bavail * st.f_frsize < (1 << 20):
            return errno.ENOSPC
    return 0


#: a progress record: tensors done, of, input bytes of the tensor just done
_RECORD = re.compile(r"^(\d+) (\d+) (\d+)$")


def _draw(fd: int, label: str, src: Path, enabled: bool) -> None:
    """Read the child's progress records until it closes the pipe; draw them when ``enabled``."""
    from ..progress import Progress

    bar: Progress | None = None
    with os.fdopen(fd, "rb", closefd=False) as f:
        for raw in f:
            m = _RECORD.match(raw.decode("ascii", "replace").strip())
            if not m or not enabled:
                continue
            done, total, nbytes = (int(g) for g in m.groups())
            if bar is None:
                bar = Progress(f"quantize {label}", _input_bytes(src), total)
            bar.done_tensors = done - 1
            bar.advance(nbytes)
            bar.tensor_done()
    if bar is not None:
        if bar.done_tensors == bar.total_tensors:  # the sizes llama.cpp logs are rounded: its last tensor is 100%
            bar.done_bytes = bar.total_bytes
        bar.close()


def _input_bytes(src: Path) -> int:
    """The tensor bytes llama.cpp reads (the file less its header): the progress line's 100%."""
    try:
        from ..ggufio.model import GGUFModel

        return sum(t.info.nbytes for t in GGUFModel(src).tensors.values())
    except (GgufMtpError, OSError):
        return 1


# -- the child -------------------------------------------------------------------------------------
_STARTED = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]")
_SIZE = re.compile(r"size =\s*([\d.]+) MiB")


class _RelayLog(list[str]):
    """The child's llama.cpp log buffer (:data:`gguf_mtp.runtime.llama._log`), which also sends a record
    ``done total bytes`` down the progress pipe each time llama.cpp logs a tensor's size (it is done with it)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd, self.current, self.total = fd, 0, 0

    def append(self, s: str) -> None:
        super().append(s)
        if m := _STARTED.match(s):
            self.current, self.total = int(m.group(1)), int(m.group(2))
        elif self.current and (m := _SIZE.search(s)):
            try:
                os.write(self.fd, f"{self.current} {self.total} {int(float(m.group(1)) * (1 << 20))}\n".encode())
            except OSError:  # the parent stopped reading: progress is not worth failing over
                pass
            self.current = 0



def _exit_when_orphaned(fd: int) -> None:
    while os.read(fd, 1):
        pass
    os._exit(3)


def _child(life_fd: int, progress_fd: int = -1) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a signal sent to this process ends it
        signal.signal(sig, signal.SIG_DFL)
    threading.Thread(target=_exit_when_orphaned, args=(life_fd,), daemon=True).start()
    req = pickle.load(sys.stdin.buffer)
    from . import llama

    if progress_fd >= 0:
        llama._log = _RelayLog(progress_fd)  # the log callback appends to this module global

    answer: dict[str, Any]
    try:
        llama.quantize_file(req["src"], req["dst"], req["ftype"], threads=req["threads"],
                            tensor_types=req["tensor_types"], imatrix=req["imatrix"],
                            allow_requantize=req["allow_requantize"])
        answer = {"ok": True}
    except llama.QuantizeFailed as e:
        answer = {"error": str(e), "errno": e.errno, "log": llama.last_error()}
    except GgufMtpError as e:
        answer = {"error": str(e)}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")  # on a line of its own, whatever llama.cpp printed
    sys.stdout.flush()
    os._exit(0)  # nothing to tear down: skip the interpreter's (and llama.cpp's) exit handlers

