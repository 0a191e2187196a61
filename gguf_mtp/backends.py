"""Which ggml backends a llama-cpp-python build holds, whether it is the build CMAKE_ARGS asked for, and
what a backend needs before a long build.

scripts/setup.sh runs this file by path (``python gguf_mtp/backends.py check-wheel W --cmake-args "$A"``),
before the package is installed, so it imports nothing but the standard library. A wheel is judged by
loading its libraries in a fresh process (a second copy of libggml in one process would resolve to the
first) and asking ggml's own backend registry: the backend's library must be in the wheel, export its
registration function and load. Whether a device is visible is reported, not required (build machines
often have none), unless ``--require-device``.

The registry is read with the one wrapper of ggml's device registry (:class:`Registry`, :class:`Device`,
llama.cpp's default device rule :func:`default_devices`), which the runtime uses too, on the llama.cpp it
loaded (runtime/devices.py).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]  # run by path: no module of this folder may shadow one of the standard library

import argparse
import ctypes
import json
import re
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class Backend:
    option: str  # CMake option that turns it on
    name: str  # ggml's registry name (device names are this + an index: CUDA0, Vulkan0)
    lib: str  # its shared library in llama_cpp/lib (lib<lib>.so)
    reg: str  # its registration function
    gpu: bool  # offloads layers (-ngl)
    remote: bool = False  # its devices are other machines', present only once servers are named (--rpc)


# One row per backend llama-cpp-python can be built with on Linux (ggml/src/CMakeLists.txt, ggml-*.h).
BACKENDS: tuple[Backend, ...] = (
    Backend("GGML_CUDA", "CUDA", "ggml-cuda", "ggml_backend_cuda_reg", True),
    Backend("GGML_HIP", "ROCm", "ggml-hip", "ggml_backend_cuda_reg", True),
    Backend("GGML_MUSA", "MUSA", "ggml-musa", "ggml_backend_cuda_reg", True),
    Backend("GGML_VULKAN", "Vulkan", "ggml-vulkan", "ggml_backend_vk_reg", True),
    Backend("GGML_SYCL", "SYCL", "ggml-sycl", "ggml_backend_sycl_reg", True),
    Backend("GGML_OPENCL", "OpenCL", "ggml-opencl", "ggml_backend_opencl_reg", True),
    Backend("GGML_RPC", "RPC", "ggml-rpc", "ggml_backend_rpc_reg", True, remote=True),
    Backend("GGML_BLAS", "BLAS", "ggml-blas", "ggml_backend_blas_reg", False),
)
CPU = Backend("", "CPU", "ggml-cpu", "ggml_backend_cpu_reg", False)
DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")  # enum ggml_backend_dev_type
_TRUE = {"on", "1", "yes", "true", "y"}
MiB = 1024 * 1024
_LIB_NAME = re.compile(r"^lib[A-Za-z0-9_.+-]+\.so(\.[0-9]+)*$")
MAX_LIB_BYTES = 4 << 30  # one library of a wheel; CUDA fat binaries stay well below


def _defines(cmake_args: str) -> list[tuple[str, str]]:
    """(name, value) of every ``-D<name>[:TYPE]=<value>`` in ``CMAKE_ARGS``, in order."""
    try:
        words = shlex.split(cmake_args)
    except ValueError:
        words = cmake_args.split()
    return [(m.group(1), m.group(2)) for w in words
            if (m := re.fullmatch(r"-D([A-Za-z0-9_]+)(?::[A-Za-z]+)?=(.*)", w))]


def requested(cmake_args: str) -> list[Backend]:
    """The backends ``CMAKE_ARGS`` turns on (``-DGGML_VULKAN=on``, ``-DGGML_CUDA:BOOL=ON``; the last setting
    of an option wins, as in CMake). The CPU backend is always built and not listed."""
    state = {name.upper(): value.strip().lower() in _TRUE for name, value in _defines(cmake_args)}
    return [b for b in BACKENDS if state.get(b.option)]


def cmake_define(cmake_args: str, name: str) -> str | None:
    """The value ``CMAKE_ARGS`` gives ``-D<name>`` (the last one), or None."""
    return next((v for n, v in reversed(_defines(cmake_args)) if n == name), None)


# ------------------------------------------------------------------------------ ggml's device registry
# The one wrapper of ggml's device registry, its Device and llama.cpp's default device rule: the build check
# below reads a wheel's registry with them, and the runtime (runtime/devices.py) the registry of the
# llama.cpp it loaded.

@dataclass(frozen=True)
class Device:
    name: str  # CUDA0, Vulkan1, RPC0, CPU
    description: str
    type: str  # CPU, GPU, IGPU, ACCEL
    backend: str  # its registry: CUDA, Vulkan, RPC, CPU
    total: int  # bytes
    free: int
    ptr: int = field(default=0, repr=False, compare=False)  # its ggml_backend_dev_t in the process that read it
    device_id: str = ""  # the PCI bus id (0000:c1:00.0) a backend reports, "" when unknown

    def label(self) -> str:
        """llama.cpp's --list-devices line: ``CUDA0: NVIDIA H100 80GB HBM3 (81559 MiB, 80987 MiB free)``."""
        return f"{self.name}: {self.description} ({self.total // MiB} MiB, {self.free // MiB} MiB free)"


