"""The devices the loaded llama.cpp build offers and which of them a run uses, read from ggml's device
registry, so `run` (and `serve`) can say "CUDA0: NVIDIA H100 ..." as llama.cpp does, and a -ngl that has
no GPU to go to is a note rather than a silent CPU run."""

from __future__ import annotations

import re
from pathlib import Path

from .. import backends as B
from . import llama as L


def lib_dir() -> Path:
    """The folder llama-cpp-python loaded its libraries from (LLAMA_CPP_LIB_PATH when set)."""
    import llama_cpp.llama_cpp as ll

    base = getattr(ll, "_base_path", None)
    return Path(base) if base else Path(ll.__file__).parent / "lib"


def available() -> list[B.Device]:
    """Every device of the build, in ggml's order (GPUs first, the CPU last)."""
    return L.registry().devices()


def used(n_gpu_layers: int, devices: list[B.Device] | None = None) -> list[B.Device]:
    """The devices llama.cpp puts a model on: its GPUs (integrated ones only when there is no discrete
    GPU) when layers are offloaded, and the CPU, as llama_model_load's device selection does."""
    devs = available() if devices is None else devices
    gpus = [d for d in devs if d.type == "GPU"] or [d for d in devs if d.type == "IGPU"]
    return (gpus if n_gpu_layers > 0 else []) + [d for d in devs if d.type in ("CPU", "ACCEL")]


def _short(d: B.Device, amx_off: bool = False) -> str:
    if d.type not in ("CPU", "ACCEL"):
        return d.label()
    if d.type == "CPU" and amx_off:
        return f"{d.name}: {d.description} (AMX kernels off: ggml-org/llama.cpp#20824; {L.AMX_ENV}=1 keeps them)"
    return f"{d.name}: {d.description}"


def startup_line(n_gpu_layers: int, devices: list[B.Device] | None = None) -> str:
    """One line for start-up: ``devices: CUDA0: NVIDIA H100 80GB HBM3 (81559 MiB, 80987 MiB free), CPU: ...
    (-ngl 99)``."""
    devs = available() if devices is None else devices
    use = used(n_gpu_layers, devs)
    amx_off = devices is None and L.amx_off()  # a fact of this machine's build: said of its own devices only
    line = "devices: " + ", ".join(_short(d, amx_off) for d in use)
    idle = [d.name for d in devs if d.type in ("GPU", "IGPU") and d not in use]
    if n_gpu_layers > 0 and len(use) > 1:
        line += f" (-ngl {n_gpu_layers})"
    elif idle:
        line += f" (-ngl 0: nothing offloaded to {', '.join(idle)})"
    return line


def offload_note(n_gpu_layers: int, devices: list[B.Device] | None = None) -> str | None:
    """A note when layers are to be offloaded but the build has no GPU device to take them, else None."""
    if n_gpu_layers <= 0:
        return None
    devs = available() if devices is None else devices
    if any(d.type in ("GPU", "IGPU") for d in devs):
        return None
    built = B.local_gpu(B.files_present(lib_dir()))
    if built:
        names = "/".join(built)
        why = next((s.strip() for s in reversed(L._log)
                    if any(re.search(b[:4], s, re.I) for b in built) and s.strip()), "")
        return (f"-ngl {n_gpu_layers}: the {names} backend found no device" + (f" ({why[-160:]})" if why else "")
                + "; running on the CPU")
    return (f"-ngl {n_gpu_layers}: this llama-cpp-python build has no GPU backend, running on the CPU; "
            f"build one with CMAKE_ARGS=\"-DGGML_CUDA=on\" (or \"-DGGML_VULKAN=on\") bash scripts/setup.sh")


def listing(devices: list[B.Device] | None = None) -> str:
    """``--list-devices``: llama.cpp's format, plus the CPU."""
    devs = available() if devices is None else devices
    return "\n".join(["Available devices:", *([f"  {d.label()}" for d in devs] or ["  (none)"])])
