"""llama.cpp's RPC backend: the client side of ``--rpc`` (each server probed with ggml-rpc's HELLO, then its
devices added to ggml's registry, as llama.cpp's common/arg.cpp does) and ggml's own server (what llama.cpp's
rpc-server runs). ggml's client aborts the process on a server it cannot reach and waits forever on one that
does not answer, so a server that is not there is a one-line error here first; one that breaks later is named
by :mod:`.rpc_abort`."""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

from ..backends import Device
from ..errors import GgufMtpError
from . import devices, llama, rpc_abort

PROBE_TIMEOUT = 3.0  # seconds for connect + handshake; ggml itself would block or abort
# ggml-rpc.cpp: RPC_CMD_HELLO = 14; request: conn_caps[24]; response: major, minor, patch, pad, conn_caps[24]
HELLO, CAPS_BYTES, PROTOCOL_MAJOR, PROTOCOL_MINOR = 14, 24, 7, 0
_NO_RPC = "this llama-cpp-python build has no RPC backend; rebuild it with CMAKE_ARGS=\"-DGGML_RPC=ON\" " \
          "bash scripts/setup.sh (the default build includes it)"

_added: set[str] = set()  # "host:port" of the servers whose devices are in ggml's registry


def supported() -> bool:
    """Whether the loaded build has the RPC backend."""
    import llama_cpp

    return bool(llama_cpp.llama_supports_rpc())


def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> tuple[int, int, int]:
    """Connect and do ggml-rpc's HELLO within ``timeout``; the server's protocol version. ggml's own client
    aborts the process when it cannot connect and waits forever on a peer that does not answer, so every
    server is probed first."""
    ep = f"{host}:{port}"
    reply_bytes = 8 + 4 + CAPS_BYTES
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack("<BQ", HELLO, CAPS_BYTES) + bytes(CAPS_BYTES))
            data = b""
            while len(data) < reply_bytes:
                chunk = s.recv(reply_bytes - len(data))
                if not chunk:
                    break
                data += chunk
    except TimeoutError:
        raise GgufMtpError(f"--rpc {ep}: no answer within {timeout:g} s (a firewall, the wrong port, or the "
                           "server is serving another client; rpc-server takes one client at a time)") from None
    except OSError as e:
        raise GgufMtpError(f"--rpc {ep}: cannot connect ({e.strerror or e}); start it there with "
                           f"`gguf-mtp rpc-server --host <address> --port {port}` "
                           "(or llama.cpp's rpc-server)") from None
    if len(data) < 12 or struct.unpack_from("<Q", data)[0] != 4 + CAPS_BYTES:
        raise GgufMtpError(f"--rpc {ep}: the server does not speak ggml's RPC protocol (no HELLO reply)")
    major, minor, patch = data[8], data[9], data[10]
    if major != PROTOCOL_MAJOR or minor > PROTOCOL_MINOR:
        raise GgufMtpError(f"--rpc {ep}: RPC protocol {major}.{minor}.{patch}, "
                           f"this build speaks {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}.x; "
                           "build both sides from the same llama.cpp version")
    return major, minor, patch


def add_servers(endpoints: list[tuple[str, int]], timeout: float = PROBE_TIMEOUT) -> list[Device]:
    """Register each server's devices (RPC0, RPC1, ...) in ggml's registry, as llama.cpp's --rpc; probed first.
    Registration is for the whole process; a server already added is not added twice. A server that breaks
    later ends the process with one line naming it (see :mod:`.rpc_abort`)."""
    if not supported():
        raise GgufMtpError(f"--rpc: {_NO_RPC}")
    registry = llama.registry()
    add = registry.function("RPC", "ggml_backend_rpc_add_server")
    if not add:
        raise GgufMtpError("--rpc: the RPC backend does not export ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(add)
    for host, port in endpoints:
        ep = f"{host}:{port}"
        if ep in _added:
            continue
        probe(host, port, timeout)
        rpc_abort.watch_clients([(host, port)])  # from here on a broken server is one line, not ggml's abort
        reg = add_server(ep.encode())
        if not reg:
            raise GgufMtpError(f"--rpc {ep}: the server reports no devices")
        registry.register(reg)
        _added.add(ep)
    return [d for d in devices.available() if d.backend == "RPC"]


def cache_dir() -> Path:
    """llama.cpp's rpc-server --cache folder: $LLAMA_CACHE/rpc, else $XDG_CACHE_HOME or ~/.cache, /llama.cpp/rpc."""
    base = os.environ.get("LLAMA_CACHE")
    if base:
        return Path(base) / "rpc"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llama.cpp" / "rpc"


def serve(host: str, port: int, names: list[str] | None = None, threads: int | None = None,
          cache: bool = False, on_ready: Callable[[list[Device]], None] | None = None) -> None:
    """ggml's own RPC server (ggml_backend_rpc_start_server, what llama.cpp's rpc-server runs) on host:port,
    serving ``names`` (default: the accelerators, else the CPU). Blocks until interrupted; the server runs
    on a thread so Ctrl-C reaches Python. It has no authentication: bind to a trusted network only."""
    if not supported():
        raise GgufMtpError(f"rpc-server: {_NO_RPC}")
    registry = llama.registry()
    if names:
        devs = []
        for n in names:
            named = registry.by_name(n)
            if named is None:
                have = ", ".join(x.name for x in registry.devices())
                raise GgufMtpError(f"rpc-server --device {n}: no such device; this build has {have}")
            devs.append(named)
    else:
        every = registry.devices()
        devs = [d for d in every if d.type not in ("CPU", "ACCEL")] or [d for d in every if d.type == "CPU"][:1]
    if not devs:
        raise GgufMtpError("rpc-server: no device to serve")
    start = registry.function("RPC", "ggml_backend_rpc_start_server")
    if not start:
        raise GgufMtpError("rpc-server: the RPC backend does not export ggml_backend_rpc_start_server")
    if ":" in host or not host:
        raise GgufMtpError(f"rpc-server --host {host!r}: an IPv4 address or a host name "
                           "(ggml's endpoints are host:port)")
    try:  # bind once ourselves: ggml only prints "Failed to create server socket"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise GgufMtpError(f"rpc-server: cannot listen on {host}:{port} ({e.strerror or e})") from None
    folder = None
    if cache:
        where = cache_dir()
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise GgufMtpError(f"rpc-server --cache: cannot create {where} ({e.strerror or e})") from None
        folder = str(where).encode()
    start_server = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_void_p))(start)
    pointers = (ctypes.c_void_p * len(devs))(*[d.ptr for d in devs])
    n_threads = threads or max(1, (os.cpu_count() or 2) // 2)
    rpc_abort.watch_server(host, port)  # ggml aborting while serving: one line and exit 2, not SIGABRT
    t = threading.Thread(target=start_server, args=(f"{host}:{port}".encode(), folder, n_threads, len(devs), pointers),
                         daemon=True)
    t.start()
    if on_ready:
        on_ready(devs)
    while t.is_alive():
        t.join(0.25)
    raise GgufMtpError(f"rpc-server: the server on {host}:{port} stopped (see ggml's message above)")