def default_devices(devices: Sequence[Device]) -> list[Device]:
    """The devices llama.cpp offloads a model to when none are named (``llama_prepare_model_devices`` in its
    src/llama.cpp): RPC servers first (fewer transfers over the network), then the discrete GPUs, and the
    integrated GPUs (of the first one's backend) only when there is no local discrete GPU; a card two backends
    report under one PCI id is taken once. The CPU is not in the list: it holds whatever is not offloaded."""
    rpc = [d for d in devices if d.type == "GPU" and d.backend == "RPC"]
    gpus: list[Device] = []
    for d in devices:  # a GPU two backends see (CUDA0 and Vulkan0 of one card) is used once, by the first
        if d.type == "GPU" and d.backend != "RPC" and not (
                d.device_id and any(g.device_id == d.device_id for g in gpus)):
            gpus.append(d)
    igpus = [d for d in devices if d.type == "IGPU"]
    return rpc + (gpus or [d for d in igpus if d.backend == igpus[0].backend])


@dataclass
class Probe:
    """What a build's libraries hold, as its own ggml registry reports it."""

    libdir: str
    files: list[str] = field(default_factory=list)  # backend names whose library is in libdir
    compiled: list[str] = field(default_factory=list)  # ... and whose registration function resolves
    registries: list[str] = field(default_factory=list)  # registered backends (a driverless Vulkan is absent)
    devices: list[Device] = field(default_factory=list)
    gpu_offload: bool = False
    error: str | None = None  # the libraries could not be loaded at all
    log: list[str] = field(default_factory=list)  # ggml's own messages while probing (why a device is missing)

    def has(self, name: str) -> bool:
        return name in self.compiled

    def devices_of(self, name: str) -> list[Device]:
        return [d for d in self.devices if d.backend == name]


