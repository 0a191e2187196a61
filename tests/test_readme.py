"""The README's examples that can go stale (issue 27): the `inspect` example is what the shipped model gives, and
every `pip install` line installs something that exists (gguf-mtp is not on PyPI; extras are pyproject's)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from .reliability import ROOT, sub

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

README = (ROOT / "README.md").read_text()


def _inspect_block() -> list[str]:
    section = README[README.index("\n## Inspect\n"):]
    block = section[section.index("```console\n") + len("```console\n"):]
    return block[:block.index("```")].splitlines()


def test_the_inspect_example_is_what_the_shipped_model_gives(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "tiny-qwen35-mtp", tmp_path / "examples" / "tiny-qwen35-mtp")
    lines = _inspect_block()
    commands = [i for i, ln in enumerate(lines) if ln.startswith("$ ")]
    assert len(commands) == 2 and commands[-1] == 1, lines
    for i in commands:
        argv = shlex.split(lines[i][2:])
        if ">" in argv:  # the shown redirect only hides the output
            argv = argv[:argv.index(">")]
        assert argv[0] == "gguf-mtp", argv
        r = sub(argv[1:], cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    shown = lines[commands[-1] + 1:]
    assert shown[-1] == "..." and len(shown) > 10
    got = r.stdout.splitlines()
    assert [ln.rstrip() for ln in got[:len(shown) - 1]] == [ln.rstrip() for ln in shown[:-1]], r.stdout


def test_every_pip_install_line_installs_what_exists() -> None:
    toml = (ROOT / "pyproject.toml").read_text()  # tomllib is 3.11+; the section is one key per line
    section = toml[toml.index("[project.optional-dependencies]"):].split("\n[", 1)[0]
    extras = set(re.findall(r"^([\w-]+)\s*=", section, re.M))
    assert {"serve", "plot"} <= extras, extras
    found = re.findall(r"pip install ([^`\n#]+)", README)
    assert found
    for args in found:
        for target in shlex.split(args):
            if target.startswith("-"):
                continue
            name, _, extra = target.partition("[")
            # not the name on PyPI: a path to this repository (".", "./", a folder), with extras pyproject has
            assert name in (".", "./") or name.startswith(("/", "./", "git+")) or name in {"matplotlib"}, target
            for e in extra.rstrip("]").split(",") if extra else ():
                assert e.strip() in extras, (target, extras)
