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

# Load llama.cpp's libraries before numpy: a CUDA build whose libggml-cuda exports its own copy of libstdc++
# symbols crashes at model load when numpy's libraries came first (seen with CUDA 13 on an H200).
try:
    import llama_cpp.llama_cpp  # noqa: F401
except Exception:  # noqa: BLE001 - llama-cpp-python missing or broken: only the runtime needs it
    pass

from .convert import ConvertResult, convert  # noqa: E402
from .errors import GgufMtpError  # noqa: E402
from .inspect import FileReport, inspect_file  # noqa: E402
from .layout import Layout  # noqa: E402

__version__ = "0.1.0"
__all__ = ["convert", "ConvertResult", "inspect_file", "FileReport", "Layout", "GgufMtpError", "__version__"]
