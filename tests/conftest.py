"""Shared fixtures: synthetic checkpoints of each family (written once per session) and converted files."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

import gguf_mtp.runtime  # llama.cpp before numpy, as on a CUDA build (loads without it too)

try:
    import gguf_mtp.runtime.llama  # noqa: F401  (the ctypes layer: fails when llama-cpp-python cannot load)

    HAVE_LLAMA = True
except Exception:  # noqa: BLE001 - the fast tier (make test-fast) runs without llama-cpp-python
    HAVE_LLAMA = False
from gguf_mtp import convert
from gguf_mtp.archs import ARCHS
from tests.synthetic import SyntheticSpec, write_checkpoint

# The tests reach their own servers (serve, the Hub stand-in, RPC) over loopback, with clients that honour a proxy
# the host's environment names: never through one
for _var in ("NO_PROXY", "no_proxy"):
    os.environ[_var] = ",".join(v for v in (os.environ.get(_var, ""), "127.0.0.1", "localhost", "::1") if v)

# The fast tier: modules marked ``pytestmark = pytest.mark.fast`` need no llama.cpp. `make test-fast` runs them
# (``-m fast``) in .venv-fast, which has no llama-cpp-python, before the llama.cpp build (converters, readers,
# tensor values, hostile checkpoints and Hub servers); `make test` runs them again with everything else. Every other
# module needs llama.cpp: it imports the runtime, or is marked ``llama`` (it loads llama.cpp only when it runs).
# tests/test_tiers.py keeps the marks true.
def module_marks(path: Path) -> set[str]:
    """The marks a test module gives all its tests (``pytestmark = pytest.mark.X`` or a list of them), read from
    its source: a module that needs llama.cpp cannot be imported to ask."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                        and sub.value.attr == "mark" and isinstance(sub.value.value, ast.Name)
                        and sub.value.value.id == "pytest"):
                    marks.add(sub.attr)
    return marks


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without llama-cpp-python only the fast tier is collected (the others need the runtime)."""
    if not HAVE_LLAMA and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return "fast" not in module_marks(collection_path)
    return None


# one synthetic checkpoint per GGUF arch of the table (SyntheticSpec.family names them alike)
#: archs with one MTP layer
FAMILIES = tuple(a for a, row in ARCHS.items() if row.max_heads == 1)
#: archs with chained MTP heads, one per draft step
MULTIHEAD_FAMILIES = tuple(a for a, row in ARCHS.items() if row.max_heads is None)
#: one-layer archs whose target memory drops rejected drafts natively (qwen3next's replay rollback: test_rollback)
NATIVE_ROLLBACK_FAMILIES = tuple(a for a in FAMILIES if ARCHS[a].rs_rollback or not ARCHS[a].recurrent)


#: the embedded default (a tiny trained Qwen3.5 with its MTP head) and the first four prompts of its reference
TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
TINY_PROMPTS: list[str] = json.loads((TINY / "reference.json").read_text())["prompts"][:4]


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default converted once (its head bundled), for the runtime's patch tests."""
    return convert(TINY, outfile=tmp_path_factory.mktemp("tiny") / "tiny.gguf", progress=False).path


@pytest.fixture(scope="session")
def tiny_plain(tiny_gguf: Path):  # type: ignore[no-untyped-def]
    """Plain decoding of :data:`TINY_PROMPTS`, 40 tokens each (``n_ctx`` 512): what a speculative run of them must
    match (tests/lossless.py's ``Reference``)."""
    from gguf_mtp.runtime import MTPSession
    from tests.lossless import Reference

    return Reference(lambda: MTPSession(tiny_gguf, mtp=False, n_ctx=512),
                     lambda s: [s.generate(p, max_tokens=40) for p in TINY_PROMPTS])


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ckpt")


@pytest.fixture(scope="session")
def checkpoint(ckpt_root: Path):
    """``checkpoint(family, **spec)`` -> folder of a synthetic checkpoint (cached per arguments)."""
    cache: dict[tuple, Path] = {}

    def make(family: str, **kw) -> Path:
        key = (family, tuple(sorted(kw.items())))
        if key not in cache:
            name = family + "".join(f"-{k}={v}" for k, v in sorted(kw.items()))
            cache[key] = write_checkpoint(ckpt_root / name, SyntheticSpec(family, **kw))
        return cache[key]

    return make


@pytest.fixture(scope="session")
def converted(checkpoint, tmp_path_factory: pytest.TempPathFactory):
    """``converted(family, layout, outtype="q8_0", **spec)`` -> path of the GGUF (cached)."""
    out_root = tmp_path_factory.mktemp("gguf")
    cache: dict[tuple, Path] = {}

    def make(family: str, layout: str, outtype: str = "q8_0", mtp_type: str = "q8_0", **kw) -> Path:
        key = (family, layout, outtype, mtp_type, tuple(sorted(kw.items())))
        if key not in cache:
            src = checkpoint(family, **kw)
            out = out_root / f"{src.name}-{layout}-{outtype}-{mtp_type}.gguf"
            cache[key] = convert(src, outfile=out, outtype=outtype, layout=layout, mtp_type=mtp_type,
                                 progress=False).path
        return cache[key]

    return make


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """How often a speculative run parted from plain decoding at a tie (tests/lossless.py), with each tie."""
    from tests import lossless

    if lossless.COMPARED:
        for line in lossless.summary():
            terminalreporter.write_line(line)
