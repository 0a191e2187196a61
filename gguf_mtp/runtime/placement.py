"""Where a model's layers go: llama.cpp's device options (``--device``, ``--split-mode``, ``--tensor-split``,
``--main-gpu``, ``--device-draft``) resolved against ggml's device registry, and RPC servers (``--rpc``)
added to it, as llama.cpp's common/arg.cpp does. Everything is checked before llama.cpp sees it: an unknown
device, a split longer than the device list or an RPC server that does not answer is a one-line error, not
an abort inside ggml.

Placement facts (llama-model.cpp ``load_tensors``): the token embeddings always stay on the CPU; offloaded
layers are the model's last ``-ngl`` layers, cut into contiguous runs by the cumulative ``tensor_split``
fractions; the MTP blocks are the last layers of a model that carries them and the output layer (LM head)
comes after them. So the head of a bundled model (or a trunk merged with a head-only sidecar) can only be
placed with the model's layer split: ``draft_split`` puts the MTP blocks and the LM head on the draft
device and the trunk on the others. A self-contained sidecar is a model of its own, placed by its own
parameters.
"""

from __future__ import annotations

import ctypes
import math
import re
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import GgufMtpError
from . import rpc_abort

if TYPE_CHECKING:  # llama.cpp itself is loaded on first use (see ggml())
    from llama_cpp.llama_cpp import llama_model_params

SPLIT_MODES = {"none": 0, "layer": 1, "row": 2, "tensor": 3}  # enum llama_split_mode
_DEV_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")  # enum ggml_backend_dev_type
MiB = 1024 * 1024
RPC_PROBE_TIMEOUT = 3.0  # seconds for connect + handshake; ggml itself would block or abort
# ggml-rpc.cpp: RPC_CMD_HELLO = 14; request: conn_caps[24]; response: major, minor, patch, pad, conn_caps[24]
_RPC_HELLO, _RPC_CAPS, _RPC_MAJOR, _RPC_MINOR = 14, 24, 7, 0


@dataclass(frozen=True)
class Device:
    name: str  # CUDA0, Vulkan1, RPC0, CPU
    description: str
    type: str  # CPU, GPU, IGPU, ACCEL
    backend: str  # its registry: CUDA, Vulkan, RPC, CPU
    free: int
    total: int
    ptr: int = field(repr=False, compare=False, default=0)

    def label(self) -> str:
        """llama.cpp's --list-devices line: ``CUDA0: NVIDIA H100 80GB HBM3 (81559 MiB, 80987 MiB free)``."""
        return f"{self.name}: {self.description} ({self.total // MiB} MiB, {self.free // MiB} MiB free)"


class _Ggml:
    """ctypes over libggml's backend registry (ggml-backend.h), resolved through libllama's own handle: a wheel
    holds libggml.so and libggml.so.0 as two files (zip archives keep no symlinks), llama-cpp-python loads the
    first and libllama the second, and each copy has its own registry. Devices must come from libllama's."""

    def __init__(self) -> None:
        import llama_cpp.llama_cpp as ll

        g = self.lib = ctypes.CDLL(ll._lib._name)  # the same handle; dlsym searches its dependencies
        vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        for fn, res, args in (
            ("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_by_name", vp, [cp]), ("ggml_backend_dev_name", cp, [vp]),
            ("ggml_backend_dev_description", cp, [vp]), ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_backend_reg", vp, [vp]), ("ggml_backend_reg_name", cp, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
            ("ggml_backend_reg_by_name", vp, [cp]), ("ggml_backend_reg_get_proc_address", vp, [vp, cp]),
            ("ggml_backend_register", None, [vp]),
        ):
            f = getattr(g, fn)
            f.restype, f.argtypes = res, args

    def device(self, ptr: int) -> Device:
        g = self.lib
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        g.ggml_backend_dev_memory(ptr, ctypes.byref(free), ctypes.byref(total))
        t = g.ggml_backend_dev_type(ptr)
        reg = g.ggml_backend_dev_backend_reg(ptr)
        return Device((g.ggml_backend_dev_name(ptr) or b"").decode(),
                      (g.ggml_backend_dev_description(ptr) or b"").decode(),
                      _DEV_TYPES[t] if 0 <= t < len(_DEV_TYPES) else str(t),
                      (g.ggml_backend_reg_name(reg) or b"").decode() if reg else "", free.value, total.value, ptr)

    def proc(self, reg_name: str, fn: str) -> int | None:
        reg = self.lib.ggml_backend_reg_by_name(reg_name.encode())
        return self.lib.ggml_backend_reg_get_proc_address(reg, fn.encode()) if reg else None


