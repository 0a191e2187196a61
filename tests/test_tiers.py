"""The test tiers are pytest marks, and the marks are true: a module marked ``fast`` imports without llama.cpp (so
`make test-fast` can run it in .venv-fast), and every other module needs llama.cpp, either at import (it imports the
runtime) or, marked ``llama``, only when it runs (a CLI subprocess, a deferred import). A module that needs nothing
of llama.cpp and is not marked ``fast`` fails here, as does a ``fast`` one that cannot be imported without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import module_marks

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

TESTS = Path(__file__).resolve().parent
#: what the runtime says when llama-cpp-python cannot be imported (runtime/llama.py)
NO_LLAMA = "llama-cpp-python cannot be loaded"
# import each test module with llama_cpp unimportable (as in .venv-fast); one line per module: "" or the error
PROBE = """
import importlib, json, sys
sys.modules["llama_cpp"] = None
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module("tests." + name)
        out[name] = ""
    except Exception as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def test_every_module_is_fast_or_needs_llama() -> None:
    modules = sorted(p.stem for p in TESTS.glob("test_*.py"))
    marks = {m: module_marks(TESTS / f"{m}.py") for m in modules}
    r = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=600,
                       cwd=TESTS.parent, check=True)
    errors: dict[str, str] = json.loads(r.stdout.splitlines()[-1])
    wrong = []
    for m in modules:
        fast, llama, err = "fast" in marks[m], "llama" in marks[m], errors[m]
        if err and NO_LLAMA not in err:
            wrong.append(f"{m} cannot be imported: {err}")
        elif fast and llama:
            wrong.append(f"{m} is marked both fast and llama")
        elif fast and err:
            wrong.append(f"{m} is marked fast but imports llama.cpp: {err}")
        elif llama and err:
            wrong.append(f"{m} imports llama.cpp already: drop its llama mark")
        elif not fast and not llama and not err:
            wrong.append(f"{m} imports without llama.cpp: mark it fast, or llama when it needs llama.cpp to run")
    assert not wrong, "\n".join(wrong)
    assert sum("fast" in marks[m] for m in modules) >= 9  # the tier is not empty by a misread mark


def test_marks_are_read_from_the_source(tmp_path: Path) -> None:
    """module_marks reads ``pytestmark`` as pytest does: one mark or a list, at module level only."""
    cases = {
        "pytestmark = pytest.mark.fast\n": {"fast"},
        "pytestmark = [pytest.mark.llama, pytest.mark.skipif(True, reason='x')]\n": {"llama", "skipif"},
        "def f():\n    pytestmark = pytest.mark.fast\n": set(),
        "x = pytest.mark.fast\n": set(),
    }
    for src, want in cases.items():
        (tmp_path / "test_x.py").write_text("import pytest\n" + src)
        assert module_marks(tmp_path / "test_x.py") == want, src


def test_without_llama_cpp_only_the_fast_tier_is_collected() -> None:
    """What `make test-fast` sees in .venv-fast: every fast module collected without an error, no other module."""
    code = ("import sys; sys.modules['llama_cpp'] = None; import pytest; "
            "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=TESTS.parent)
    assert r.returncode == 0 and " error" not in r.stdout.splitlines()[-1], r.stdout[-3000:] + r.stderr[-2000:]
    collected = {ln.split("::")[0].removeprefix("tests/").removesuffix(".py") for ln in r.stdout.splitlines()
                 if ln.startswith("tests/test_") and "::" in ln}
    fast = {p.stem for p in TESTS.glob("test_*.py") if "fast" in module_marks(p)}
    assert collected == fast, (sorted(collected - fast), sorted(fast - collected))
