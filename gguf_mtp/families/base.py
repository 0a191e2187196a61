"""What a model family provides to the converter, and the plan it produces.

A family turns a checkpoint's config into GGUF metadata and a list of :class:`PlannedTensor`:
each names the GGUF tensor, its numpy shape, the checkpoint bytes it is made of and the numeric
transform (if any). The converter streams that plan into a file; it knows nothing about families.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from gguf import Keys

from ..archs import ARCHS
from ..checkpoint.folder import Checkpoint
from ..checkpoint.shards import Ref, TensorRef
from ..errors import FormatError, MissingTensorError
from ..ggufio.format import KV
from ..ggufio.keys import arch_key
from ..ggufio.names import MT, in_block

Transform = Callable[[np.ndarray], np.ndarray]
#: how a tensor's bytes are cut into sources (a permutation of row blocks, say); the whole tensor by default
Split = Callable[[TensorRef], "list[Source]"]


def plus_one(x: np.ndarray) -> np.ndarray:
    """Zero-centred norm weights -> the plain weights llama.cpp multiplies by."""
    return x + np.float32(1)


@dataclass(frozen=True)
class Source:
    """A flat element range of one checkpoint tensor, or of a generated one (the whole tensor by default)."""

    ref: Ref
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
    """Base class of a model family. A subclass sets ``arch``; the arch table's row (:mod:`gguf_mtp.archs`)
    fills ``tokenizer_pre``, ``max_heads`` and ``norm_offset`` unless the subclass sets them itself."""

    arch: ClassVar[str]
    tokenizer_pre: ClassVar[str]
    #: MTP layers llama.cpp's graph for the arch runs (None: any number, one per draft step)
    max_heads: ClassVar[int | None] = 1
    #: checkpoint norms are zero-centred: every GGUF ``*norm.weight`` is written as ``w + 1``...
    norm_offset: ClassVar[bool] = False
    #: ...except these (GGUF name suffixes), which the checkpoint stores as plain weights
    plain_norms: ClassVar[tuple[str, ...]] = ()
    #: checkpoint tensors may carry extra size-1 axes (same bytes; upstream's converter squeezes them)
    singleton_axes: ClassVar[bool] = False
    #: config keys for the context length, first present wins
    context_keys: ClassVar[tuple[str, ...]] = ("max_position_embeddings",)
    #: (type, token) special tokens llama.cpp's converter sets for the family beyond what the tokenizer files say
    extra_specials: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: checkpoint tensors consumed implicitly or not needed (never reported as unmapped)
    skip: ClassVar[re.Pattern[str]] = re.compile(r"rotary_emb\.inv_freq$|weight_scale_inv$")
    vocab: int  # rows of the embedding matrix, set by subclasses
    L: int  # trunk layers
    H: int  # hidden size
    rope_theta: float  # set by families that use attention_kvs
    rope_dims: int

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        row = ARCHS.get(cls.__dict__.get("arch", ""))
        if row is not None:
            for name in ("tokenizer_pre", "max_heads", "norm_offset"):
                if name not in cls.__dict__:
                    setattr(cls, name, getattr(row, name))

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

    def read_attention_dims(self) -> None:
        """``L`` (trunk layers), ``H``, ``nh``, ``nkv``, ``hd`` from the usual config keys."""
        self.L = int(self.need("num_hidden_layers"))
        self.H = int(self.need("hidden_size"))
        self.nh = int(self.need("num_attention_heads"))
        self.nkv = int(self.hp.get("num_key_value_heads", self.nh))
        self.hd = int(self.hp.get("head_dim") or self.H // self.nh)

    # -- metadata ---------------------------------------------------------------------------
    def key(self, template: str) -> str:
        """A per-arch GGUF key (``{arch}.block_count``...) for this family's arch."""
        return arch_key(template, self.arch)

    def arch_kvs(self, n_mtp: int) -> list[KV]:
        """The arch's metadata: block count, context and embedding length, the family's own keys
        (:meth:`hparam_kvs`), and last the MTP layer count when there are MTP layers."""
        ctx = next((self.hp[k] for k in self.context_keys if k in self.hp), 4096)
        k = self.key
        kvs = [KV.u32(k(Keys.LLM.BLOCK_COUNT), self.L + n_mtp), KV.u32(k(Keys.LLM.CONTEXT_LENGTH), int(ctx)),
               KV.u32(k(Keys.LLM.EMBEDDING_LENGTH), self.H), *self.hparam_kvs(n_mtp)]
        if n_mtp:
            kvs.append(KV.u32(k(Keys.LLM.NEXTN_PREDICT_LAYERS), n_mtp))
        return kvs

    def hparam_kvs(self, n_mtp: int) -> list[KV]:
        """The family's metadata between the common leading keys and ``nextn_predict_layers``."""
        raise NotImplementedError

    def attention_kvs(self, eps: float) -> list[KV]:
        """Plain GQA attention: head counts, key/value length ``hd``, RMS epsilon, RoPE base and dims (the family
        sets ``rope_theta`` and ``rope_dims``)."""
        k = self.key
        return [KV.u32(k(Keys.Attention.HEAD_COUNT), self.nh), KV.u32(k(Keys.Attention.HEAD_COUNT_KV), self.nkv),
                KV.u32(k(Keys.Attention.KEY_LENGTH), self.hd), KV.u32(k(Keys.Attention.VALUE_LENGTH), self.hd),
                KV.f32(k(Keys.Attention.LAYERNORM_RMS_EPS), float(self.hp.get("rms_norm_eps", eps))),
                KV.f32(k(Keys.Rope.FREQ_BASE), self.rope_theta), KV.u32(k(Keys.Rope.DIMENSION_COUNT), self.rope_dims)]

    # -- tensors ----------------------------------------------------------------------------
    def put(self, out: list[PlannedTensor], hf: str, gguf: str, shape: tuple[int, ...], mtp: bool,
            np_shape: tuple[int, ...] | None = None, whole: Transform | None = None, *,
            elementwise: Transform | None = None, split: Split | None = None) -> None:
        """Plan GGUF tensor ``gguf`` from checkpoint tensor ``hf`` of ``shape``: ``np_shape`` and ``whole`` when a
        transform reshapes it, ``elementwise`` for a numeric one (the norm offset is added by itself),
        ``split`` to take its bytes as several ranges."""
        ref = self.source_tensor(hf, shape)
        if elementwise is None and self.norm_offset and gguf.endswith("norm.weight") \
                and not gguf.endswith(self.plain_norms):
            elementwise = plus_one
        sources = split(ref) if split else [Source(ref)]
        out.append(PlannedTensor(gguf, np_shape or shape, sources, mtp, elementwise, whole, shape if whole else None))

    def opt(self, out: list[PlannedTensor], hf: str, gguf: str, shape: tuple[int, ...], mtp: bool) -> None:
        """:meth:`put` when the checkpoint has ``hf`` (the loader treats the GGUF tensor as optional)."""
        if self.ck.has(hf):
            self.put(out, hf, gguf, shape, mtp)

    def source_tensor(self, name: str, shape: tuple[int, ...]) -> TensorRef:
        """:meth:`tensor`, tolerating size-1 axes when the family's checkpoints have them."""
        if self.singleton_axes:
            ref = self.ck.tensor(name)
            if tuple(d for d in ref.shape if d != 1) == tuple(d for d in shape if d != 1):
                return ref
        return self.tensor(name, shape)

    def ffn_triple(self, out: list[PlannedTensor], p: str, b: str, gguf: tuple[MT, MT, MT], ff: int,
                   mtp: bool) -> None:
        """``{p}{gate,up,down}_proj.weight`` -> the ``gguf`` (gate, up, down) tensors of block ``b``: a SwiGLU MLP
        of width ``ff``."""
        H = self.H
        for proj, t, shape in zip(("gate_proj", "up_proj", "down_proj"), gguf, ((ff, H), (ff, H), (H, ff))):
            self.put(out, f"{p}{proj}.weight", b + in_block(t), shape, mtp)

    def dense_ffn(self, out: list[PlannedTensor], p: str, b: str, mtp: bool) -> None:
        """The dense MLP ``{p}mlp.*`` of width ``intermediate_size``."""
        ff = int(self.need("intermediate_size"))
        self.ffn_triple(out, p + "mlp.", b, (MT.FFN_GATE, MT.FFN_UP, MT.FFN_DOWN), ff, mtp)

    def shared_expert(self, out: list[PlannedTensor], p: str, b: str, ff: int, mtp: bool) -> None:
        """A shared expert under HF prefix ``p`` (spelled differently per family) as ``ffn_*_shexp``."""
        self.ffn_triple(out, p, b, (MT.FFN_GATE_SHEXP, MT.FFN_UP_SHEXP, MT.FFN_DOWN_SHEXP), ff, mtp)

    def expert_tensors(self, p: str, b: str, E: int, Ie: int, mtp: bool) -> list[PlannedTensor]:
        """``ffn_{gate,up,down}_exps`` of layer prefix ``p`` (HF) / ``b`` (GGUF): stacked per-expert tensors, or a
        fused ``experts.gate_up_proj`` split in halves as byte ranges (no copy through memory)."""
        H = self.H
        fused = p + "mlp.experts.gate_up_proj"
        if self.ck.has(fused) or self.ck.has(fused + ".weight"):
            suffix = "" if self.ck.has(fused) else ".weight"
            gu = self.tensor(fused + suffix, (E, 2 * Ie, H))
            per = Ie * H
            return [PlannedTensor(b + in_block(MT.FFN_GATE_EXP), (E, Ie, H),
                                  [Source(gu, e * 2 * per, per) for e in range(E)], mtp),
                    PlannedTensor(b + in_block(MT.FFN_UP_EXP), (E, Ie, H),
                                  [Source(gu, e * 2 * per + per, per) for e in range(E)], mtp),
                    PlannedTensor(b + in_block(MT.FFN_DOWN_EXP), (E, H, Ie),
                                  [Source(self.tensor(p + "mlp.experts.down_proj" + suffix, (E, H, Ie)))], mtp)]
        out = []
        for proj, t, shape in (("gate_proj", MT.FFN_GATE_EXP, (Ie, H)), ("up_proj", MT.FFN_UP_EXP, (Ie, H)),
                               ("down_proj", MT.FFN_DOWN_EXP, (H, Ie))):
            srcs = [Source(self.tensor(f"{p}mlp.experts.{e}.{proj}.weight", shape)) for e in range(E)]
            out.append(PlannedTensor(b + in_block(t), (E, *shape), srcs, mtp))
        return out

    def spelled(self, prefix: str, names: str | tuple[str, ...]) -> str:
        """``prefix`` + the first of ``names`` (spellings of one tensor in released checkpoints and the loaders
        that read them) that the checkpoint has; the first spelling when none is there (the error then names it)."""
        names = (names,) if isinstance(names, str) else names
        return next((prefix + n for n in names if self.ck.has(prefix + n)), prefix + names[0])

    def tensor(self, name: str, shape: tuple[int, ...]) -> TensorRef:
        """The checkpoint tensor ``name``, checked to have ``shape`` (numpy order)."""
        ref = self.ck.tensor(name)
        if tuple(ref.shape) != tuple(shape):
            raise FormatError(
                f"{ref.path}: tensor {name!r} has shape {list(ref.shape)}, expected {list(shape)} from config.json; "
                "the weights do not belong to this config"
            )
        return ref

    def unused_tensors(self, used: set[str]) -> list[str]:
        """Checkpoint tensors that a full (bundled) plan would not consume."""
        return sorted(n for n in self.ck.tensors if n not in used and not self.skip.search(n))

    # -- to implement ----------------------------------------------------------------------
    def mtp_layers(self) -> int:
        """MTP layers present in the checkpoint's weights (0 when it has none)."""
        raise NotImplementedError

    def mtp_missing(self) -> str:
        """A sentence saying which MTP weights are missing (used when --mtp is refused)."""
        raise NotImplementedError

    def plan(self, *, trunk: bool, mtp: bool, embeddings: bool) -> ModelPlan:
        raise NotImplementedError

    def generated(self) -> list[PlannedTensor]:
        """Model-level tensors computed from the config, not copied (e.g. ``rope_freqs.weight``). Plans write them
        with the embeddings: every file llama.cpp loads on its own has them, a head-only sidecar borrows them."""
        return []


def missing(ck: Checkpoint, name: str, why: str) -> MissingTensorError:
    return MissingTensorError(f"{ck.root}: tensor {name!r} is not in the checkpoint ({why})")