_ggml: _Ggml | None = None
_rpc_added: set[str] = set()


def ggml() -> _Ggml:
    global _ggml
    if _ggml is None:
        from . import llama  # llama.cpp initialised and its log captured before ggml talks

        llama._init()
        _ggml = _Ggml()
    return _ggml


def devices() -> list[Device]:
    """Every device of the build (RPC servers once added), in ggml's order: GPUs first, the CPU last."""
    g = ggml()
    return [g.device(g.lib.ggml_backend_dev_get(i)) for i in range(g.lib.ggml_backend_dev_count())]


def default_offload_devices() -> list[Device]:
    """The devices llama.cpp uses when none are named (llama.cpp's llama_prepare_model_devices): RPC servers
    first (fewer network transfers), then GPUs, integrated GPUs only when there is no discrete one."""
    devs = devices()
    rpc = [d for d in devs if d.type == "GPU" and d.backend == "RPC"]
    gpus = [d for d in devs if d.type == "GPU" and d.backend != "RPC"]
    return rpc + (gpus or [d for d in devs if d.type == "IGPU"])


# -- parsing (what the CLI hands over; no llama.cpp needed) -------------------------------------
def parse_device_list(value: str, option: str = "--device") -> list[str]:
    """``CUDA0,CUDA1`` -> names; ``none`` -> [] (nothing offloaded)."""
    names = [s.strip() for s in value.split(",")]
    if not value.strip() or any(not s for s in names):
        raise GgufMtpError(f"{option} {value!r}: a comma-separated list of device names (see --list-devices), or none")
    if names == ["none"]:
        return []
    if "none" in names:
        raise GgufMtpError(f"{option} {value!r}: 'none' stands alone")
    return names


def parse_tensor_split(value: str) -> list[float]:
    """``3,1`` or ``3/1`` -> proportions, as llama.cpp's --tensor-split."""
    out = []
    for s in re.split(r"[,/]+", value.strip()):
        try:
            x = float(s)
        except ValueError:
            raise GgufMtpError(f"--tensor-split {value!r}: {s!r} is not a number; give proportions like 3,1") from None
        if not math.isfinite(x) or x < 0:
            raise GgufMtpError(f"--tensor-split {value!r}: proportions must be finite and >= 0")
        out.append(x)
    if not out or not any(out):
        raise GgufMtpError(f"--tensor-split {value!r}: at least one proportion must be above 0")
    return out


