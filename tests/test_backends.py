"""Which backends a llama-cpp-python build holds (gguf_mtp/backends.py, the check scripts/setup.sh runs before
a wheel enters its cache), what a backend needs before a build, and the devices `gguf-mtp run` reports.

The wheels here are the real CPU build this test run uses, packed as a wheel: labelled as a Vulkan or CUDA
build it must be refused, exactly the silent CPU-under-the-Vulkan-name case setup.sh used to cache."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gguf_mtp
from gguf_mtp import backends
from gguf_mtp.runtime import devices
from gguf_mtp_cli.main import app

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
WHEEL_NAME = "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"


def pack_wheel(path: Path, libdir: Path, extra: dict[str, bytes] | None = None) -> Path:
    """A wheel-shaped zip of a build's llama_cpp/lib (stored, not deflated: fast, and bytes stay in place)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for f in sorted(libdir.iterdir()):
            if f.is_file() and ".so" in f.name:
                z.write(f, f"llama_cpp/lib/{f.name}")
        for name, data in (extra or {}).items():
            z.writestr(name, data)
        z.writestr("llama_cpp_python-0.3.36.dist-info/METADATA", "Name: llama_cpp_python\nVersion: 0.3.36\n")
    return path


@pytest.fixture(scope="session")
def cpu_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build this test run loads, as a wheel: the CPU backend, with or without RPC (setup.sh's default
    adds it; RPC has no device until servers are named, so the build still runs on the CPU only)."""
    libdir = devices.lib_dir()
    if backends.local_gpu(backends.files_present(libdir)):
        pytest.skip(f"the installed llama-cpp-python has a GPU backend ({backends.files_present(libdir)})")
    return pack_wheel(tmp_path_factory.mktemp("whl") / WHEEL_NAME, libdir)


# --- which backends CMAKE_ARGS asks for ------------------------------------------------------------------

@pytest.mark.parametrize("args,want", [
    ("", []),
    ("-DGGML_VULKAN=on", ["Vulkan"]),
    ("-DGGML_VULKAN:BOOL=ON -DCMAKE_CXX_FLAGS=-I/x", ["Vulkan"]),
    ("-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native", ["CUDA"]),
    ("-DGGML_CUDA=1 -DGGML_RPC=ON", ["CUDA", "RPC"]),
    ("-DGGML_VULKAN=on -DGGML_VULKAN=OFF", []),  # the last setting wins, as in CMake
    ("-DGGML_CUDA=off -DGGML_BLAS=yes", ["BLAS"]),
    ("'-DCMAKE_C_FLAGS=-O2 -g' -DGGML_HIP=TRUE", ["ROCm"]),
])
def test_requested_backends(args: str, want: list[str]) -> None:
    assert [b.name for b in backends.requested(args)] == want


# --- the wheel check ---------------------------------------------------------------------------------------

def test_cpu_wheel_passes_as_cpu_build(cpu_wheel: Path) -> None:
    v = backends.check_wheel(cpu_wheel, "")
    assert v.ok, v.lines
    assert v.probe is not None and v.probe.compiled in (["CPU"], ["CPU", "RPC"])
    assert v.probe.gpu_offload == ("RPC" in v.probe.compiled)  # llama.cpp counts RPC as offload-capable
    assert v.probe.compiled == backends.files_present(devices.lib_dir())
    assert [d.name for d in v.probe.devices] == ["CPU"] and v.probe.devices[0].total > 0
    assert "backends CPU" in v.lines[0]
    assert v.lines[0].endswith("GPU offload to RPC servers only" if "RPC" in v.probe.compiled else "GPU offload no")


@pytest.mark.parametrize("args,backend,lib", [("-DGGML_VULKAN=on", "Vulkan", "libggml-vulkan.so"),
                                              ("-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90", "CUDA", "libggml-cuda.so"),
                                              ("-DGGML_RPC=ON", "RPC", "libggml-rpc.so")])
def test_cpu_wheel_labelled_as_gpu_build_is_refused(cpu_wheel: Path, args: str, backend: str, lib: str) -> None:
    v = backends.check_wheel(cpu_wheel, args)
    if backend == "RPC" and "RPC" in backends.files_present(devices.lib_dir()):
        # setup.sh's default build: the RPC backend registers although no server is named yet
        assert v.ok and v.probe is not None and "RPC" in v.probe.registries, v.lines
        assert not [ln for ln in v.lines if ln.startswith(("error", "warning"))], v.lines
        return
    assert not v.ok
    err = next(ln for ln in v.lines if ln.startswith("error:"))
    assert f"no {backend} backend" in err and lib in err and args in err and "it has: CPU" in err


def test_backend_library_that_is_not_one_is_refused(cpu_wheel: Path, tmp_path: Path) -> None:
    """A file with the Vulkan backend's name that provides nothing (a broken or foreign build)."""
    with zipfile.ZipFile(cpu_wheel) as z:
        entries = {i.filename: z.read(i) for i in z.infolist()}
    fake = tmp_path / WHEEL_NAME
    with zipfile.ZipFile(fake, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
        z.writestr("llama_cpp/lib/libggml-vulkan.so", b"\x7fELF not really")
    v = backends.check_wheel(fake, "-DGGML_VULKAN=on")
    assert not v.ok and v.probe is not None and "Vulkan" in v.probe.files and "Vulkan" not in v.probe.compiled
    assert any("libggml-vulkan.so is there but does not provide ggml_backend_vk_reg" in ln for ln in v.lines)


def test_damaged_wheels_are_refused(cpu_wheel: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "g" / WHEEL_NAME
    garbage.parent.mkdir()
    garbage.write_bytes(os.urandom(4096))
    # a flipped byte inside libllama.so: the zip still opens, its CRC does not match
    data = bytearray(cpu_wheel.read_bytes())
    with zipfile.ZipFile(cpu_wheel) as z:
        info = z.getinfo("llama_cpp/lib/libllama.so")
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + 5000] ^= 0xFF
    flipped = tmp_path / "f" / WHEEL_NAME
    flipped.parent.mkdir()
    flipped.write_bytes(bytes(data))
    not_llama = pack_wheel(tmp_path / "n.whl", tmp_path / "g")  # a zip without libllama.so
    for w, words in ((garbage, "not a wheel"), (flipped, "damaged"), (not_llama, "no llama_cpp/lib/libllama.so")):
        v = backends.check_wheel(w, "")
        assert not v.ok and len(v.lines) == 1 and words in v.lines[0], (w, v.lines)


def test_names_in_a_wheel_never_leave_the_folder(cpu_wheel: Path, tmp_path: Path) -> None:
    bad = {"llama_cpp/lib/../../escaped.so": b"x", "llama_cpp/lib/sub/libsub.so": b"x", "/abs/libabs.so": b"x",
           "llama_cpp/lib/..": b"x", "llama_cpp/lib/notalib.txt": b"x", "lib/libtop.so": b"x"}
    with zipfile.ZipFile(cpu_wheel) as z:
        entries = {i.filename: z.read(i) for i in z.infolist()}
    w = tmp_path / WHEEL_NAME
    with zipfile.ZipFile(w, "w") as z:
        for n, data in {**entries, **bad}.items():
            z.writestr(n, data)
    out = backends.extract_libs(w, tmp_path / "x" / "lib")
    names = {p.name for p in out.iterdir()}
    assert "libllama.so" in names and not names & {"escaped.so", "libsub.so", "libabs.so", "notalib.txt", "libtop.so"}
    assert {p.name for p in (tmp_path / "x").iterdir()} == {"lib"} and not (tmp_path / "escaped.so").exists()


def test_check_wheel_cli_exit_status(cpu_wheel: Path) -> None:
    assert backends.main(["check-wheel", str(cpu_wheel), "--cmake-args="]) == 0
    assert backends.main(["check-wheel", str(cpu_wheel), "--cmake-args=-DGGML_VULKAN=on"]) == 1
    assert backends.main(["check-wheel", str(cpu_wheel), "--cmake-args=", "--require-device"]) == 0  # CPU needs no GPU


# --- prerequisites -------------------------------------------------------------------------------------------

def _exe(p: Path, body: str = "exit 0") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"#!/bin/sh\n{body}\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def _vulkan_tree(root: Path, *, spirv: bool = True, multiarch: str = "") -> None:
    """What libvulkan-dev, glslc and spirv-headers install, below ``root`` (a /usr or a Vulkan SDK)."""
    (root / "include/vulkan").mkdir(parents=True)
    (root / "include/vulkan/vulkan_core.h").write_text("#define VK_HEADER_VERSION 239\n")
    lib = root / "lib" / multiarch
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libvulkan.so").write_bytes(b"")
    _exe(root / "bin/glslc")
    if spirv:
        (root / "share/cmake/SPIRV-Headers").mkdir(parents=True)
        (root / "share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake").write_text("")


def _env(tmp_path: Path, **kw: str) -> dict[str, str]:
    _exe(tmp_path / "tools/c++")
    _exe(tmp_path / "tools/cmake")
    return {"PATH": str(tmp_path / "tools"), **kw}


def test_vulkan_prerequisites_from_an_sdk(tmp_path: Path) -> None:
    _vulkan_tree(tmp_path / "sdk")
    errors, warnings = backends.prerequisites("-DGGML_VULKAN=on", _env(tmp_path, VULKAN_SDK=str(tmp_path / "sdk")), roots=())
    assert errors == [] and warnings == []


def test_vulkan_prerequisites_debian_layout(tmp_path: Path) -> None:
    usr = tmp_path / "usr"
    _vulkan_tree(usr, multiarch=backends._multiarch()[0])
    env = _env(tmp_path)
    env["PATH"] += os.pathsep + str(usr / "bin")
    assert backends.prerequisites("-DGGML_VULKAN=on", env, roots=(str(usr),)) == ([], [])


def test_vulkan_without_spirv_headers_names_the_package(tmp_path: Path) -> None:
    """The issue's case: libvulkan-dev and glslc installed, CMake then stops on SPIRV-Headers."""
    _vulkan_tree(tmp_path / "sdk", spirv=False)
    errors, _ = backends.prerequisites("-DGGML_VULKAN=on", _env(tmp_path, VULKAN_SDK=str(tmp_path / "sdk")), roots=())
    assert len(errors) == 1 and "SPIRV-Headers not found" in errors[0]
    assert "apt-get install spirv-headers (" in errors[0] and "vulkan.lunarg.com" in errors[0]


def test_vulkan_with_nothing_installed(tmp_path: Path) -> None:
    errors, _ = backends.prerequisites("-DGGML_VULKAN=on", _env(tmp_path), roots=())
    assert len(errors) == 1
    assert "vulkan_core.h, libvulkan.so, glslc, SPIRV-Headers not found" in errors[0]
    assert "apt-get install libvulkan-dev glslc spirv-headers" in errors[0]


def test_cuda_prerequisites(tmp_path: Path) -> None:
    env = _env(tmp_path, CUDACXX=str(tmp_path / "nowhere/nvcc"))
    errors, _ = backends.prerequisites("-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90", env, gpus=0)
    assert len(errors) == 1 and "CUDACXX" in errors[0] and "not an executable" in errors[0]

    errors, _ = backends.prerequisites("-DGGML_CUDA=on", _env(tmp_path), gpus=0)
    assert len(errors) == 1 and "nvcc is not on PATH" in errors[0] and "cuda-toolkit" in errors[0]

    _exe(tmp_path / "tools/nvcc")
    env = _env(tmp_path)
    errors, warnings = backends.prerequisites("-DGGML_CUDA=on", env, gpus=0)  # native, and no GPU to detect
    assert errors == [] and len(warnings) == 1 and "-DCMAKE_CUDA_ARCHITECTURES=90" in warnings[0]
    assert backends.prerequisites("-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native", env, gpus=0)[1]
    assert backends.prerequisites("-DGGML_CUDA=on", env, gpus=1) == ([], [])
    assert backends.prerequisites("-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90", env, gpus=0) == ([], [])
    assert backends.prerequisites("-DGGML_CUDA=on -DGGML_NATIVE=OFF", env, gpus=0) == ([], [])
    env_cuda_path = {"PATH": str(tmp_path / "none"), "CUDA_PATH": str(tmp_path / "tools" / "..")}
    _exe(tmp_path / "bin/nvcc")
    assert not [e for e in backends.prerequisites("-DGGML_CUDA=on", env_cuda_path, gpus=1)[0] if "nvcc" in e]


def test_cpu_build_needs_a_compiler_only(tmp_path: Path) -> None:
    assert backends.prerequisites("", _env(tmp_path)) == ([], [])
    errors, warnings = backends.prerequisites("", {"PATH": str(tmp_path / "empty")})
    assert "C++ compiler" in errors[0] and "cmake" in warnings[0]


# --- devices at run time -------------------------------------------------------------------------------------

def test_device_listing_shows_the_cpu() -> None:
    devs = devices.available()
    cpu = [d for d in devs if d.type == "CPU"]
    assert [d.name for d in cpu] == ["CPU"] and cpu[0].description and cpu[0].total > 0
    text = devices.listing()
    assert text.startswith("Available devices:\n") and "\n  CPU: " in text and " MiB free)" in text


def test_list_devices_option_needs_no_model() -> None:
    r = CliRunner().invoke(app, ["run", "--list-devices"])
    assert r.exit_code == 0, r.output
    assert "Available devices:" in r.output and "  CPU: " in r.output


def test_run_says_which_devices_it_uses(tmp_path: Path) -> None:
    model = gguf_mtp.convert(TINY, outfile=tmp_path / "tiny.gguf", progress=False).path
    gpu = any(d.type in ("GPU", "IGPU") for d in devices.available())
    for ngl in (0, 99):
        r = CliRunner().invoke(app, ["run", str(model), "-p", "def f(x):", "-n", "4", "-ngl", str(ngl)])
        assert r.exit_code == 0, r.stderr
        first = next((ln for ln in r.stderr.splitlines() if ln.startswith("devices: ")), "")
        assert "CPU: " in first, r.stderr  # printed once the files passed their checks
        note = f"note: -ngl {ngl}: this llama-cpp-python build has no GPU backend, running on the CPU"
        assert (note in r.stderr) == (ngl > 0 and not gpu and not backends.local_gpu(backends.files_present(devices.lib_dir())))


def _dev(name: str, type_: str, backend: str) -> backends.Device:
    return backends.Device(name, f"{name} model", type_, backend, 80 << 30, 79 << 30)


def test_which_devices_a_model_uses() -> None:
    """llama_model_load's choice: discrete GPUs; integrated ones only without a discrete one; the CPU always."""
    cuda, igpu, cpu = _dev("CUDA0", "GPU", "CUDA"), _dev("Vulkan1", "IGPU", "Vulkan"), _dev("CPU", "CPU", "CPU")
    assert devices.used(99, [cuda, igpu, cpu]) == [cuda, cpu]
    assert devices.used(99, [igpu, cpu]) == [igpu, cpu]
    assert devices.used(0, [cuda, cpu]) == [cpu]
    assert devices.startup_line(99, [cuda, cpu]) == (
        "devices: CUDA0: CUDA0 model (81920 MiB, 80896 MiB free), CPU: CPU model (-ngl 99)")
    assert devices.startup_line(0, [cuda, cpu]) == "devices: CPU: CPU model (-ngl 0: nothing offloaded to CUDA0)"
    assert devices.offload_note(99, [cuda, cpu]) is None and devices.offload_note(0, [cpu]) is None


def test_the_default_devices_follow_llama_cpp_with_rpc_servers() -> None:
    """llama_prepare_model_devices: RPC servers first (whatever the registry's order), then the discrete GPUs,
    each card once; integrated GPUs join when no local discrete GPU is there (RPC servers do not count), those
    of the first one's backend only."""
    cuda, cpu = _dev("CUDA0", "GPU", "CUDA"), _dev("CPU", "CPU", "CPU")
    rpc0, rpc1 = _dev("RPC0", "GPU", "RPC"), _dev("RPC1", "GPU", "RPC")
    igpu, igpu_other = _dev("Vulkan0", "IGPU", "Vulkan"), _dev("SYCL0", "IGPU", "SYCL")
    assert backends.default_devices([cuda, cpu, rpc0, rpc1]) == [rpc0, rpc1, cuda]
    assert devices.used(99, [cuda, cpu, rpc0]) == [rpc0, cuda, cpu]
    assert devices.used(99, [igpu, cpu, rpc0]) == [rpc0, igpu, cpu]
    assert devices.used(99, [igpu, igpu_other, cpu]) == [igpu, cpu]
    assert devices.startup_line(99, [cuda, cpu, rpc0]).startswith("devices: RPC0: RPC0 model")
    # one card seen by two backends (a CUDA + Vulkan build): the first one's device only
    card, same_card = (backends.Device(n, "H100", "GPU", b, 80 << 30, 79 << 30, device_id="0000:c1:00.0")
                       for n, b in (("CUDA0", "CUDA"), ("Vulkan0", "Vulkan")))
    other = backends.Device("Vulkan1", "H100", "GPU", "Vulkan", 80 << 30, 79 << 30, device_id="0000:c2:00.0")
    assert backends.default_devices([card, same_card, other, cpu]) == [card, other]
