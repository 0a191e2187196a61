"""``gguf-mtp plot``."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import text


def plot(
    files: list[Path] = typer.Argument(..., metavar="STATS.json...",
                                       help="What `gguf-mtp run --stats-json` wrote (one file per draft length to "
                                            "see speed against it), or bench/oneshot.py / bench/side_by_side.py "
                                            "output."),
    out: str | None = typer.Option(None, "--outfile", "-o", metavar="PATH", callback=text(4096),
                                   help="The PNG to write. Default: the first file's name with .png."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite an existing PNG."),
) -> None:
    """Draw acceptance by draft position and decode speed by draft length as a PNG (needs matplotlib).

    Examples:

      gguf-mtp run model.gguf -p "Hello" --spec-draft-n-max 3 --stats-json k3.json

      gguf-mtp plot k3.json                       # -> k3.png

      gguf-mtp plot k1.json k2.json k3.json k4.json -o speed.png
    """
    from gguf_mtp.plot import plot as _plot

    typer.echo(f"wrote {_plot(files, out, force=force)}")
