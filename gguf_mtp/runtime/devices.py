"""The devices of the llama.cpp build this process loaded, read from ggml's registry (``backends.Registry``
through libllama's handle): names resolved as llama.cpp's ``--device`` does, the devices a run uses, and the
lines `run` and `serve` print about them ("CUDA0: NVIDIA H100 ...", as llama.cpp does), so a -ngl that has no
GPU to go to is a note rather than a silent CPU run."""

from __future__ import annotations

import re
from pathlib import Path

from .. import backends
from ..backends import Device
from ..errors import GgufMtpError
from . import llama


def lib_dir() -> Path:
    """The folder llama-cpp-python loaded its libraries from (LLAMA_CPP_LIB_PATH when set)."""
    import llama_cpp.llama_cpp as llama_cpp_lib

    base = getattr(llama_cpp_lib, "_base_path", None)
    return Path(base) if base else Path(llama_cpp_lib.__file__).parent / "lib"


def available() -> list[Device]:
    """Every device of the build (RPC servers once added), in ggml's order."""
    return llama.registry().devices()


def default_offload(devices: list[Device] | None = None) -> list[Device]:
    """The devices llama.cpp offloads to when none are named (``backends.default_devices``)."""
    return backends.default_devices(available() if devices is None else devices)


def resolve(names: list[str] | None, option: str = "--device") -> list[Device]:
    """Device names -> devices, as llama.cpp's parse_device_list: each must exist and not be the CPU. None:
    llama.cpp's default devices."""
    if names is None:
        return default_offload()
    registry, out = llama.registry(), []
    for n in names:
        d = registry.by_name(n)
        if d is None or d.type == "CPU":
            have = ", ".join(x.name for x in available() if x.type not in ("CPU", "ACCEL")) or "none"
            why = ("is the CPU, which holds whatever is not offloaded (use -ngl, or --device none)" if d
                   else "does not exist")
            raise GgufMtpError(f"{option} {n}: the device {why}; offload devices of this build: {have} "
                               f"(see --list-devices; RPC devices appear after --rpc)")
        if d in out:
            raise GgufMtpError(f"{option}: {n} is named twice")
        out.append(d)
    return out


def used(n_gpu_layers: int, devices: list[Device] | None = None) -> list[Device]:
    """The devices llama.cpp puts a model on without named devices: its default offload devices when layers
    are offloaded, and the CPU."""
    devs = available() if devices is None else devices
    return (backends.default_devices(devs) if n_gpu_layers > 0 else []) + [d for d in devs
                                                                          if d.type in ("CPU", "ACCEL")]


def _short(d: Device, amx_off: bool = False) -> str:
    if d.type not in ("CPU", "ACCEL"):
        return d.label()
    if d.type == "CPU" and amx_off:
        return (f"{d.name}: {d.description} (AMX kernels off: ggml-org/llama.cpp#20824; "
                f"{llama.AMX_ENV}=1 keeps them)")
    return f"{d.name}: {d.description}"


def startup_line(n_gpu_layers: int, devices: list[Device] | None = None) -> str:
    """One line for start-up: ``devices: CUDA0: NVIDIA H100 80GB HBM3 (81559 MiB, 80987 MiB free), CPU: ...
    (-ngl 99)``."""
    devs = available() if devices is None else devices
    use = used(n_gpu_layers, devs)
    amx_off = devices is None and llama.amx_off()  # a fact of this machine's build: said of its own devices only
    line = "devices: " + ", ".join(_short(d, amx_off) for d in use)
    idle = [d.name for d in devs if d.type in ("GPU", "IGPU") and d not in use]
    if n_gpu_layers > 0 and len(use) > 1:
        line += f" (-ngl {n_gpu_layers})"
    elif idle:
        line += f" (-ngl 0: nothing offloaded to {', '.join(idle)})"
    return line


def offload_note(n_gpu_layers: int, devices: list[Device] | None = None) -> str | None:
    """A note when layers are to be offloaded but the build has no GPU device to take them, else None."""
    if n_gpu_layers <= 0:
        return None
    devs = available() if devices is None else devices
    if any(d.type in ("GPU", "IGPU") for d in devs):
        return None
    built = backends.local_gpu(backends.files_present(lib_dir()))
    if built:
        names = "/".join(built)
        why = next((s.strip() for s in reversed(llama._log)
                    if any(re.search(b[:4], s, re.I) for b in built) and s.strip()), "")
        return (f"-ngl {n_gpu_layers}: the {names} backend found no device" + (f" ({why[-160:]})" if why else "")
                + "; running on the CPU")
    return (f"-ngl {n_gpu_layers}: this llama-cpp-python build has no GPU backend, running on the CPU; "
            f"build one with CMAKE_ARGS=\"-DGGML_CUDA=on\" (or \"-DGGML_VULKAN=on\") bash scripts/setup.sh")


def listing(devices: list[Device] | None = None) -> str:
    """``--list-devices``: llama.cpp's format, plus the CPU."""
    devs = available() if devices is None else devices
    return "\n".join(["Available devices:", *([f"  {d.label()}" for d in devs] or ["  (none)"])])
