"""The GGUF metadata keys gguf-mtp uses that gguf-py's ``gguf.Keys`` does not define; every other key is read
from ``gguf.Keys`` where it is used (``Keys.LLM.BLOCK_COUNT``...), so each key name has one definition.

Per-architecture keys are templates filled with the architecture name (``arch_key(Keys.LLM.BLOCK_COUNT,
"qwen35")``), as gguf-py's are. This module imports nothing (``gguf`` loads numpy, which the runtime must load
after llama.cpp).
"""

from __future__ import annotations

#: head-only sidecar marker: the target tensors it borrows (gguf-mtp's own key)
K_SHARED_TARGET_TENSORS = "{arch}.nextn_shared_target_tensors"
#: which blocks are recurrent (llama.cpp's qwen3.5 / qwen3-next loaders read it; gguf-py has no constant)
K_RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"
#: MiMo-V2's attention value scale (llama.cpp's mimo2 reads it; gguf-py has no constant)
K_VALUE_SCALE = "{arch}.attention.value_scale"


def arch_key(template: str, arch: str) -> str:
    return template.format(arch=arch)
