"""The output policy: every file gguf-mtp writes goes through here.

- :func:`check_output` runs before any work. It refuses an output that is one of the command's inputs (the
  same file by any name: symlink, hard link), even with ``force``; a special file (device, FIFO, socket)
  or a folder, even with ``force``; an existing file without ``force``; a missing or unwritable folder.
  Each command passes *all* its inputs: every file of a checkpoint folder (:meth:`Checkpoint.files`),
  every shard of a GGUF split set (:attr:`GGUFModel.files`), the imatrix, the model and sidecar of a run.
- :func:`atomic_paths` writes to hidden temp files beside the targets (``.<name>.<pid>.<random>.partial``)
  and puts them in place only when the whole block succeeds: with ``os.link`` when not ``force``, so of
  two concurrent writers exactly one succeeds and the other gets "output exists"; with ``os.replace``
  under ``force``. Temp files go on any exception, ``KeyboardInterrupt`` and SIGTERM (the CLI turns it
  into :class:`~gguf_mtp.errors.Terminated`) included; ones left by a killed run (SIGKILL, power loss)
  are removed by the next run that writes the same output (:func:`remove_stale`).
- OS errors while writing (full disk, file size limit, read-only file system) become one-line
  :class:`~gguf_mtp.errors.OutputError` messages naming the output, not the temp file.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError, OutputExistsError
from ..files import describe_os_error, file_kind

#: when this process started writing outputs: temp files older than this belong to an earlier run
PROCESS_START = time.time()
_TEMP = re.compile(r"^\.(?P<base>.+)\.(?P<pid>\d+)\.[a-z0-9_]{8}\.partial$")
_LEGACY_TEMP = re.compile(r"^\.(?P<base>.+)\.[a-z0-9_]{8}\.partial$")  # before the pid was in the name
#: errno values that are about the file being written even when the error names no file
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


_FILE_MODE = 0o666 & ~_umask()  # what open() would give: mkstemp's temp files start as 0600


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_output(path: str | os.PathLike[str], *, force: bool, inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Refuse to write ``path`` unless it is a new or (with ``force``) replaceable regular file.

    ``inputs`` are all files the command reads; an output that is one of them is refused even with
    ``force``, whatever name reaches it.
    """
    path = Path(path)
    ids = {i: Path(p) for p in inputs if (i := _identity(Path(p))) is not None}
    try:
        st = os.stat(path)  # follows symlinks: what a write would reach
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(describe_os_error(e, path)) from None
    if st is not None:
        same = ids.get((st.st_dev, st.st_ino))
        if same is not None:
            shown = "" if same == path else f" ({same})"
            raise OutputError(f"{path}: output would overwrite an input file{shown}; choose another --outfile")
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{path}: output path is a directory; name a file with --outfile")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{path}: output path is {file_kind(st.st_mode)}; gguf-mtp writes only regular "
                              "files, never through special ones (even with --force); choose another --outfile")
        if not force:
            raise OutputExistsError(f"{path}: output exists; pass --force to overwrite it")
    elif os.path.lexists(path) and not force:  # a dangling symlink
        raise OutputExistsError(f"{path}: output exists (a broken symlink); pass --force to replace it")
    _check_folder(path.parent)


