"""What a model family provides to the converter, and the plan it produces.

A family turns a checkpoint's config into GGUF metadata and a list of :class:`PlannedTensor`:
each names the GGUF tensor, its numpy shape, the checkpoint bytes it is made of and the numeric
transform (if any). The converter streams that plan into a file; it knows nothing about families.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..checkpoint.folder import Checkpoint
from ..checkpoint.safetensors import TensorRef
from ..errors import FormatError, MissingTensorError
from ..ggufio.format import KV

Transform = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Source:
    """A flat element range of one checkpoint tensor (the whole tensor by default)."""

    ref: TensorRef
    start: int = 0
    count: int = -1

    @property
    def n(self) -> int:
        return self.ref.n_elements - self.start if self.count < 0 else self.count


@dataclass
class PlannedTensor:
    """One GGUF tensor to write.

    ``elementwise`` transforms may be applied chunk by chunk (e.g. ``w + 1``); ``whole`` transforms
    need the full array in ``src_shape`` and return it in ``np_shape``. ``whole`` transforms must only
    move values (reorder, split, reshape), never compute: they are applied to stored bits when the
    output type equals the source dtype.
    """

    name: str
    np_shape: tuple[int, ...]
    sources: list[Source]
    mtp: bool = False
    elementwise: Transform | None = None
    whole: Transform | None = None
    src_shape: tuple[int, ...] | None = None

    @property
    def ggml_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.np_shape))

    @property
    def src_bytes(self) -> int:
        return sum(s.n * s.ref.itemsize for s in self.sources)


@dataclass
class ModelPlan:
    """Everything the converter needs: metadata (without tokenizer/general keys) and tensors."""

    arch: str
    kvs: list[KV]
    tensors: list[PlannedTensor]
    n_trunk: int
    n_mtp: int
    notes: list[str] = field(default_factory=list)


class Family:
    """Base class of a model family. Subclasses are registered in :mod:`gguf_mtp.families`."""

    arch: ClassVar[str]
    hf_architectures: ClassVar[tuple[str, ...]]
    tokenizer_pre: ClassVar[str]

    def __init__(self, ck: Checkpoint) -> None:
        self.ck = ck
        self.config = ck.config
        self.hp = self.text_hparams(ck.config)

    @staticmethod
    def text_hparams(config: dict[str, Any]) -> dict[str, Any]:
        """Top-level config merged with ``text_config`` (multimodal wrappers keep text keys there)."""
        return {**config, **(config.get("text_config") or {})}

    def need(self, key: str) -> Any:
        if key not in self.hp:
            raise FormatError(f"{self.ck.root / 'config.json'}: missing key {key!r} required for {self.arch}")
        return self.hp[key]

    def tensor(self, name: str, shape: tuple[int, ...]) -> TensorRef:
        """The checkpoint tensor ``name``, checked to have ``shape`` (numpy order)."""
        ref = self.ck.tensor(name)
        if tuple(ref.shape) != tuple(shape):
            raise FormatError(
                f"{ref.path}: tensor {name!r} has shape {list(ref.shape)}, expected {list(shape)} from config.json; "
                "the weights do not belong to this config"
            )
        return ref

    # -- to implement ----------------------------------------------------------------------
    def mtp_layers(self) -> int:
        """MTP layers present in the checkpoint's weights (0 when it has none)."""
        raise NotImplementedError

    def mtp_missing(self) -> str:
        """A sentence saying which MTP weights are missing (used when --mtp is refused)."""
        raise NotImplementedError

    def plan(self, *, trunk: bool, mtp: bool, embeddings: bool) -> ModelPlan:
        raise NotImplementedError


def missing(ck: Checkpoint, name: str, why: str) -> MissingTensorError:
    return MissingTensorError(f"{ck.root}: tensor {name!r} is not in the checkpoint ({why})")
