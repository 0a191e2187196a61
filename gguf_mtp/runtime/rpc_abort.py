"""What happens when an RPC server breaks after the handshake: one line naming it and exit status 2, instead of
ggml's abort.

ggml's RPC client has no error path. When a send or receive on a server's connection fails (the server died,
closed the connection, or answered something that is not the reply it waits for), ggml-rpc calls GGML_ABORT,
usually on the connection's own thread: ggml prints its message and a backtrace and abort() kills the process
with SIGABRT. Nothing can unwind that: the thread that asked (a model load, ``llama_decode``) waits for a reply
that will never come, and ggml's state for that server is gone. What ggml does offer is its abort callback
(``ggml_set_abort_callback``), called with the message just before abort(). Once servers are named, it is set
to :func:`_on_abort`: for an abort raised in ggml-rpc it finds which server broke, prints

    error: --rpc HOST:PORT: the RPC server ... mid-run; ...

and ends the process with ``_exit(EXIT_STATUS)`` before abort() runs (no Python clean-up can run: other
threads are stuck inside llama.cpp). Aborts from elsewhere in ggml keep ggml's behaviour (the message, a
backtrace, SIGABRT), through the callback that was set before, if any.

Which server: ggml's message names it only when a new connection fails. Otherwise this process's own
connections are read (a connection to the server at end of stream or reset: it closed or dropped this run),
then each server gets one bounded connect (refused: it is gone). When neither tells, every server is named.
"""

from __future__ import annotations

import ctypes
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable

EXIT_STATUS = 2  # a one-line error, as every other failure the CLI reports
PROBE_TIMEOUT = 1.0  # seconds per server for the connect that tells a server that is gone
_ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)  # ggml.h: typedef void (*ggml_abort_callback_t)(const char *)

_lock = threading.Lock()
_servers: dict[str, set[tuple[str, int]]] = {}  # "host:port" as named -> its addresses, resolved while it answered
_keep: list[object] = []  # the ctypes callback and the previous one, alive as long as ggml may call them
_describe: Callable[[str], str | None] | None = None
_previous: Callable[[bytes | None], None] | None = None
_backtrace: Callable[[], None] | None = None
_fired = False


def _lib() -> ctypes.CDLL:
    """libggml-base's ``ggml_set_abort_callback``, through libllama's handle: the copy of ggml that llama.cpp and
    its RPC backend use (see runtime.llama.registry)."""
    import llama_cpp.llama_cpp as ll

    lib = ctypes.CDLL(ll._lib._name)
    lib.ggml_set_abort_callback.restype = ctypes.c_void_p
    lib.ggml_set_abort_callback.argtypes = [ctypes.c_void_p]
    return lib


def _install(describe: Callable[[str], str | None]) -> None:
    """Set ggml's abort callback (once per process); ``describe(message)`` gives the line to print and exit with,
    or None for an abort that keeps ggml's behaviour."""
    global _describe, _previous, _backtrace
    with _lock:
        _describe = describe
        if _keep:
            return
        cb = _ABORT_CB(_on_abort)
        lib = _lib()
        _backtrace = getattr(lib, "ggml_print_backtrace", None)
        if _backtrace is not None:
            _backtrace.restype, _backtrace.argtypes = None, []
        old = lib.ggml_set_abort_callback(ctypes.cast(cb, ctypes.c_void_p))
        _keep.append(cb)
        if old:
            prev = _ABORT_CB(old)
            _keep.append(prev)
            _previous = prev
        import atexit

        # a callback that reaches Python while the interpreter is finalizing would hang the process; ggml's own
        # behaviour is the lesser evil then
        atexit.register(_uninstall, lib, old)


def _uninstall(lib: ctypes.CDLL, old: int | None) -> None:
    lib.ggml_set_abort_callback(old)