def _check_folder(folder: Path) -> None:
    folder = folder if str(folder) else Path(".")
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        raise OutputError(f"{folder}: output folder does not exist; create it first") from None
    except OSError as e:
        raise OutputError(describe_os_error(e, folder)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{folder}: is {file_kind(st.st_mode)}, not a folder; the output needs a folder to go in")
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise OutputError(f"{folder}: read-only file system; write the output somewhere else (--outfile)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{folder}: no permission to create files in this folder; choose another --outfile")


# -- temp files -------------------------------------------------------------------------------
def _owner(name: str) -> tuple[str, list[int | None]] | None:
    """``(output name, [pids])`` of one of our temp file names (nested for a temp of a temp), else None."""
    pids: list[int | None] = []
    base = name
    while True:
        m = _TEMP.match(base)
        if m:
            pids.append(int(m.group("pid")))
        else:
            m = _LEGACY_TEMP.match(base)
            if not m:
                break
            pids.append(None)
        base = m.group("base")
    return (base, pids) if pids else None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's live process
        return True
    return True


def remove_stale(folder: str | os.PathLike[str], name: str) -> list[Path]:
    """Remove temp files of output ``name`` in ``folder`` left by earlier runs that died (SIGKILL, power loss).

    Only our exact temp pattern, only in ``folder``, only files older than this process's start whose
    writer process is gone (a concurrent writer's temp files are kept). Returns what was removed.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        owner = _owner(entry.name)
        if owner is None or owner[0] != name:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_mtime >= PROCESS_START:
            continue
        if any(pid is not None and _alive(pid) for pid in owner[1]):
            continue
        try:
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def _new_temp(target: Path) -> Path:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".partial", dir=target.parent)
    except OSError as e:
        raise OutputError(f"{target.parent}: cannot create the output's temp file here "
                          f"({describe_os_error(e, None)})") from None
    os.close(fd)
    return Path(tmp)


def _commit(tmp: Path, target: Path, force: bool) -> None:
    """Put ``tmp`` at ``target``: replace under ``force``, else link so an existing file is never replaced."""
    os.chmod(tmp, _FILE_MODE)
    if force:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise OutputExistsError(f"{target}: output exists (written by another process meanwhile); "
                                "pass --force to overwrite it") from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS, errno.EXDEV):
            raise
        # no hard links on this file system: reserve the name exclusively, then replace the placeholder
        try:
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            raise OutputExistsError(f"{target}: output exists (written by another process meanwhile); "
                                    "pass --force to overwrite it") from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)


def _as_output_error(e: OSError, temps: list[Path], paths: list[Path]) -> OutputError | None:
    """The one-line error for an OS error raised while writing ``temps`` (None: not about the output)."""
    if e.filename is not None:
        for tmp, p in zip(temps, paths):
            if os.fspath(e.filename) == os.fspath(tmp):
                return OutputError(describe_os_error(e, p))
        return None
    if e.errno in _WRITE_ERRNOS:
        where = paths[0] if len(paths) == 1 else f"{paths[0]} ... ({len(paths)} files)"
        return OutputError(describe_os_error(e, where))
    return None


@contextmanager
def atomic_paths(paths: list[Path], *, force: bool = False) -> Iterator[list[Path]]:
    """Yield temp paths for ``paths``; put all of them in place only if the block succeeds.

    Call :func:`check_output` for each path first. Without ``force`` an output that appeared meanwhile
    is not replaced (:class:`OutputExistsError`), and none of ``paths`` is left behind.
    """
    paths = [Path(p) for p in paths]
    for p in paths:
        remove_stale(p.parent, p.name)
    temps: list[Path] = []
    placed: list[Path] = []
    try:
        for p in paths:
            temps.append(_new_temp(p))
        try:
            yield temps
        except OSError as e:
            err = _as_output_error(e, temps, paths)
            if err is None:
                raise
            raise err from None
        try:
            for tmp, p in zip(temps, paths):
                _commit(tmp, p, force)
                placed.append(p)
        except OutputExistsError:
            for p in placed:  # all or nothing: a split set is never half ours, half another writer's
                p.unlink(missing_ok=True)
            raise
        except OSError as e:
            raise OutputError(describe_os_error(e, paths[len(placed)])) from None
    finally:
        for tmp in temps:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass


@contextmanager
def scratch_path(beside: str | os.PathLike[str]) -> Iterator[Path]:
    """A hidden scratch file next to output ``beside`` (an intermediate, e.g. the head of ``extract --onto``).

    Named like :func:`atomic_paths`' temp files, so it is removed on any exit and, after a SIGKILL, by
    the next run writing ``beside``.
    """
    target = Path(beside)
    tmp = _new_temp(target)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, force: bool,
                inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """Write a small file (statistics, reports) under the same policy as the big ones."""
    path = Path(path)
    check_output(path, force=force, inputs=inputs)
    with atomic_paths([path], force=force) as (tmp,):
        with open(tmp, "wb") as fh:
            fh.write(data)
    return path


__all__ = ["check_output", "atomic_paths", "scratch_path", "remove_stale", "write_bytes", "PROCESS_START"]
