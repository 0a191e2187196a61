"""Conversion, inspection and surgery never need llama.cpp's shared library; the runtime loads it before numpy.

Each case runs the real CLI in a fresh interpreter: once with LLAMA_CPP_LIB_PATH pointing at an empty folder
(llama-cpp-python cannot find its library) and once with llama_cpp unimportable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: the runtime's import order

RUN_CLI = "import sys; from gguf_mtp_cli.main import main; sys.exit(main(sys.argv[1:]))"
NO_LLAMA = "import sys; sys.modules['llama_cpp'] = None; " + RUN_CLI  # `import llama_cpp` raises ImportError


def _cli(code: str, args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.fixture(scope="module", params=["empty LLAMA_CPP_LIB_PATH", "llama_cpp unimportable"])
def without_llama(request, tmp_path_factory):
    """``run(args) -> CompletedProcess`` of the CLI in a process where llama.cpp's library cannot load."""
    if request.param.startswith("empty"):
        empty = tmp_path_factory.mktemp("no-lib")
        return lambda args, cwd=None: _cli(RUN_CLI, args, {"LLAMA_CPP_LIB_PATH": str(empty)}, cwd)
    return lambda args, cwd=None: _cli(NO_LLAMA, args, cwd=cwd)


def test_convert_inspect_extract_without_llama(without_llama, checkpoint, tmp_path: Path) -> None:
    src = checkpoint("qwen35")
    bundled, side, trunk, grafted = (tmp_path / n for n in ("b.gguf", "b-MTP.gguf", "t.gguf", "g.gguf"))
    for args in (["convert", str(src), "-o", str(bundled), "-q"],
                 ["extract", str(bundled), "--head-only", "-o", str(side), "-q"],
                 ["extract", str(bundled), "--strip", "-o", str(trunk), "-q"],
                 ["extract", str(side), "--onto", str(trunk), "-o", str(grafted), "-q"]):
        r = without_llama(args)
        assert r.returncode == 0, (args, r.stderr)
    r = without_llama(["inspect", str(grafted), "--json"])
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["layout"] == "bundled" and rep["mtp_layers"] == 1
    # and the runtime says in one line what is missing
    r = without_llama(["run", str(grafted), "-p", "x", "-n", "1"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: llama-cpp-python cannot be loaded"), r.stderr


def test_import_gguf_mtp_loads_neither_numpy_nor_llama() -> None:
    code = ("import sys, gguf_mtp, gguf_mtp_cli.main; print(json.dumps(['numpy' in sys.modules, "
            "'llama_cpp' in sys.modules, gguf_mtp.convert.__module__]))")
    r = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout) == [False, False, "gguf_mtp.convert"]


@pytest.mark.parametrize("how", ["import gguf_mtp.runtime", "cli run"])
def test_runtime_loads_llama_before_numpy(how: str, tmp_path: Path) -> None:
    """A CUDA build's libggml-cuda must be loaded before numpy's libraries (docs/devices.md, "CUDA")."""
    first = ("import gguf_mtp.runtime" if how.startswith("import") else
             "from gguf_mtp_cli.main import main; main(['run', 'missing.gguf', '-p', 'x'])")
    code = (f"import sys; {first}\nm = list(sys.modules)\n"
            "print(m.index('llama_cpp.llama_cpp') < m.index('numpy'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.stdout.strip().splitlines()[-1] == "True", r.stdout + r.stderr