def watch_clients(endpoints: list[tuple[str, int]]) -> None:
    """From now on an abort inside ggml's RPC client ends the process with ``error: --rpc HOST:PORT: ...``
    naming the server that broke, and exit status :data:`EXIT_STATUS`. Call once each server has answered
    (its address is resolved now: no name lookup happens while aborting)."""
    for host, port in endpoints:
        ep = f"{host}:{port}"
        try:
            addrs = {(str(a[4][0]), port) for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
        except OSError:
            addrs = set()
        with _lock:
            _servers.setdefault(ep, set()).update(addrs)
    _install(_client_line)


def watch_server(host: str, port: int) -> None:
    """rpc-server: an abort inside ggml while serving ends the server with one line and :data:`EXIT_STATUS`
    (a client can send a graph that one of ggml's checks refuses; the server cannot go on either way)."""
    _install(lambda msg: f"rpc-server on {host}:{port}: ggml stopped the server while serving a client "
                         f"({_short(msg)}); restart it")


def _short(message: str) -> str:
    """ggml's message without its source path: ``ggml-rpc.cpp:566: Remote RPC server crashed ...``."""
    text = " ".join(message.split())
    head, sep, tail = text.partition(": ")
    if sep and ":" in head and "/" in head:
        text = os.path.basename(head) + sep + tail
    return text[:300]


def _client_line(message: str) -> str | None:
    if "ggml-rpc" not in message:  # not the RPC client's abort: ggml's own behaviour
        return None
    servers = dict(_servers)  # no lock: the thread holding one may be the one waiting on this abort
    named = named_in(message, servers)
    broken = {ep: "could not be reached again mid-run" for ep in named} if named else _broken(servers)
    if len(broken) == 1:
        eps, what = next(iter(broken.items()))
        what = f"the RPC server {what}"
    elif broken:
        eps = ",".join(broken)
        what = "these RPC servers broke: " + "; ".join(f"{e} {w}" for e, w in broken.items())
    else:  # nothing tells which: every server
        eps = ",".join(servers) or "?"
        what = (f"{'the RPC server' if len(servers) == 1 else 'one of these RPC servers'} broke mid-run (it died, "
                "closed the connection or answered something that is not ggml's RPC protocol)")
    return (f"--rpc {eps}: {what}; llama.cpp cannot go on without it, so the run ends here: check the server, "
            f"restart it and run again (ggml: {_short(message)})")


def named_in(message: str, endpoints: Iterable[str]) -> list[str]:
    """The endpoints ggml's message names (``Failed to connect to HOST:PORT``), whole: ``h:5005`` is not
    ``h:50052``."""
    return [ep for ep in endpoints if re.search(rf"(?<![\w.-]){re.escape(ep)}(?!\d)", message)]


def _broken(servers: dict[str, set[tuple[str, int]]], rounds: int = 2) -> dict[str, str]:
    """Which servers look broken, and why: this process's connections to them first, then a new connection.
    A server that dies closes its connections a moment before its listening socket: a second look if no
    server told."""
    out: dict[str, str] = {}
    for i in range(rounds):
        if i:
            time.sleep(0.25)
        out = _own_connections(servers)
        for ep, addrs in servers.items():
            if ep not in out and (why := _refuses(addrs)):
                out[ep] = why
        if out:
            break
    return out


def _own_connections(servers: dict[str, set[tuple[str, int]]]) -> dict[str, str]:
    """``{endpoint: why}`` for this process's TCP connections to a server that ended: a connection whose peer
    closed it (end of stream) or reset it. Read without consuming anything (MSG_PEEK)."""
    by_addr = {a: ep for ep, addrs in servers.items() for a in addrs}
    out: dict[str, str] = {}
    fd_dir = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    try:
        fds = [int(f) for f in os.listdir(fd_dir) if f.isdigit()][:4096]
    except OSError:
        return out
    for fd in fds:
        try:
            dup = os.dup(fd)
        except OSError:
            continue
        try:
            s = socket.socket(fileno=dup)
        except OSError:  # not a socket
            os.close(dup)
            continue
        with s:
            if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
                continue
            try:
                peer = s.getpeername()[:2]
            except OSError:
                continue
            ep = by_addr.get((peer[0], peer[1]))
            if ep is None:
                continue
            try:
                data = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError as e:
                out[ep] = f"reset the connection mid-run ({e.strerror or e})"
                continue
            if not data:
                out[ep] = "closed the connection mid-run"
    return out


def _refuses(addrs: set[tuple[str, int]]) -> str | None:
    """Why a new connection to the server fails at once (it is gone), or None (it accepts, or is slow to)."""
    for addr in sorted(addrs):
        try:
            with socket.create_connection(addr, timeout=PROBE_TIMEOUT):
                return None
        except ConnectionRefusedError:
            return "went away mid-run (it refuses connections now)"
        except OSError:
            continue
    return None


def _say(line: str) -> None:
    try:  # the text generated so far, ended as a run ends it, then the line
        if sys.stdout.isatty():
            sys.stdout.write("\n")
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - stdout closed or broken: the line and the status still tell
        pass
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def _on_abort(message: bytes | None) -> None:
    """ggml's abort callback, on whatever thread aborted (ctypes takes the GIL for it; the probes release it)."""
    global _fired
    text = (message or b"").decode("utf-8", "replace")
    if _fired:  # another thread is ending the process (its probes are under way): abort() must not overtake it
        for _ in range(600):
            time.sleep(0.1)
        os._exit(EXIT_STATUS)
    _fired = True
    try:
        line = _describe(text) if _describe is not None else None
        if line is not None:
            _say(f"error: {line}")
            os._exit(EXIT_STATUS)
    except BaseException:  # noqa: BLE001 - an interrupt or a bug here must not leave ggml's abort to run
        _say(f"error: ggml stopped the process: {_short(text)}")
        os._exit(EXIT_STATUS)
    _fired = False  # not ours: ggml's behaviour
    if _previous is not None:
        _previous(message)
        return
    try:  # ggml's default: the message and a backtrace (abort() follows)
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
    if _backtrace is not None:
        _backtrace()
