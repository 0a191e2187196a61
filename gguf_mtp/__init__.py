"""gguf-mtp: multi-token-prediction (MTP / NextN) heads for GGUF models.

Convert Hugging Face checkpoints with their MTP head into GGUF (bundled, trunk-only or MTP-only
sidecar), inspect GGUF files, and (in later releases) move heads between files and run speculative
decoding with llama.cpp.

Example:
    >>> import gguf_mtp
    >>> gguf_mtp.convert("Qwen3.5-9B", outtype="q8_0")     # doctest: +SKIP
    >>> gguf_mtp.inspect_file("Qwen3.5-9B-Q8_0.gguf").layout   # doctest: +SKIP
    <Layout.BUNDLED: 'bundled'>
"""

from .convert import ConvertResult, convert
from .errors import GgufMtpError
from .inspect import FileReport, inspect_file
from .layout import Layout

__version__ = "0.1.0"
__all__ = ["convert", "ConvertResult", "inspect_file", "FileReport", "Layout", "GgufMtpError", "__version__"]
