"""Opening inputs and naming OS errors.

Every input gguf-mtp reads (GGUF files and shards, checkpoint files, imatrix and prompt files) is opened
through :func:`open_input`: only regular files are accepted, and the check is made on the opened
descriptor, so a FIFO, a device or a directory under the name is refused at once instead of blocking
forever on a read or a missing writer. :func:`describe_os_error` turns an ``OSError`` into one line that
names the file and says what to do.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import BinaryIO

from .errors import GgufMtpError

#: errno -> what to do about it (the strerror says what happened)
_ADVICE: dict[int, str] = {
    errno.ENOSPC: "free some space or write to another disk (--outfile)",
    errno.EDQUOT: "the disk quota is exhausted; free some space or write elsewhere (--outfile)",
    errno.EFBIG: "the file exceeds the file system's or the process's size limit (ulimit -f); "
                 "write to another file system or raise the limit",
    errno.EROFS: "the file system is read-only; write somewhere else (--outfile)",
    errno.EACCES: "check its permissions, or use another path",
    errno.EPERM: "the operation is not permitted here; check permissions, or use another path",
    errno.EISDIR: "it is a folder; name a file",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENOENT: "check the path",
    errno.ENAMETOOLONG: "use a shorter name",
    errno.ELOOP: "the path has a symlink loop",
    errno.EIO: "the disk or network file system reported an I/O error; check it (dmesg) and retry",
    errno.EMFILE: "too many open files; raise the limit (ulimit -n)",
    errno.ENFILE: "the system has too many open files; retry later",
    errno.ENOMEM: "the system is out of memory",
    errno.ETXTBSY: "the file is in use by a running program",
    errno.ESTALE: "the network file system lost the file; retry",
    errno.EXDEV: "source and destination are on different file systems",
}

_KIND = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """``"a FIFO (named pipe)"``, ``"a directory"``, ... for a ``st_mode`` that is not a regular file."""
    return next((name for test, name in _KIND if test(mode)), "not a regular file")


def describe_os_error(e: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """One line for ``e``: the file, what happened and what to do.

    Example:
        >>> describe_os_error(OSError(errno.ENOSPC, "No space left on device"), "out.gguf")
        'out.gguf: No space left on device (ENOSPC); free some space or write to another disk (--outfile)'
    """
    where = path if path is not None else e.filename
    what = e.strerror or str(e) or type(e).__name__
    if e.errno is not None and e.strerror:
        what += f" ({errno.errorcode.get(e.errno, e.errno)})"
    advice = _ADVICE.get(e.errno or 0)
    line = f"{where}: {what}" if where is not None else what
    if e.filename2 is not None and path is None:
        line += f" (and {e.filename2})"
    return line + (f"; {advice}" if advice else "")


def open_input_fd(path: str | os.PathLike[str], what: str = "file") -> int:
    """A read-only descriptor of ``path``, a regular file; never blocks.

    ``O_NONBLOCK`` makes opening a FIFO return at once (instead of waiting for a writer); the type is then
    checked on the descriptor itself, so a name swapped between a check and the open is caught too.
    A missing file raises ``FileNotFoundError`` (callers add their own hint).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise GgufMtpError(describe_os_error(e, path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise GgufMtpError(f"{path}: is {file_kind(st.st_mode)}, not a regular file; pass the {what} itself")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_input(path: str | os.PathLike[str], what: str = "file", *, buffering: int = -1) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only (see :func:`open_input_fd`)."""
    return os.fdopen(open_input_fd(path, what), "rb", buffering=buffering)


def read_input_bytes(path: str | os.PathLike[str], what: str = "file", *, missing: str = "") -> bytes:
    """All bytes of a regular file; a missing one is a one-line error (``missing`` says what to do)."""
    try:
        with open_input(path, what) as fh:
            return fh.read()
    except FileNotFoundError:
        raise GgufMtpError(f"{path}: no such file" + (f"; {missing}" if missing else "")) from None
    except GgufMtpError:
        raise
    except OSError as e:
        raise GgufMtpError(describe_os_error(e, path)) from None


def read_input_text(path: str | os.PathLike[str], what: str = "file", *, missing: str = "",
                    encoding: str = "utf-8") -> str:
    """A regular file's text; bytes that are not ``encoding`` are a one-line error naming the offset."""
    data = read_input_bytes(path, what, missing=missing)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise GgufMtpError(f"{path}: not valid {encoding.upper()} text (byte {e.start}); "
                           f"save the {what} as {encoding.upper()}") from None


__all__ = ["describe_os_error", "file_kind", "open_input", "open_input_fd", "read_input_bytes",
           "read_input_text"]
