"""`--help` at any terminal width shows every option's name whole (issue 27: rich's tables cut them at 80 columns,
`--spec-draft-prompt-w…`)."""

from __future__ import annotations

import pytest
import typer
from gguf_mtp_cli.main import app

from .reliability import sub

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


@pytest.mark.parametrize("columns", [80, 50])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_every_option_whole(name: str, columns: int) -> None:
    r = sub([name, "--help"], env={"COLUMNS": str(columns), "TERMINAL_WIDTH": str(columns)})
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout, r.stdout
    words = set(r.stdout.replace(",", " ").split())
    for param in COMMANDS[name].params:
        if getattr(param, "hidden", False):  # -h and the llama.cpp options we refuse (cli/options.py) are not listed
            continue
        for opt in param.opts + param.secondary_opts:
            if opt.startswith("-"):
                assert opt in words, (opt, r.stdout)
