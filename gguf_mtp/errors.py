"""The one error family gguf-mtp raises for user-facing problems.

Every message is a single line that names the file, tensor or key involved and says what to do.
The CLI prints ``error: <message>`` and exits with status 2; library users catch
:class:`GgufMtpError`.
"""

from __future__ import annotations


class GgufMtpError(Exception):
    """Base class: a problem with the user's input or request, never a bug in gguf-mtp."""


class FormatError(GgufMtpError):
    """A file is not a valid GGUF / safetensors / config file (truncated, bad magic, out of bounds...)."""


class UnsupportedError(GgufMtpError):
    """The input is valid but uses something gguf-mtp does not handle (architecture, dtype...)."""


class MissingTensorError(GgufMtpError):
    """A tensor the conversion or operation needs is not in the input."""


class CompatibilityError(GgufMtpError):
    """Two files that must describe the same model do not."""


class OutputError(GgufMtpError):
    """An output cannot be written there (an input, a special file, a full or read-only disk...)."""


class OutputExistsError(OutputError):
    """The output path exists and ``force`` was not given."""


class Terminated(BaseException):
    """The process got SIGTERM (or SIGHUP): unwind like Ctrl-C, cleaning temp files, then exit.

    Not a ``KeyboardInterrupt``: code that stops one answer on Ctrl-C and carries on must not swallow it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
