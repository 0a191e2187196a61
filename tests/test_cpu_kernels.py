"""The CPU's kernels as llama.cpp picks them on this machine: every quantized model decodes without a crash.

ggml's AMX kernels segfault on some CPUs that have AMX (ggml-org/llama.cpp#20824): there gguf-mtp keeps weights
out of the CPU's extra buffer types (runtime/llama.py: amx_off). On a CPU without AMX these tests still check that
the extra buffer types are read and that quantized models decode, plain and speculative."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_mtp import convert
from gguf_mtp.quantize import quantize_model
from gguf_mtp.runtime import llama as L

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"


def test_the_cpu_extra_buffer_types_are_read() -> None:
    names = L.registry().extra_buffer_types("CPU")
    assert set(names) <= {"CPU_REPACK", "AMX", "CPU_KLEIDIAI", "CPU_SPACEMIT"}, names
    if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64"):
        assert "CPU_REPACK" in names  # built in on these CPUs whatever their instruction set
    assert L.registry().extra_buffer_types("no such device") == []
    assert L.amx_off() == ("AMX" in names)


@pytest.fixture(scope="module")
def quants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cpu")
    src = convert(TINY, outfile=d / "tiny.gguf", progress=False).path
    return {q: quantize_model(src, d / f"tiny-{q}.gguf", q).path for q in ("Q8_0", "Q4_0", "Q4_K_M")}


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_K_M"])
def test_quantized_models_decode_on_this_cpu(quants: dict[str, Path], qtype: str) -> None:
    """In a child process, so that a crash in a kernel is a failed test, not a dead test run. On main before the
    AMX route-around this died with SIGSEGV on an AMX machine, plain and speculative."""
    for extra in (["--no-mtp"], ["--spec-draft-n-max", "2"]):
        r = subprocess.run([sys.executable, "-m", "gguf_mtp_cli.main", "run", str(quants[qtype]), "-p",
                            "The quick brown fox", "-n", "12", "-c", "256", *extra],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (qtype, extra, r.returncode, r.stderr[-800:])
        assert r.stdout.strip(), r.stderr
        amx = "AMX kernels off" in r.stderr
        assert amx == L.amx_off(), r.stderr  # said at start-up exactly when it applies


def test_the_amx_switch_is_read_from_the_environment() -> None:
    code = "from gguf_mtp.runtime import llama as L; print(L.amx_off())"
    env = {**os.environ, L.AMX_ENV: "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
