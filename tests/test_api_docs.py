"""The public API's examples run: the package docstring (convert, inspect, extract, strip, graft, quantize and an
MTPSession) in a scratch folder with the shipped example model, and every public name is exported and typed."""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import shutil
from pathlib import Path

import pytest

import gguf_mtp

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: the package example runs an MTPSession

ROOT = Path(__file__).resolve().parents[1]


def test_package_example_runs(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "tiny-qwen35-mtp", tmp_path / "examples" / "tiny-qwen35-mtp")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = doctest.testmod(gguf_mtp, optionflags=doctest.ELLIPSIS, verbose=False)
    finally:
        os.chdir(cwd)
    assert r.attempted >= 10 and r.failed == 0, r
    assert sorted(p.name for p in tmp_path.glob("*.gguf")) == [
        "tiny-MTP.gguf", "tiny-Q4_K_M.gguf", "tiny-again.gguf", "tiny-trunk.gguf", "tiny.gguf"]


def test_public_api_is_exported_and_typed() -> None:
    for name in ("convert", "inspect_file", "extract", "strip", "graft", "quantize", "MTPSession"):
        assert name in gguf_mtp.__all__
        obj = getattr(gguf_mtp, name)
        fn = obj.__init__ if inspect.isclass(obj) else obj
        sig = inspect.signature(fn)
        assert obj.__doc__, name
        untyped = [p for p in sig.parameters.values() if p.name != "self" and p.kind is not p.VAR_KEYWORD
                   and p.annotation is inspect.Parameter.empty]
        assert not untyped and (inspect.isclass(obj) or sig.return_annotation is not inspect.Signature.empty), name
    importlib.import_module("gguf_mtp.quantize")  # the submodule: the package's name stays the function
    assert callable(gguf_mtp.quantize) and gguf_mtp.quantize.__name__ == "quantize_model"
