"""``gguf-mtp inspect``."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def inspect(
    file: Path = typer.Argument(..., help="A .gguf file."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show a GGUF file's layout (bundled / trunk-only / MTP-only / head-only) and its MTP head."""
    from gguf_mtp.file_report import inspect_file

    report = inspect_file(file)
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.format())
