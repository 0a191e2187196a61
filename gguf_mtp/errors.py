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


class OutputExistsError(GgufMtpError):
    """The output path exists and ``force`` was not given."""
