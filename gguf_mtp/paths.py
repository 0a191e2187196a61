"""Confinement of names that come from files and servers (index shard names, a repo's file list, commit ids).

A name is a relative POSIX path made of ordinary components: no ``..`` or ``.``, no empty component, not
absolute, no backslash, drive or control character. :func:`confined` also resolves symlinks and refuses a
path that lands outside the folder (or outside the extra places it may link to, e.g. the HF cache's blobs).
Every refusal is a one-line :class:`~gguf_mtp.errors.FormatError` that names where the name came from.

Example:
    >>> confined(Path("ck"), "model-00001-of-00002.safetensors", "ck/model.safetensors.index.json: weight_map['x']")
    PosixPath('ck/model-00001-of-00002.safetensors')
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from .errors import FormatError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_NAME = 1024


def shown(name: object, limit: int = 80) -> str:
    """A name for an error message: quoted, escaped (one line) and cut to ``limit`` characters."""
    text = repr(name)
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def _problem(name: object) -> str | None:
    """Why ``name`` is not a safe relative path, or None."""
    if not isinstance(name, str):
        return f"a {type(name).__name__}, not a string"
    if not name:
        return "empty"
    if len(name) > MAX_NAME:
        return f"{len(name)} characters long"
    if _CONTROL.search(name):
        return "a control character (NUL, newline...)"
    if "\\" in name:
        return "a backslash"
    if name.startswith("/"):
        return "an absolute path"
    if _DRIVE.match(name):
        return "a drive prefix"
    parts = name.split("/")
    if any(p == ".." for p in parts):
        return "a '..' component"
    if any(p in ("", ".") for p in parts):
        return "an empty or '.' component"
    return None


def relative_name(name: object, what: str) -> str:
    """``name`` checked as a relative POSIX path that cannot leave its folder (no filesystem access)."""
    why = _problem(name)
    if why:
        raise FormatError(f"{what} names {shown(name)}, which is not a file inside the folder ({why}); "
                          "the file or server is damaged or hostile: nothing was read or written through it")
    return str(name)


def component(name: object, what: str) -> str:
    """``name`` checked as a single path component (a folder name such as a commit id)."""
    text = relative_name(name, what)
    if "/" in text:
        raise FormatError(f"{what} is {shown(name)}, which is not a single folder name (it has a '/'); "
                          "the server is damaged or hostile: nothing was written")
    return text


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def confined(root: Path, name: object, what: str, *, links_to: Iterable[Path] = ()) -> Path:
    """``root / name`` for a name from a file or server, refused unless it stays inside ``root``.

    ``what`` says where the name came from (file and key), for the error message. Symlinks are followed:
    the real path must lie in ``root`` or in one of ``links_to`` (folders a checkpoint may legitimately
    link into, like the Hugging Face cache's ``blobs``). A missing file is not an error here.
    """
    rel = PurePosixPath(relative_name(name, what))
    path = root.joinpath(*rel.parts)
    base = root.resolve()
    real = path.resolve()  # non-strict: resolves the existing part, symlinks included
    if not _inside(real, [base, *(Path(p).resolve() for p in links_to)]):
        raise FormatError(f"{what} names {shown(name)}, which is a link to {shown(str(real), 120)} outside "
                          f"{root}; copy the file into the folder instead of linking it")
    return path
