"""Benchmark scripts that run models load llama.cpp's libraries before numpy.

On CUDA a process that imported numpy first crashes at model load (libggml-cuda's own libstdc++ symbols; see
gguf_mtp/runtime/__init__.py). ``import gguf_mtp`` loads neither, so a script must import ``gguf_mtp.runtime``
(or ``llama_cpp``) first. The CPU build does not crash, so only this check catches a script that gets it wrong
before a GPU call does (it once cost a whole benchmark run).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: the scripts it runs import the runtime

BENCH = Path(__file__).resolve().parents[1] / "bench"
USES_RUNTIME = re.compile(r"gguf_mtp\.runtime|MTPSession|\bllama_cpp\b")
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if USES_RUNTIME.search(p.read_text()))

PROBE = """
import importlib.abc, json, runpy, sys
order = []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in ("numpy", "llama_cpp.llama_cpp") and name not in order:
            order.append(name)
        return None
sys.meta_path.insert(0, Watch())
module = sys.argv[1]
sys.argv = [module]
runpy.run_module(module, run_name="imported_by_a_test")  # as `python -m bench.X`, module level only: no main()
print(json.dumps(order))
"""


def test_there_are_scripts_to_check() -> None:
    assert {"side_by_side.py", "models.py", "run.py", "qwen3next.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_llama_cpp_loads_before_numpy(script: Path) -> None:
    src = script.read_text()
    if "__main__" not in src:  # a GPU-only script that works on import: check its import lines instead
        lines = [ln.split("#")[0] for ln in src.splitlines() if re.match(r"(import|from) ", ln)]
        first_np = next((i for i, ln in enumerate(lines) if "numpy" in ln or ln.startswith("from bench.common")),
                        None)
        first_ll = next((i for i, ln in enumerate(lines) if USES_RUNTIME.search(ln)), None)
        assert first_np is None or (first_ll is not None and first_ll < first_np), lines
        return
    r = subprocess.run([sys.executable, "-c", PROBE, f"bench.{script.stem}"], capture_output=True, text=True,
                       timeout=300, cwd=BENCH.parent)
    assert r.returncode == 0, r.stderr[-2000:]
    order = json.loads(r.stdout.strip().splitlines()[-1])
    # first, at module level: a later import inside main() comes after whatever main() imported before it
    assert order[:1] == ["llama_cpp.llama_cpp"], f"{script.name}: imports {order} in this order at module level"


def test_bench_is_a_package_that_imports_no_private_names() -> None:
    """bench/ runs as ``python -m bench.X`` from the repository root: no script edits ``sys.path`` or imports its
    neighbours by bare name, and none imports a private name (``_x``) of gguf_mtp."""
    assert (BENCH / "__init__.py").exists()
    siblings = "|".join(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")
    bare = re.compile(rf"^\s*(from ({siblings}) import|import ({siblings})\b)", re.M)
    private = re.compile(r"^\s*from gguf_mtp[\w.]* import [^\n#]*\b_[a-z]\w*", re.M)
    for p in sorted(BENCH.glob("*.py")):
        src = p.read_text()
        assert "sys.path.insert" not in src and "sys.path.append" not in src, p.name
        assert not bare.search(src), (p.name, bare.search(src))
        assert not private.search(src), (p.name, private.search(src))
