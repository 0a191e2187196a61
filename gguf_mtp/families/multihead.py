"""Shared shape of the families with several chained MTP heads (``mimo2``, ``step35``).

Head ``k`` becomes block ``blk.{L+k}`` (``L`` trunk layers); llama.cpp runs one head per draft step, selected
with ``llama_set_nextn_layer_offset``, and loads all declared heads or none (its loader probes head 0 only and
then requires every head). So a checkpoint whose config promises more heads than its weights hold is refused.
Both archs mix sliding-window and full attention, so several hparams are per-layer arrays of length
``block_count`` with entries for the MTP blocks. Subclasses supply the tables and ``_block``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from gguf import GGUFValueType

from ..errors import MissingTensorError, UnsupportedError
from ..ggufio.format import KV
from ..ggufio.names import MT, in_block, tensor_name
from .base import PlannedTensor
from .nextn_layer import NextnLayerFamily

#: HF scoring-function names -> llama.cpp's expert_gating_func values
GATING = {"softmax": 1, "sigmoid": 2, "sqrtsoftplus": 4}


class MultiHeadFamily(NextnLayerFamily):
    #: heads when config.json does not say (MiMo ships 3 and its config carries no count)
    default_heads: ClassVar[int] = 0
    #: (HF name under a head's prefix, or a tuple of its real spellings; GGUF tensor of block L+k; shape key;
    #: required) of the head's own tensors
    head_tensors: ClassVar[tuple[tuple[str | tuple[str, ...], MT, str, bool], ...]] = ()
    # Step stores some matrices with a leading singleton axis that its converter squeezes (the bytes are the same)
    singleton_axes = True

    def head_prefix(self, k: int) -> str:
        """HF name prefix of MTP head ``k``."""
        raise NotImplementedError

    def declared_heads(self) -> int:
        return int(self.hp.get("num_nextn_predict_layers") or self.default_heads)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of the head tensors by the keys used in ``head_tensors``."""
        H, V = self.H, self.vocab
        return {"E": (H,), "EH": (H, 2 * H), "VE": (V, H)}

    def mtp_layers(self) -> int:
        n = 0
        while self.ck.has(self.head_prefix(n) + "eh_proj.weight"):
            n += 1
        want = self.declared_heads()
        if 0 < n < want:
            raise MissingTensorError(
                f"{self.ck.root}: config.json promises {want} MTP heads but the weights hold {n} "
                f"({self.head_prefix(n)}eh_proj.weight and the rest of head {n} are missing); llama.cpp's "
                f"{self.arch} loader needs every declared head: use a complete checkpoint")
        return min(n, want) if want else n

    def mtp_missing(self) -> str:
        return (f"{self.ck.root}: the checkpoint has no MTP weights ({self.head_prefix(0)}eh_proj.weight and the "
                f"rest of the heads are missing); convert without --mtp")

    # -- per-layer metadata ---------------------------------------------------------------------
    def per_layer(self, key: str, item: GGUFValueType, values: list[Any]) -> KV:
        return KV.array(self.key(key), item, values)

    # -- tensors --------------------------------------------------------------------------------
    def _head(self, out: list[PlannedTensor], k: int) -> None:
        p, b = self.head_prefix(k), f"blk.{self.L + k}."
        shapes = self.shapes()
        for hf, t, shape, required in self.head_tensors:
            (self.put if required else self.opt)(out, self.spelled(p, hf), b + in_block(t), shapes[shape], True)
        self._block(out, self.L + k, True)

    def _output(self, out: list[PlannedTensor]) -> None:
        self.put(out, "model.norm.weight", tensor_name(MT.OUTPUT_NORM), (self.H,), False)
        # output.weight is required by both loaders even for tied embeddings: write the embedding then
        lm = "lm_head.weight" if self.ck.has("lm_head.weight") else "model.embed_tokens.weight"
        self.put(out, lm, tensor_name(MT.OUTPUT), (self.vocab, self.H), False)

    def gating(self, *keys: str) -> int:
        """expert_gating_func from the first scoring-function key the config has (sigmoid when none)."""
        name = next((self.hp[k] for k in keys if self.hp.get(k)), "sigmoid")
        if name not in GATING:
            raise UnsupportedError(f"{self.ck.root / 'config.json'}: expert scoring function {name!r} is not "
                                   f"supported by llama.cpp's {self.arch}")
        return GATING[name]
