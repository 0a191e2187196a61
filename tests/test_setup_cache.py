"""scripts/setup.sh's wheel cache: an entry is written only for a wheel that passed the backend check, a bad
entry is found and rebuilt, and a missing prerequisite stops before the build. The build itself is the
GGUF_MTP_WHEEL_BUILD_CMD hook (it copies a prepared wheel and counts its calls), so nothing is compiled."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_mtp import backends as B
from gguf_mtp.runtime import devices
from tests.test_backends import WHEEL_NAME, cpu_wheel  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]


def setup_sh(cache: Path, cmake_args: str, build_from: Path | None, calls: Path, **env: str) -> subprocess.CompletedProcess:
    """``setup.sh --wheel-only`` with a stub build that copies ``build_from`` (or leaves nothing)."""
    stub = f'echo built >> "{calls}"' + (f'; cp "{build_from}" "$1/"' if build_from else "")
    # the stock build unless a test asks for patches (tests/test_patches.py): no sdist to fetch
    e = {**os.environ, "GGUF_MTP_WHEEL_CACHE": str(cache), "CMAKE_ARGS": cmake_args, "PYTHON": sys.executable,
         "GGUF_MTP_WHEEL_BUILD_CMD": stub, "GGUF_MTP_PATCHES": "0", **env}
    return subprocess.run(["bash", str(ROOT / "scripts/setup.sh"), "--wheel-only"], env=e, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def n_calls(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def key(cmake_args: str) -> str:
    return hashlib.sha1(f"0.3.36|{cmake_args}".encode()).hexdigest()[:12]


def test_cpu_wheel_is_never_cached_as_vulkan(tmp_path: Path, cpu_wheel: Path) -> None:  # noqa: F811
    """The issue's case: a CPU wheel arrives for -DGGML_VULKAN=on. It is refused, and the key stays empty;
    a CPU wheel already cached under the Vulkan key (by an older setup.sh) is found and rebuilt."""
    cache, calls = tmp_path / "cache", tmp_path / "calls"
    r = setup_sh(cache, "-DGGML_VULKAN=on", cpu_wheel, calls, GGUF_MTP_SKIP_PREREQS="1")
    assert r.returncode == 1 and n_calls(calls) == 1, r.stderr
    assert "has no Vulkan backend (no libggml-vulkan.so" in r.stderr and "it was not cached" in r.stderr
    assert entries(cache) == [] and r.stdout == ""  # no entry, no half-built folder

    # the cache dir of that key (setup.sh may add the Vulkan header shim to CMAKE_ARGS)
    wheel_dir = Path(re.search(r"cached in (\S+)", r.stderr).group(1))  # type: ignore[union-attr]
    wheel_dir.mkdir(parents=True)
    (wheel_dir / WHEEL_NAME).write_bytes(cpu_wheel.read_bytes())
    r = setup_sh(cache, "-DGGML_VULKAN=on", cpu_wheel, calls, GGUF_MTP_SKIP_PREREQS="1")
    assert r.returncode == 1 and n_calls(calls) == 2, r.stderr
    assert "is not the build CMAKE_ARGS asks for: removing it and building again" in r.stderr
    assert entries(cache) == []


CPU_ONLY = "-DGGML_RPC=OFF"  # setup.sh adds -DGGML_RPC=ON otherwise; a CPU build (with or without RPC) passes


def test_rpc_is_built_by_default(tmp_path: Path, cpu_wheel: Path) -> None:  # noqa: F811
    cache, calls = tmp_path / "cache", tmp_path / "calls"
    r = setup_sh(cache, "", cpu_wheel, calls)
    if "RPC" in B.files_present(devices.lib_dir()):  # the fixture is setup.sh's default build: it is cached
        assert r.returncode == 0 and f"cached in {cache / key('-DGGML_RPC=ON')}" in r.stderr, r.stderr
        assert entries(cache) == [key("-DGGML_RPC=ON")] and "backends CPU, RPC" in r.stderr
    else:  # a plain CPU build offered for the default: refused, nothing cached
        assert r.returncode == 1 and f"cached in {cache / key('-DGGML_RPC=ON')}" in r.stderr, r.stderr
        assert "has no RPC backend (no libggml-rpc.so" in r.stderr and entries(cache) == []
    r = setup_sh(cache, "-DGGML_CUDA=on -DGGML_RPC=ON", None, calls, GGUF_MTP_SKIP_PREREQS="1")
    assert "(CMAKE_ARGS='-DGGML_CUDA=on -DGGML_RPC=ON')" in r.stderr  # not added twice


def test_damaged_cache_entry_is_rebuilt(tmp_path: Path, cpu_wheel: Path) -> None:  # noqa: F811
    cache, calls = tmp_path / "cache", tmp_path / "calls"
    (cache / key(CPU_ONLY)).mkdir(parents=True)
    (cache / key(CPU_ONLY) / WHEEL_NAME).write_bytes(b"PK\x03\x04 truncated")
    r = setup_sh(cache, CPU_ONLY, cpu_wheel, calls)
    assert r.returncode == 0, r.stderr
    assert "not a wheel" in r.stderr and "removing it and building again" in r.stderr and n_calls(calls) == 1
    cached = cache / key(CPU_ONLY) / WHEEL_NAME
    assert r.stdout.strip() == str(cached) and cached.read_bytes() == cpu_wheel.read_bytes()
    assert entries(cache) == [key(CPU_ONLY)]

    r = setup_sh(cache, CPU_ONLY, cpu_wheel, calls)  # a sound entry is used as it is
    assert r.returncode == 0 and n_calls(calls) == 1 and r.stdout.strip() == str(cached), r.stderr
    assert "backends CPU" in r.stderr


def test_missing_prerequisite_stops_before_the_build(tmp_path: Path, cpu_wheel: Path) -> None:  # noqa: F811
    cache, calls = tmp_path / "cache", tmp_path / "calls"
    args = "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"
    r = setup_sh(cache, args, cpu_wheel, calls, CUDACXX=str(tmp_path / "no/nvcc"))
    assert r.returncode == 1 and n_calls(calls) == 0, r.stderr
    assert f"CUDACXX/CMAKE_CUDA_COMPILER={tmp_path / 'no/nvcc'} is not an executable nvcc" in r.stderr
    assert "GGUF_MTP_SKIP_PREREQS=1" in r.stderr and entries(cache) == []


def test_build_without_a_wheel_leaves_nothing(tmp_path: Path) -> None:
    cache, calls = tmp_path / "cache", tmp_path / "calls"
    r = setup_sh(cache, "", None, calls)
    assert r.returncode == 1 and n_calls(calls) == 1
    assert "the build left no llama_cpp_python-0.3.36-*.whl; nothing was cached" in r.stderr
    assert entries(cache) == []


@pytest.mark.parametrize("arg", ["--bogus", "--source-only"])
def test_usage(arg: str) -> None:
    r = subprocess.run(["bash", str(ROOT / "scripts/setup.sh"), arg], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "usage:" in r.stderr