def _text(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", "replace")


class _DeviceProps(ctypes.Structure):
    """struct ggml_backend_dev_props (ggml-backend.h), with room for fields a later ggml adds at its end."""

    _fields_ = [("name", ctypes.c_char_p), ("description", ctypes.c_char_p), ("memory_free", ctypes.c_size_t),
                ("memory_total", ctypes.c_size_t), ("type", ctypes.c_int), ("device_id", ctypes.c_char_p),
                ("caps", ctypes.c_bool * 5), ("_room", ctypes.c_byte * 256)]


class _InitParams(ctypes.Structure):
    """struct ggml_init_params (ggml.h)."""

    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


GGML_TYPE_I32 = 26  # enum ggml_type


class Registry:
    """ctypes over libggml's backend registry (ggml-backend.h). ``lib`` is a loaded libggml (any handle
    whose dependencies include libggml-base)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        for fn, res, args in (
            ("ggml_backend_reg_count", sz, []), ("ggml_backend_reg_get", vp, [sz]),
            ("ggml_backend_reg_name", cp, [vp]), ("ggml_backend_reg_by_name", vp, [cp]),
            ("ggml_backend_reg_get_proc_address", vp, [vp, cp]), ("ggml_backend_register", None, [vp]),
            ("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_by_name", vp, [cp]), ("ggml_backend_dev_name", cp, [vp]),
            ("ggml_backend_dev_description", cp, [vp]), ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_backend_reg", vp, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
            ("ggml_backend_buft_name", cp, [vp]),
            ("ggml_backend_dev_get_props", None, [vp, ctypes.POINTER(_DeviceProps)]),
            ("ggml_backend_dev_buffer_type", vp, [vp]), ("ggml_backend_dev_supports_op", ctypes.c_bool, [vp, vp]),
            ("ggml_init", vp, [_InitParams]), ("ggml_free", None, [vp]),
            ("ggml_new_tensor_2d", vp, [vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]),
            ("ggml_new_tensor_1d", vp, [vp, ctypes.c_int, ctypes.c_int64]), ("ggml_get_rows", vp, [vp, vp, vp]),
        ):
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args

    def registries(self) -> list[str]:
        return [_text(self.lib.ggml_backend_reg_name(self.lib.ggml_backend_reg_get(i)))
                for i in range(self.lib.ggml_backend_reg_count())]

    def device(self, ptr: int) -> Device:
        """The device behind a ggml_backend_dev_t."""
        lib = self.lib
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(ptr, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(ptr)
        reg = lib.ggml_backend_dev_backend_reg(ptr)
        props = _DeviceProps()
        lib.ggml_backend_dev_get_props(ptr, ctypes.byref(props))
        return Device(_text(lib.ggml_backend_dev_name(ptr)), _text(lib.ggml_backend_dev_description(ptr)).strip(),
                      DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else str(kind),
                      _text(lib.ggml_backend_reg_name(reg)) if reg else "", total.value, free.value, ptr,
                      _text(props.device_id))

    def devices(self) -> list[Device]:
        """Every device, in the registry's order."""
        return [self.device(self.lib.ggml_backend_dev_get(i)) for i in range(self.lib.ggml_backend_dev_count())]

    def by_name(self, name: str) -> Device | None:
        ptr = self.lib.ggml_backend_dev_by_name(name.encode())
        return self.device(ptr) if ptr else None

    def buffer_type(self, device: Device) -> int:
        """The device's own buffer type (``ggml_backend_dev_buffer_type``): where llama.cpp puts the weights it
        offloads to it."""
        return int(self.lib.ggml_backend_dev_buffer_type(device.ptr) or 0)

    def supports_get_rows(self, device: Device, ggml_type: int, n_cols: int, n_rows: int) -> bool:
        """Whether ``device`` runs a row lookup in an ``n_rows`` x ``n_cols`` table of ``ggml_type`` (a token
        embedding), asked of the backend itself on a tensor without data (``ggml_backend_dev_supports_op``)."""
        lib = self.lib
        ctx = lib.ggml_init(_InitParams(1 << 16, None, True))
        if not ctx:
            return False
        try:
            table = lib.ggml_new_tensor_2d(ctx, ggml_type, n_cols, n_rows)
            ids = lib.ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1)
            op = lib.ggml_get_rows(ctx, table, ids) if table and ids else None
            return bool(op and lib.ggml_backend_dev_supports_op(device.ptr, op))
        finally:
            lib.ggml_free(ctx)

    def function(self, registry: str, name: str) -> int | None:
        """The address of a function a backend exports through its registry (``ggml_backend_rpc_add_server``),
        or None when the backend or the function is missing."""
        reg = self.lib.ggml_backend_reg_by_name(registry.encode())
        if not reg:
            return None
        return self.lib.ggml_backend_reg_get_proc_address(reg, name.encode()) or None

    def register(self, reg: int) -> None:
        """Add a backend registry (an RPC server's) to ggml's, for the rest of the process."""
        self.lib.ggml_backend_register(reg)

    def extra_buffer_types(self, device: str) -> list[str]:
        """Names of the extra weight buffer types ``device`` offers (the CPU's ``CPU_REPACK``, ``AMX``, ...):
        where llama.cpp puts weights it repacks for other kernels, unless ``use_extra_bufts`` is off."""
        d = self.lib.ggml_backend_dev_by_name(device.encode())
        if not d:
            return []
        fn = self.lib.ggml_backend_reg_get_proc_address(self.lib.ggml_backend_dev_backend_reg(d),
                                                        b"ggml_backend_dev_get_extra_bufts")
        if not fn:
            return []
        bufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(fn)(d)
        out, j = [], 0
        while bufts and bufts[j]:
            out.append(_text(self.lib.ggml_backend_buft_name(bufts[j])))
            j += 1
        return out


def _lib_file(libdir: Path, stem: str) -> Path | None:
    for p in (libdir / f"lib{stem}.so", *sorted(libdir.glob(f"lib{stem}.so.*"))):
        if p.is_file():
            return p
    return None


