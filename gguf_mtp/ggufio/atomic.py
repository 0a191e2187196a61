"""Atomic output: write to a hidden temp file beside the target, rename into place on success.

An interrupted or failed run leaves no partial output; an existing file is replaced only with
``force``, and never when it is one of the inputs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import GgufMtpError, OutputExistsError


def check_output(path: Path, *, force: bool, inputs: Iterable[Path] = ()) -> None:
    """Refuse to write ``path`` when it exists (unless ``force``) or is one of ``inputs``."""
    path = Path(path)
    for src in inputs:
        try:
            if path.exists() and os.path.samefile(path, src):
                raise GgufMtpError(f"{path}: output would overwrite an input file; choose another --outfile")
        except FileNotFoundError:
            pass
    if path.exists() and not force:
        raise OutputExistsError(f"{path}: output exists; pass --force to overwrite it")
    if path.is_dir():
        raise GgufMtpError(f"{path}: output path is a directory; name a file with --outfile")
    if not path.parent.exists():
        raise GgufMtpError(f"{path.parent}: output folder does not exist; create it first")


@contextmanager
def atomic_paths(paths: list[Path]) -> Iterator[list[Path]]:
    """Yield temp paths for ``paths``; rename all of them into place only if the block succeeds."""
    temps: list[Path] = []
    try:
        for p in paths:
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".partial", dir=p.parent)
            os.close(fd)
            temps.append(Path(tmp))
        yield temps
        for tmp, p in zip(temps, paths):
            os.chmod(tmp, 0o644)
            os.replace(tmp, p)
        temps = []
    finally:
        for tmp in temps:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
