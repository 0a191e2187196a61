"""The runtime's layers point one way: config -> llama (ctypes) -> sampling -> engine -> session -> server.

Each module of a layer is imported in a fresh interpreter where every module of the layers above it is
unimportable (``sys.modules[name] = None``), and its source is read for imports of those modules anywhere
(at the top, inside functions, under ``TYPE_CHECKING``): a deferred or type-only import is still a circle for a
reader. ``config`` and ``options`` import with ``llama_cpp`` itself unimportable.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: imports the ctypes layer alone

ROOT = Path(__file__).resolve().parents[1]

#: bottom to top
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("config", ("gguf_mtp.runtime.config", "gguf_mtp.runtime.options")),
    ("llama", ("gguf_mtp.runtime.llama",)),
    ("sampling", ("gguf_mtp.runtime.sampling",)),
    ("engine", ("gguf_mtp.runtime.rollback", "gguf_mtp.runtime.proposer", "gguf_mtp.runtime.speculative",
                "gguf_mtp.runtime.multistep")),
    ("session", ("gguf_mtp.runtime.session",)),
    ("server", ("gguf_mtp.server.scheduler", "gguf_mtp.server.app")),
]
CASES = [(module, tuple(m for _, mods in LAYERS[i + 1:] for m in mods))
         for i, (_, mods) in enumerate(LAYERS[:-1]) for module in mods]


def _import_alone(module: str, blocked: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    code = (f"import sys\nfor name in {list(blocked)!r}:\n    sys.modules[name] = None\n"
            f"import importlib\nimportlib.import_module({module!r})\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


def _imports(module: str) -> set[str]:
    """Absolute names of every module ``module``'s source imports, wherever the import statement stands."""
    path = ROOT / (module.replace(".", "/") + ".py")
    package = module.rsplit(".", 1)[0].split(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)  # `from . import sampling`
    return found


@pytest.mark.parametrize("module,above", CASES, ids=[m.rsplit(".", 1)[1] for m, _ in CASES])
def test_layer_imports_alone(module: str, above: tuple[str, ...]) -> None:
    r = _import_alone(module, above)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("module,above", CASES, ids=[m.rsplit(".", 1)[1] for m, _ in CASES])
def test_layer_source_names_nothing_above(module: str, above: tuple[str, ...]) -> None:
    assert not _imports(module) & set(above)


@pytest.mark.parametrize("module", LAYERS[0][1])
def test_config_needs_no_llama_cpp(module: str) -> None:
    r = _import_alone(module, ("llama_cpp", "gguf_mtp.runtime.llama"))
    assert r.returncode == 0, r.stderr[-2000:]


def test_public_names_stay_where_users_import_them() -> None:
    import gguf_mtp
    from gguf_mtp import runtime
    from gguf_mtp.runtime import config, options, sampling, session

    assert runtime.SessionConfig is session.SessionConfig is config.SessionConfig is gguf_mtp.SessionConfig
    assert runtime.SamplerConfig is sampling.SamplerConfig is config.SamplerConfig is gguf_mtp.SamplerConfig
    assert runtime.MTPSession is session.MTPSession and runtime.Generation is session.Generation
    assert options.MAX_DRAFT == config.MAX_DRAFT


def _private_attributes(tree: ast.AST) -> list[str]:
    return sorted({f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and n.attr.startswith("_") and not n.attr.startswith("__")
                   and isinstance(n.value, ast.Name) and n.value.id != "self"}
                  | {f"[..].{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                     and n.attr.startswith("_") and isinstance(n.value, ast.Subscript)})


def _functions(path: str) -> dict[str, ast.FunctionDef]:
    """Module functions by name, methods as Class.name."""
    tree = ast.parse((ROOT / path).read_text())
    found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for c in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        found.update({f"{c.name}.{m.name}": m for m in c.body if isinstance(m, ast.FunctionDef)})
    return found


def test_the_step_is_written_once() -> None:
    """Engine.step (a conversation: a batch of one) and MultiStep.step (a server's slots) are both batch_step, which
    runs public engine and proposer operations only (begin_step, draft_length, propose, add_verify, accept,
    commit); drafting is the proposer's alone, and nothing asks whether there is a head."""
    spec, multi = _functions("gguf_mtp/runtime/speculative.py"), _functions("gguf_mtp/runtime/multistep.py")
    assert not _private_attributes(spec["batch_step"])
    for method in (spec["Engine.step"], multi["MultiStep.step"]):
        called = {n.func.id for n in ast.walk(method) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert called == {"batch_step"}, (method.name, called)
    for path in ("gguf_mtp/runtime/speculative.py", "gguf_mtp/runtime/multistep.py"):
        source = (ROOT / path).read_text()
        assert ".pick(" not in source and "set_head" not in source, path  # the head's decodes: proposer.py
    multistep = (ROOT / "gguf_mtp/runtime/multistep.py").read_text()
    assert ".mtp" not in ast.unparse(spec["batch_step"]) and ".mtp" not in multistep