def files_present(libdir: Path) -> list[str]:
    """Backends whose library file is in ``libdir`` (no loading: safe in any process)."""
    return [b.name for b in (CPU, *BACKENDS) if _lib_file(libdir, b.lib)]


def local_gpu(names: Sequence[str]) -> list[str]:
    """The backends among ``names`` that offload to a device on this machine. Remote ones (RPC) are left out: their
    devices exist only once servers are named (``--rpc``), so a CPU+RPC build runs on the CPU until then."""
    return [b.name for b in BACKENDS if b.gpu and not b.remote and b.name in names]


def _loaded_from_elsewhere(libdir: Path) -> list[str]:
    """libggml*/libllama* mapped into this process from outside ``libdir`` (LD_LIBRARY_PATH or a preload
    won over the wheel's RUNPATH)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    real = os.path.realpath(libdir)
    seen = {ln.split()[-1] for ln in maps if re.search(r"/lib(ggml|llama)[^/]*\.so", ln)}
    return sorted(p for p in seen if os.path.dirname(os.path.realpath(p)) != real)


def probe(libdir: str | os.PathLike[str]) -> Probe:
    """Load the build in ``libdir`` into *this* process and read its registry. Use :func:`probe_isolated`
    unless this process has no other copy of llama.cpp loaded."""
    d = Path(libdir)
    pr = Probe(str(d), files=files_present(d))
    llama = _lib_file(d, "llama")
    if llama is None:
        pr.error = f"no libllama.so in {d}"
        return pr
    try:
        lib = ctypes.CDLL(str(llama))
        ggml = ctypes.CDLL(str(_lib_file(d, "ggml") or llama))
    except OSError as e:
        pr.error = f"the libraries do not load: {e}"
        return pr
    elsewhere = _loaded_from_elsewhere(d)
    if elsewhere:
        pr.error = f"another copy of llama.cpp was loaded instead ({', '.join(elsewhere)}): unset LD_LIBRARY_PATH?"
        return pr
    for b in (CPU, *BACKENDS):
        if b.name not in pr.files:
            continue
        if hasattr(ggml, b.reg):  # linked into libggml (the usual build)
            pr.compiled.append(b.name)
            continue
        try:  # GGML_BACKEND_DL builds: a module loaded at run time
            if hasattr(ctypes.CDLL(str(_lib_file(d, b.lib))), "ggml_backend_init"):
                pr.compiled.append(b.name)
                ggml.ggml_backend_load.argtypes, ggml.ggml_backend_load.restype = [ctypes.c_char_p], ctypes.c_void_p
                ggml.ggml_backend_load(str(_lib_file(d, b.lib)).encode())
        except (OSError, AttributeError) as e:
            pr.log.append(f"lib{b.lib}.so: {e}")
    registry = Registry(ggml)
    pr.registries = registry.registries()
    pr.devices = registry.devices()
    f = lib.llama_supports_gpu_offload
    f.restype, f.argtypes = ctypes.c_bool, []
    pr.gpu_offload = bool(f())
    return pr


def probe_isolated(libdir: str | os.PathLike[str], timeout: float = 300) -> Probe:
    """:func:`probe` in a fresh Python process: a library that crashes or hangs on load becomes an error,
    and ggml's messages (why a backend saw no device) are kept."""
    cmd = [sys.executable, os.path.abspath(__file__), "probe", str(libdir)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return Probe(str(libdir), files=files_present(Path(libdir)),
                     error=f"loading the libraries took over {timeout:.0f} s")
    log = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
    if r.returncode != 0:
        why = f"signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}"
        tail = next((ln for ln in reversed(log) if ln), "")
        return Probe(str(libdir), files=files_present(Path(libdir)),
                     error=f"loading the libraries failed ({why})" + (f": {tail[-300:]}" if tail else ""),
                     log=log[-20:])
    try:
        d = json.loads(r.stdout.strip().splitlines()[-1])
        pr = Probe(**{k: v for k, v in d.items() if k != "devices"}, devices=[Device(**x) for x in d["devices"]])
    except (ValueError, IndexError, TypeError, KeyError) as e:
        return Probe(str(libdir), files=files_present(Path(libdir)), error=f"the probe printed no result ({e})",
                     log=log[-20:])
    pr.log = pr.log + log[-20:]
    return pr


# ----------------------------------------------------------------------------------------------- wheels

class WheelError(Exception):
    """The file is not a usable llama-cpp-python wheel."""


def extract_libs(wheel: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """Copy the wheel's ``llama_cpp/lib/lib*.so*`` into ``dest`` (nothing else, no names with folders) and
    return that folder. Sizes are checked against the free space before writing."""
    w, out = Path(wheel), Path(dest)
    try:
        zf = zipfile.ZipFile(w)
    except (zipfile.BadZipFile, OSError) as e:
        raise WheelError(f"{w}: not a wheel ({e})") from None
    with zf:
        picks = []
        for info in zf.infolist():
            parts = info.filename.split("/")
            if (len(parts) == 3 and parts[:2] == ["llama_cpp", "lib"] and _LIB_NAME.match(parts[2])
                    and not info.is_dir()):
                if info.file_size > MAX_LIB_BYTES:
                    raise WheelError(f"{w}: {info.filename} claims {info.file_size} bytes, more than a library can be")
                picks.append((info, parts[2]))
        if not any(re.match(r"libllama\.so", n) for _, n in picks):
            raise WheelError(f"{w}: no llama_cpp/lib/libllama.so inside: not a llama-cpp-python wheel")
        need = sum(i.file_size for i, _ in picks)
        out.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(out).free < need + (64 << 20):
            raise WheelError(f"{w}: {need // MiB} MiB of libraries do not fit in {out} (set TMPDIR to a larger disk)")
        try:
            for info, name in picks:
                with zf.open(info) as src, open(out / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
            raise WheelError(f"{w}: damaged ({e})") from None
    return out


@dataclass
class Verdict:
    ok: bool
    lines: list[str]  # what to print, one finding a line
    probe: Probe | None = None


def judge(pr: Probe, wanted: Sequence[Backend], what: str, cmake_args: str, require_device: bool = False) -> Verdict:
    """Is the build in ``pr`` the one ``cmake_args`` asked for? ``what`` names it in messages."""
    asked = f"CMAKE_ARGS='{cmake_args}'" if cmake_args.strip() else "a CPU build (empty CMAKE_ARGS)"
    if pr.error:
        return Verdict(False, [f"error: {what}: {pr.error}"], pr)
    lines, ok = [], True
    for b in (CPU, *wanted):
        if b.name in pr.compiled:
            continue
        ok = False
        if b.name in pr.files:
            lines.append(f"error: {what}: lib{b.lib}.so is there but does not provide {b.reg}: a broken {b.name} build")
        else:
            lines.append(f"error: {what} has no {b.name} backend (no lib{b.lib}.so; it has: "
                         f"{', '.join(pr.compiled) or 'nothing'}): not the build {asked} asks for")
    if not ok:
        return Verdict(False, lines, pr)
    for b in wanted:
        devs = pr.devices_of(b.name)
        if devs:
            continue
        if b.remote:  # its devices appear only once servers are named (--rpc)
            if b.name not in pr.registries:
                ok = False
                lines.append(f"error: {what}: the {b.name} backend did not register")
            continue
        hint = next((ln for ln in reversed(pr.log) if re.search(b.name[:4], ln, re.I)), "")
        state = "registered" if b.name in pr.registries else "did not register"
        msg = (f"{what} has the {b.name} backend, but it {state} with no device on this machine"
               + (f" (ggml: {hint[-200:]})" if hint else "")
               + ("; a GPU is needed to check further" if not require_device else ""))
        if require_device:
            ok = False
            lines.append(f"error: {msg}")
        else:
            lines.append(f"warning: {msg}")
    dev_list = ", ".join(f"{d.name} ({d.description})" for d in pr.devices) or "none"
    # llama_supports_gpu_offload() is true for a CPU build with RPC: its layers go to other machines only
    local = any(b.gpu and not b.remote and b.name in pr.compiled for b in BACKENDS)
    offload = "no" if not pr.gpu_offload else "yes" if local else "to RPC servers only"
    lines.insert(0, f"{what}: backends {', '.join(pr.compiled)}; devices {dev_list}; GPU offload {offload}")
    return Verdict(ok, lines, pr)


def check_wheel(wheel: str | os.PathLike[str], cmake_args: str, require_device: bool = False) -> Verdict:
    """Unpack the wheel's libraries into a throwaway folder, probe them in a fresh process, judge."""
    name = Path(wheel).name
    with tempfile.TemporaryDirectory(prefix="gguf-mtp-wheel-") as tmp:
        try:
            libdir = extract_libs(wheel, Path(tmp) / "lib")
        except WheelError as e:
            return Verdict(False, [f"error: {e}"])
        return judge(probe_isolated(libdir), requested(cmake_args), name, cmake_args, require_device)


def installed_libdir(python: str | None = None) -> Path | None:
    """llama_cpp/lib of the llama-cpp-python that ``python`` (default: this one) would import, found
    without importing it."""
    code = ("import importlib.util as u, os; s = u.find_spec('llama_cpp'); "
            "print(os.path.join(os.path.dirname(s.origin), 'lib') if s and s.origin else '')")
    if python is None:
        import importlib.util

        s = importlib.util.find_spec("llama_cpp")
        return Path(s.origin).parent / "lib" if s and s.origin else None
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return Path(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None


# -------------------------------------------------------------------------------------- prerequisites

# Where each prerequisite comes from: Debian/Ubuntu package, and what the Vulkan SDK route provides.
PACKAGES = {
    "nvcc": "the CUDA toolkit: NVIDIA's apt repository (cuda-toolkit-12-8 or newer; "
            "https://developer.nvidia.com/cuda-downloads) or Debian/Ubuntu's nvidia-cuda-toolkit",
    "vulkan_core.h": "libvulkan-dev",
    "libvulkan.so": "libvulkan-dev",
    "glslc": "glslc",
    "SPIRV-Headers": "spirv-headers",
}
VULKAN_SDK_NOTE = ("or the LunarG Vulkan SDK (https://vulkan.lunarg.com/sdk/home: headers, loader, glslc and "
                   "SPIRV-Headers in one; `source <sdk>/setup-env.sh` sets VULKAN_SDK)")
ROOTS = ("/usr/local", "/usr")


def _multiarch() -> list[str]:
    ma = sysconfig.get_config_var("MULTIARCH") or ""
    import platform

    return [x for x in dict.fromkeys((ma, f"{platform.machine()}-linux-gnu")) if x]


def _paths(env: Mapping[str, str], var: str) -> list[Path]:
    return [Path(p) for p in env.get(var, "").split(os.pathsep) if p]


def _which(prog: str, env: Mapping[str, str], extra: Sequence[Path] = ()) -> Path | None:
    for d in (*extra, *_paths(env, "PATH")):
        p = d / prog
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def _vulkan(env: Mapping[str, str], roots: Sequence[str]) -> tuple[list[str], list[str]]:
    sdk = [Path(env["VULKAN_SDK"])] if env.get("VULKAN_SDK") else []
    ma = _multiarch()
    inc = [*(s / "include" for s in sdk), *_paths(env, "CPLUS_INCLUDE_PATH"), *_paths(env, "CPATH"),
           *(Path(r) / "include" for r in roots)]
    libs = [*(s / d for s in sdk for d in ("lib", "lib64")), *_paths(env, "LIBRARY_PATH"),
            *(Path(r) / d for r in roots for d in ("lib", "lib64", *(f"lib/{m}" for m in ma)))]
    prefixes = [*sdk, *_paths(env, "CMAKE_PREFIX_PATH"), *(p.parent for p in _paths(env, "PATH")), *map(Path, roots)]
    found = {
        "vulkan_core.h": next((d / "vulkan" / "vulkan_core.h" for d in inc
                               if (d / "vulkan" / "vulkan_core.h").is_file()), None),
        "libvulkan.so": next((d / "libvulkan.so" for d in libs if (d / "libvulkan.so").exists()), None),
        "glslc": _which("glslc", env, [s / "bin" for s in sdk]),
        "SPIRV-Headers": _spirv_config(prefixes, env, ma),
    }
    missing = [k for k, v in found.items() if v is None]
    if not missing:
        return [], []
    pkgs = " ".join(dict.fromkeys(PACKAGES[k] for k in missing))
    return [f"Vulkan build: {', '.join(missing)} not found; Debian/Ubuntu: sudo apt-get install {pkgs} "
            f"(a driver to run it: NVIDIA's comes with its driver, mesa-vulkan-drivers has AMD's, Intel's and the "
            f"lavapipe CPU driver), {VULKAN_SDK_NOTE}"], []


def _spirv_config(prefixes: Sequence[Path], env: Mapping[str, str], ma: Sequence[str]) -> Path | None:
    """CMake's config-mode search for SPIRV-Headers (find_package(SPIRV-Headers CONFIG)), in the places
    distributions and the SDK use."""
    names = ("SPIRV-HeadersConfig.cmake", "spirv-headers-config.cmake")
    dirs = [Path(env["SPIRV-Headers_DIR"])] if env.get("SPIRV-Headers_DIR") else []
    for p in prefixes:
        for sub in ("share/cmake", "lib/cmake", "lib64/cmake", *(f"lib/{m}/cmake" for m in ma), "share"):
            base = p / sub
            if base.is_dir():
                dirs += sorted(base.glob("[Ss][Pp][Ii][Rr][Vv]-[Hh]eaders*"))
    for d in dirs:
        for n in names:
            for cand in (d / n, d / "cmake" / n):
                if cand.is_file():
                    return cand
    return None


def _gpus_visible(env: Mapping[str, str]) -> int | None:
    """NVIDIA GPUs nvidia-smi lists, or None when it cannot tell."""
    smi = _which("nvidia-smi", env)
    if smi is None:
        return None
    try:
        r = subprocess.run([str(smi), "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(ln.startswith("GPU ") for ln in r.stdout.splitlines()) if r.returncode == 0 else 0


def _cuda(cmake_args: str, env: Mapping[str, str], gpus: int | None) -> tuple[list[str], list[str]]:
    errors, warnings = [], []
    cxx = env.get("CUDACXX") or cmake_define(cmake_args, "CMAKE_CUDA_COMPILER")
    if cxx:
        p = Path(cxx)
        if not (p.is_file() and os.access(p, os.X_OK)):
            errors.append(f"CUDA build: CUDACXX/CMAKE_CUDA_COMPILER={cxx} is not an executable nvcc")
    else:
        extra = [Path(env["CUDA_PATH"]) / "bin"] if env.get("CUDA_PATH") else []
        if _which("nvcc", env, extra) is None:
            hint = next((f" (found {c}: export PATH={c.parent}:$PATH or CUDACXX={c})"
                         for c in map(Path, ("/usr/local/cuda/bin/nvcc", "/opt/cuda/bin/nvcc")) if c.is_file()), "")
            errors.append(f"CUDA build: nvcc is not on PATH and CUDACXX is not set{hint}; install {PACKAGES['nvcc']}")
    # llama.cpp builds for "native" (the GPUs visible at build time) unless told otherwise or GGML_NATIVE=OFF
    arch = cmake_define(cmake_args, "CMAKE_CUDA_ARCHITECTURES")
    native_off = (cmake_define(cmake_args, "GGML_NATIVE") or "on").lower() not in _TRUE
    if ((arch or "").lower() == "native" or (arch is None and not native_off)) and not gpus:
        seen = "no GPU is visible (nvidia-smi -L)" if gpus == 0 else "nvidia-smi is not there to find a GPU"
        state = "native" if arch else "not set (llama.cpp then builds for native)"
        warnings.append(f"CUDA build: CMAKE_CUDA_ARCHITECTURES is {state}"
                        f" and {seen}: name the architectures, e.g. -DCMAKE_CUDA_ARCHITECTURES=90 "
                        f"(H100/H200), 89 (RTX 40, L4), 86 (RTX 30, A10), 80 (A100), 120 (RTX 50)")
    return errors, warnings


def prerequisites(cmake_args: str, env: Mapping[str, str] | None = None, roots: Sequence[str] = ROOTS,
                  gpus: int | None | Literal["detect"] = "detect") -> tuple[list[str], list[str]]:
    """(errors, warnings) for building what ``cmake_args`` asks for on this machine, each one line naming
    what is missing and the package that has it."""
    env = os.environ if env is None else env
    errors, warnings = [], []
    if _which("cmake", env) is None:
        warnings.append("cmake is not on PATH: the build fetches one from PyPI (Debian/Ubuntu: apt-get install cmake)")
    if (_which(env.get("CXX", "c++"), env) is None and _which("g++", env) is None
            and not Path(env.get("CXX", "")).is_file()):
        errors.append("no C++ compiler (c++/g++) on PATH: Debian/Ubuntu: sudo apt-get install build-essential")
    names = {b.name for b in requested(cmake_args)}
    if "CUDA" in names:
        e, w = _cuda(cmake_args, env, _gpus_visible(env) if gpus == "detect" else gpus)
        errors += e
        warnings += w
    if "Vulkan" in names:
        e, w = _vulkan(env, roots)
        errors += e
        warnings += w
    return errors, warnings


# ------------------------------------------------------------------------------ sampling in the decode graph
#: back-ends whose devices never get llama.cpp's sampler chains (the chain runs on the host from the logits), why
UNSAFE_DEVICE_SAMPLING = {
    "Vulkan": "re-planning llama.cpp's graphs after a decode, as attaching a sampler does, corrupts memory on Vulkan "
              "(docs/upstream/vulkan-reserve-after-decode.md)",
}
SAMPLING_ENV = "GGUF_MTP_DEVICE_SAMPLING"
SAMPLING_SETTINGS = ("auto", "off", "on")


def host_sampling_reason(offload: Sequence[Device], setting: str | None = None) -> str | None:
    """Why sampler chains must run on the host for a model whose layers go to ``offload``; None: they may run
    inside the decode graph. ``setting`` (``$GGUF_MTP_DEVICE_SAMPLING``): auto (the default: the host where a
    back-end is known to be unsafe), off (the host everywhere), on (the device even there: for checking a fixed
    llama.cpp). ValueError for any other value."""
    s = (setting or "auto").strip().lower()
    if s not in SAMPLING_SETTINGS:
        raise ValueError(f"{SAMPLING_ENV}={setting!r}: one of {', '.join(SAMPLING_SETTINGS)}")
    if s == "off":
        return f"{SAMPLING_ENV}=off"
    if s == "on":
        return None
    bad = [d for d in offload if d.backend in UNSAFE_DEVICE_SAMPLING]
    if not bad:
        return None
    return f"{', '.join(d.name for d in bad)}: {UNSAFE_DEVICE_SAMPLING[bad[0].backend]}; {SAMPLING_ENV}=on overrides"


# --------------------------------------------------------------------------------------------------- CLI

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="backends.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("requested", help="print the backends CMAKE_ARGS turns on")
    p.add_argument("--cmake-args", default="", help="write it as --cmake-args=VALUE (the value starts with -D)")
    for name in ("check-wheel", "check-installed"):
        p = sub.add_parser(name, help="is this the build CMAKE_ARGS asks for? exit 0 yes, 1 no")
        p.add_argument("target", help="a wheel" if name == "check-wheel" else "the python whose llama_cpp to check")
        p.add_argument("--cmake-args", default="")
        p.add_argument("--require-device", action="store_true", help="also fail when the backend sees no device")
    p = sub.add_parser("prereqs",
                       help="what the requested backends need before a build; exit 1 if something is missing")
    p.add_argument("--cmake-args", default="")
    p = sub.add_parser("probe", help="(internal) load LIBDIR in this process, print JSON")
    p.add_argument("libdir")
    p = sub.add_parser("devices", help="list the devices of the build in LIBDIR (default: the installed one)")
    p.add_argument("libdir", nargs="?")
    a = ap.parse_args(argv)
    say = lambda s: print(s, file=sys.stderr)  # noqa: E731

    if a.cmd == "requested":
        print(" ".join(b.name for b in requested(a.cmake_args)))
        return 0
    if a.cmd == "probe":
        found = asdict(probe(a.libdir))
        for d in found["devices"]:
            del d["ptr"]  # an address in this process only
        print(json.dumps(found))
        return 0
    if a.cmd == "prereqs":
        errors, warnings = prerequisites(a.cmake_args)
        for w in warnings:
            say(f"setup: warning: {w}")
        for e in errors:
            say(f"setup: error: {e}")
        return 1 if errors else 0
    if a.cmd in ("check-wheel", "check-installed"):
        if a.cmd == "check-wheel":
            v = check_wheel(a.target, a.cmake_args, a.require_device)
        else:
            libdir = installed_libdir(a.target)
            if libdir is None:
                say(f"setup: error: {a.target} cannot import llama_cpp")
                return 1
            v = judge(probe_isolated(libdir), requested(a.cmake_args), f"installed llama_cpp ({libdir})",
                      a.cmake_args, a.require_device)
        for ln in v.lines:
            say(f"setup: {ln}")
        # 3: the wheel is sound but its libraries do not load on this machine (a missing driver library...)
        return 0 if v.ok else 3 if v.probe is not None and v.probe.error else 1
    if a.cmd == "devices":
        libdir = Path(a.libdir) if a.libdir else installed_libdir()
        if libdir is None:
            say("error: llama_cpp is not installed")
            return 1
        pr = probe_isolated(libdir)
        if pr.error:
            say(f"error: {pr.error}")
            return 1
        print("Available devices:")
        for d in pr.devices:
            print(f"  {d.label()}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