def parse_endpoints(value: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` -> [(host, port)]. ggml's client splits at the first colon, so IPv6 literals
    cannot be named (it would abort on them): a host name or an IPv4 address."""
    out = []
    shown = repr(value) if len(value) <= 80 else f"{value[:60]!r}... ({len(value)} characters)"
    for s in value.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+):(\d{1,5})\s*", s)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise GgufMtpError(f"--rpc {shown}: {s.strip()[:60]!r} is not host:port with a host name or IPv4 "
                               "address (e.g. 192.168.1.20:50052)")
        host = m.group(1)
        # DNS limits (RFC 1035): 253 characters, dot-separated labels of 1-63; the resolver refuses others
        if len(host) > 253 or any(not 0 < len(label) <= 63 for label in host.removesuffix(".").split(".")):
            raise GgufMtpError(f"--rpc {shown}: the host {host[:60]!r}{'...' if len(host) > 60 else ''} is not a "
                               "valid host name (at most 253 characters, dot-separated parts of 1-63)")
        out.append((host, int(m.group(2))))
    return out


@dataclass
class Placement:
    """llama.cpp's model placement options for one model. ``devices`` None: llama.cpp's default devices;
    [] (``none``): nothing offloaded."""

    devices: list[str] | None = None
    split_mode: str = "layer"
    tensor_split: list[float] | None = None
    main_gpu: int = 0

    def __post_init__(self) -> None:
        if self.split_mode not in SPLIT_MODES:
            raise GgufMtpError(f"--split-mode {self.split_mode!r}: one of {', '.join(SPLIT_MODES)}")
        if self.main_gpu < 0:
            raise GgufMtpError(f"--main-gpu {self.main_gpu}: an index into the device list, >= 0")


# -- resolution (needs llama.cpp) ----------------------------------------------------------------
def resolve(names: list[str] | None, option: str = "--device") -> list[Device]:
    """Device names -> devices, as llama.cpp's parse_device_list: each must exist and not be the CPU."""
    if names is None:
        return default_offload_devices()
    g, out = ggml(), []
    for n in names:
        ptr = g.lib.ggml_backend_dev_by_name(n.encode())
        d = g.device(ptr) if ptr else None
        if d is None or d.type == "CPU":
            have = ", ".join(x.name for x in devices() if x.type not in ("CPU", "ACCEL")) or "none"
            why = ("is the CPU, which holds whatever is not offloaded (use -ngl, or --device none)" if d
                   else "does not exist")
            raise GgufMtpError(f"{option} {n}: the device {why}; offload devices of this build: {have} "
                               f"(see --list-devices; RPC devices appear after --rpc)")
        if d in out:
            raise GgufMtpError(f"{option}: {n} is named twice")
        out.append(d)
    return out


class ModelParams:
    """The placement fields of a llama_model_params, with the ctypes arrays they point to kept alive for the
    load (llama.cpp copies the device list and reads the split once)."""

    def __init__(self, p: Placement, *, draft_layers: tuple[int, int] | None = None,
                 draft_device: str | None = None, n_gpu_layers: int = 0) -> None:
        """``draft_layers`` (n_layer_all, n_mtp) with ``draft_device``: a model whose MTP blocks and LM head
        go to ``draft_device``, the trunk to ``p``'s devices (see :func:`draft_split`)."""
        import llama_cpp as ll

        self.n_gpu_layers = n_gpu_layers
        self.split_mode = SPLIT_MODES[p.split_mode]
        self.main_gpu = p.main_gpu
        devs = resolve(p.devices)
        split = p.tensor_split
        if split is not None and len(split) > max(1, len(devs)):
            raise GgufMtpError(f"--tensor-split has {len(split)} proportions but the model is placed on "
                               f"{len(devs)} device(s) ({', '.join(d.name for d in devs) or 'none'}); "
                               "give one per device (fewer: the rest get 0)")
        if p.split_mode == "none" and devs and p.main_gpu >= len(devs):
            raise GgufMtpError(f"--main-gpu {p.main_gpu}: only {len(devs)} device(s) "
                               f"({', '.join(d.name for d in devs)}); --main-gpu indexes that list from 0")
        if draft_device is not None and draft_layers is not None:
            (dd,) = resolve([draft_device], "--device-draft")
            if p.split_mode in ("row", "tensor"):
                raise GgufMtpError(f"--device-draft with a bundled or head-only head places the head by layer; "
                                   f"--split-mode {p.split_mode} splits every layer over the devices: use layer")
            if p.split_mode == "none":
                devs = devs[p.main_gpu:p.main_gpu + 1]
            self.split_mode = SPLIT_MODES["layer"]  # two devices at least: the head's and the trunk's
            devs, split, self.n_gpu_layers = draft_split(devs, dd, split, n_gpu_layers, *draft_layers)
        self.devices = devs
        self.tensor_split = split
        self._devs = None
        if p.devices is not None or draft_device is not None:
            self._devs = (ctypes.c_void_p * (len(devs) + 1))(*[d.ptr for d in devs], None)
        self._split = None
        if split is not None:
            n = max(int(ll.llama_max_devices()), len(split))
            self._split = (ctypes.c_float * n)(*split)

    def apply(self, mp: llama_model_params) -> None:
        """Fill a llama_model_params."""
        mp.n_gpu_layers = self.n_gpu_layers
        mp.split_mode = self.split_mode
        mp.main_gpu = self.main_gpu
        # [type: ignore] below: llama-cpp-python annotates these fields as arrays; llama.cpp takes the pointers
        if self._devs is not None:
            mp.devices = ctypes.cast(self._devs, ctypes.c_void_p)  # type: ignore[assignment]
        if self._split is not None:
            mp.tensor_split = ctypes.cast(self._split, ctypes.POINTER(ctypes.c_float))  # type: ignore[assignment]

    def describe(self) -> str:
        names = ", ".join(d.name for d in self.devices) or "none"
        s = f"{names}, -ngl {self.n_gpu_layers}" if self.devices and self.n_gpu_layers else "CPU only"
        if self.tensor_split is not None and len(self.devices) > 1:
            s += f", split {':'.join(f'{x:g}' for x in self.tensor_split)}"
        return s


def draft_split(trunk: list[Device], draft: Device, split: list[float] | None, n_gpu_layers: int,
                n_layer_all: int, n_mtp: int) -> tuple[list[Device], list[float], int]:
    """Device list, tensor split and -ngl that put the last ``n_mtp`` layers (the MTP blocks) and the output
    layer on ``draft`` and the offloaded trunk layers on ``trunk`` (proportions ``split``, default by free
    memory as llama.cpp), in whole layers so that llama.cpp's cut points fall exactly between them.

    llama.cpp gives offloaded layer ``j`` (0-based from the first offloaded one, ``act`` in all) to the first
    device whose cumulative fraction exceeds ``j / act``; with integer layer counts as proportions both sides
    are the same float division, so the cut is exact. -ngl counts every layer and the output layer, as in
    llama.cpp; the head and the output layer are always offloaded here."""
    n_head = n_mtp + 1
    if n_gpu_layers < 0:  # llama.cpp: a negative -ngl offloads every layer
        n_gpu_layers = n_layer_all + 1
    ngl = min(max(n_gpu_layers, n_head), n_layer_all + 1)
    n_trunk_off = ngl - n_head
    others = [d for d in trunk if d.ptr != draft.ptr]
    same = len(others) != len(trunk)  # the draft device also takes trunk layers
    weights = list(split) if split is not None else [float(d.free or 1) for d in trunk]
    weights += [0.0] * (len(trunk) - len(weights))
    w_draft = sum(w for d, w in zip(trunk, weights) if d.ptr == draft.ptr)
    w = [w for d, w in zip(trunk, weights) if d.ptr != draft.ptr] + ([w_draft] if same else [])
    order = others + ([draft] if same else [])
    counts = [0] * len(order)
    if n_trunk_off > 0 and order:
        if not any(w):
            raise GgufMtpError("--tensor-split gives the trunk's devices no layers")
        cum, tot = [], 0.0
        for x in w:
            tot += x
            cum.append(tot / sum(w))
        for j in range(n_trunk_off):  # llama.cpp's rule, on the trunk's layers alone
            counts[next((i for i, c in enumerate(cum) if c > j / n_trunk_off), len(cum) - 1)] += 1
    elif n_trunk_off > 0:  # --device none for the trunk: it stays on the CPU
        ngl = n_head
    if same:
        counts[-1] += n_head
        return order, [float(c) for c in counts], ngl
    return order + [draft], [float(c) for c in counts] + [float(n_head)], ngl


# -- RPC ------------------------------------------------------------------------------------------
def rpc_supported() -> bool:
    import llama_cpp as ll

    return bool(ll.llama_supports_rpc())


def probe_rpc(host: str, port: int, timeout: float = RPC_PROBE_TIMEOUT) -> tuple[int, int, int]:
    """Connect and do ggml-rpc's HELLO within ``timeout``; the server's protocol version. ggml's own client
    aborts the process when it cannot connect and waits forever on a peer that does not answer, so every
    server is probed first."""
    ep = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack("<BQ", _RPC_HELLO, _RPC_CAPS) + bytes(_RPC_CAPS))
            data = b""
            while len(data) < 8 + 4 + _RPC_CAPS:
                chunk = s.recv(8 + 4 + _RPC_CAPS - len(data))
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
    if len(data) < 12 or struct.unpack_from("<Q", data)[0] != 4 + _RPC_CAPS:
        raise GgufMtpError(f"--rpc {ep}: the server does not speak ggml's RPC protocol (no HELLO reply)")
    major, minor, patch = data[8], data[9], data[10]
    if major != _RPC_MAJOR or minor > _RPC_MINOR:
        raise GgufMtpError(f"--rpc {ep}: RPC protocol {major}.{minor}.{patch}, "
                           f"this build speaks {_RPC_MAJOR}.{_RPC_MINOR}.x; "
                           "build both sides from the same llama.cpp version")
    return major, minor, patch


def add_rpc_servers(endpoints: list[tuple[str, int]], timeout: float = RPC_PROBE_TIMEOUT) -> list[Device]:
    """Register each server's devices (RPC0, RPC1, ...) in ggml's registry, as llama.cpp's --rpc; probed first.
    Registration is for the whole process; a server already added is not added twice. A server that breaks
    later ends the process with one line naming it (see :mod:`.rpc_abort`)."""
    if not rpc_supported():
        raise GgufMtpError("--rpc: this llama-cpp-python build has no RPC backend; rebuild it with "
                           "CMAKE_ARGS=\"-DGGML_RPC=ON\" bash scripts/setup.sh (the default build includes it)")
    g = ggml()
    add = g.proc("RPC", "ggml_backend_rpc_add_server")
    if not add:
        raise GgufMtpError("--rpc: the RPC backend does not export ggml_backend_rpc_add_server")
    add_fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(add)
    for host, port in endpoints:
        ep = f"{host}:{port}"
        if ep in _rpc_added:
            continue
        probe_rpc(host, port, timeout)
        rpc_abort.watch_clients([(host, port)])  # from here on a broken server is one line, not ggml's abort
        reg = add_fn(ep.encode())
        if not reg:
            raise GgufMtpError(f"--rpc {ep}: the server reports no devices")
        g.lib.ggml_backend_register(reg)
        _rpc_added.add(ep)
    return [d for d in devices() if d.backend == "RPC"]


def rpc_cache_dir() -> Path:
    """llama.cpp's rpc-server --cache folder: $LLAMA_CACHE/rpc, else $XDG_CACHE_HOME or ~/.cache, /llama.cpp/rpc."""
    import os

    base = os.environ.get("LLAMA_CACHE")
    if base:
        return Path(base) / "rpc"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llama.cpp" / "rpc"


def serve_rpc(host: str, port: int, names: list[str] | None = None, threads: int | None = None,
              cache: bool = False, on_ready: Callable[[list[Device]], None] | None = None) -> None:
    """ggml's own RPC server (ggml_backend_rpc_start_server, what llama.cpp's rpc-server runs) on host:port,
    serving ``names`` (default: the accelerators, else the CPU). Blocks until interrupted; the server runs
    on a thread so Ctrl-C reaches Python. It has no authentication: bind to a trusted network only."""
    import os
    import threading

    if not rpc_supported():
        raise GgufMtpError("rpc-server: this llama-cpp-python build has no RPC backend; rebuild it with "
                           "CMAKE_ARGS=\"-DGGML_RPC=ON\" bash scripts/setup.sh (the default build includes it)")
    g = ggml()
    if names:
        devs = []
        for n in names:
            ptr = g.lib.ggml_backend_dev_by_name(n.encode())
            if not ptr:
                have = ", ".join(d.name for d in devices())
                raise GgufMtpError(f"rpc-server --device {n}: no such device; this build has {have}")
            devs.append(g.device(ptr))
    else:
        every = devices()
        devs = [d for d in every if d.type not in ("CPU", "ACCEL")] or [d for d in every if d.type == "CPU"][:1]
    if not devs:
        raise GgufMtpError("rpc-server: no device to serve")
    start = g.proc("RPC", "ggml_backend_rpc_start_server")
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
    cdir = None
    if cache:
        d = rpc_cache_dir()
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise GgufMtpError(f"rpc-server --cache: cannot create {d} ({e.strerror or e})") from None
        cdir = str(d).encode()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                          ctypes.POINTER(ctypes.c_void_p))(start)
    arr = (ctypes.c_void_p * len(devs))(*[d.ptr for d in devs])
    n_threads = threads or max(1, (os.cpu_count() or 2) // 2)
    rpc_abort.watch_server(host, port)  # ggml aborting while serving: one line and exit 2, not SIGABRT
    t = threading.Thread(target=fn, args=(f"{host}:{port}".encode(), cdir, n_threads, len(devs), arr), daemon=True)
    t.start()
    if on_ready:
        on_ready(devs)
    while t.is_alive():
        t.join(0.25)
    raise GgufMtpError(f"rpc-server: the server on {host}:{port} stopped (see ggml's message above)")
