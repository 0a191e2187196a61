"""The four file layouts, how each is recognised from metadata and tensors, and the default file names.

- ``bundled``: trunk blocks ``blk.0..n-1`` plus MTP blocks ``blk.n..n+k-1``; ``nextn_predict_layers = k``.
- ``trunk-only``: trunk blocks only; no ``nextn_predict_layers`` key (an arch that can carry a head).
- ``mtp-only`` (self-contained sidecar): MTP blocks + ``token_embd``/``output_norm``/``output``; stock
  llama.cpp loads it as a draft model.
- ``head-only`` sidecar: MTP blocks only, marked with ``<arch>.nextn_shared_target_tensors``; it borrows
  the target model's embeddings and LM head, so only gguf-mtp's runtime pairs it.
- ``no-mtp``: an architecture with no MTP support in llama.cpp.

Never decided from the file name.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from gguf import Keys

from .errors import FormatError
from .ggufio.keys import K_SHARED_TARGET_TENSORS, arch_key
from .ggufio.names import MT, tensor_name

#: tensors a head-only sidecar borrows from its target
SHARED_TARGET_TENSORS = (tensor_name(MT.TOKEN_EMBD), tensor_name(MT.OUTPUT_NORM), tensor_name(MT.OUTPUT))
EMBEDDING_TENSORS = SHARED_TARGET_TENSORS
TOKEN_EMBD, OUTPUT_NORM, OUTPUT = SHARED_TARGET_TENSORS
#: model-level tensors llama.cpp reads beside the blocks when present (llama3 RoPE factors, used by the MTP blocks
#: too): a self-contained sidecar carries them, a head-only one gets the target's when it is merged
MODEL_TENSORS = (tensor_name(MT.ROPE_FREQS),)


def borrowed_tensors(model_tensors: Iterable[str]) -> list[str]:
    """What a head-only sidecar borrows from its target: the embeddings and LM head, plus the model-level
    tensors (``rope_freqs.weight``) the source model has, so pairing can check the target has them too."""
    present = set(model_tensors)
    return list(SHARED_TARGET_TENSORS) + [n for n in MODEL_TENSORS if n in present]


MTP_SUFFIX = "-MTP"
#: the name llama.cpp users (and earlier versions) give a model's sidecar: ``mtp-<model>.gguf``
MTP_PREFIX = "mtp-"
#: the tag of ``graft``'s default output, after the target's stem
GRAFT_SUFFIX = "-with-MTP"

_BLK = re.compile(r"^blk\.(\d+)\.")


class Layout(str, Enum):
    BUNDLED = "bundled"
    TRUNK_ONLY = "trunk-only"
    MTP_ONLY = "mtp-only"
    HEAD_ONLY = "head-only"
    NO_MTP = "no-mtp"
    BROKEN = "inconsistent"

    @property
    def describe(self) -> str:
        return {
            "bundled": "bundled (model + MTP head)",
            "trunk-only": "trunk-only (no MTP head)",
            "mtp-only": "MTP-only sidecar, self-contained (carries embeddings and LM head)",
            "head-only": "MTP-only sidecar, head-only (borrows the target's embeddings and LM head)",
            "no-mtp": "no MTP (architecture without MTP support)",
            "inconsistent": "inconsistent (metadata and tensors disagree)",
        }[self.value]


def block_parts(name: str) -> tuple[int, str] | None:
    """``blk.3.attn_norm.weight`` -> ``(3, "attn_norm.weight")``; None for a tensor outside the blocks."""
    m = _BLK.match(name)
    return (int(m.group(1)), name[m.end():]) if m else None


def block_index(name: str) -> int | None:
    """The block a tensor belongs to (``blk.<i>.``), or None."""
    parts = block_parts(name)
    return parts[0] if parts else None


def renumber_block(name: str, shift: int) -> str:
    """``name`` moved ``shift`` blocks on (a graft puts the head after the target's trunk); others unchanged."""
    parts = block_parts(name)
    return f"blk.{parts[0] + shift}.{parts[1]}" if parts else name


def has_trunk_blocks(tensor_names: Iterable[str], n_trunk: int) -> bool:
    """Whether a file holds trunk blocks (below ``n_trunk``): a model, not only MTP blocks (a sidecar)."""
    return any((b := block_index(n)) is not None and b < n_trunk for n in tensor_names)


def sidecar_layout(tensor_names: Collection[str], n_trunk: int) -> Layout | None:
    """For a file with an MTP head after ``n_trunk`` trunk layers: which sidecar it is (self-contained when it
    carries the embeddings, else head-only), or None when it holds trunk blocks (a model)."""
    if has_trunk_blocks(tensor_names, n_trunk):
        return None
    return Layout.MTP_ONLY if TOKEN_EMBD in tensor_names else Layout.HEAD_ONLY


@dataclass(frozen=True)
class LayoutInfo:
    layout: Layout
    arch: str
    block_count: int
    n_mtp: int
    n_trunk: int
    has_embeddings: bool
    mtp_tensors: tuple[str, ...]
    problems: tuple[str, ...] = ()


def _count(kv: Mapping[str, object], key: str) -> int:
    """A layer count (0 when absent). GGUFModel has validated its metadata; this guards other callers."""
    v = kv.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise FormatError(f"{key} is {v!r:.40}, expected a layer count")
    return v


def detect(kv: Mapping[str, object], tensor_names: Iterable[str], mtp_archs: Iterable[str] = ()) -> LayoutInfo:
    """Classify a file from its metadata values (key -> plain value) and tensor names."""
    arch = str(kv.get(Keys.General.ARCHITECTURE, ""))
    names = list(tensor_names)
    block_count = _count(kv, arch_key(Keys.LLM.BLOCK_COUNT, arch))
    n_mtp = _count(kv, arch_key(Keys.LLM.NEXTN_PREDICT_LAYERS, arch))
    if n_mtp > block_count:
        raise FormatError(f"{arch_key(Keys.LLM.NEXTN_PREDICT_LAYERS, arch)} is {n_mtp}, more than block_count "
                          f"{block_count}")
    n_trunk = block_count - n_mtp
    blocks = {b for b in (block_index(n) for n in names) if b is not None}
    mtp_names = tuple(n for n in names if (b := block_index(n)) is not None and b >= n_trunk and n_mtp > 0)
    has_emb = TOKEN_EMBD in names
    problems: list[str] = []
    soft: list[str] = []
    if any(b >= block_count for b in blocks):
        problems.append(f"tensors for blocks beyond block_count={block_count}")
    if n_mtp > 0 and not mtp_names:
        problems.append(f"nextn_predict_layers={n_mtp} but no MTP block tensors")
    if n_mtp == 0:
        layout = Layout.TRUNK_ONLY if arch in set(mtp_archs) else Layout.NO_MTP
    else:
        layout = sidecar_layout(names, n_trunk) or Layout.BUNDLED
        if layout == Layout.HEAD_ONLY and arch_key(K_SHARED_TARGET_TENSORS, arch) not in kv:
            soft.append("head-only file without the nextn_shared_target_tensors marker")
    if problems:
        layout = Layout.BROKEN
    return LayoutInfo(layout, arch, block_count, n_mtp, n_trunk, has_emb, mtp_names, tuple(problems + soft))


#: the tag of a file without its head (``convert --no-mtp``, ``extract --strip``)
TRUNK_SUFFIX = "-trunk"
#: the tag of a head-only sidecar, after :data:`MTP_SUFFIX`
HEAD_ONLY_SUFFIX = "-head"


def default_name(stem: str, layout: Layout, trunk_type: str | None = None, head_type: str | None = None) -> str:
    """The file name a command writes without ``-o``, from the layout and the types; the one naming rule of
    ``convert`` and ``extract``.

    ``stem`` names the model the file belongs to: ``<model>-<OUTTYPE>`` for ``convert``, the source's stem for
    ``extract``. Files of other layouts or types get other names, and a sidecar's name starts with the stem of the
    model it pairs with (:func:`pairing_stems`)::

        bundled     Qwen3.5-9B-BF16.gguf
        trunk-only  Qwen3.5-9B-BF16-trunk.gguf
        mtp-only    Qwen3.5-9B-BF16-MTP-Q8_0.gguf       (the head's type, when it is not the trunk's)
        head-only   Qwen3.5-9B-BF16-MTP-head-Q8_0.gguf
    """
    if layout == Layout.BUNDLED:
        return f"{stem}.gguf"
    if layout == Layout.TRUNK_ONLY:
        return f"{stem}{TRUNK_SUFFIX}.gguf"
    if layout not in (Layout.MTP_ONLY, Layout.HEAD_ONLY):
        raise ValueError(f"no file name for layout {layout.value!r}")
    tag = MTP_SUFFIX + (HEAD_ONLY_SUFFIX if layout == Layout.HEAD_ONLY else "")
    shown = head_type.upper() if head_type and head_type.upper() != (trunk_type or "").upper() else ""
    return f"{stem}{tag}{'-' + shown if shown else ''}.gguf"


_SIDECAR_TAG = re.compile(r"-MTP(?:-head)?(?:-[A-Za-z0-9_]+)?$", re.I)


def graft_name(target_stem: str) -> str:
    """``graft``'s output without ``-o``: ``<target>-with-MTP.gguf``."""
    return f"{target_stem}{GRAFT_SUFFIX}.gguf"


def sidecar_owner(stem: str) -> str:
    """The stem of the model a sidecar named ``stem`` belongs to: ``X-BF16-MTP-head-Q8_0`` -> ``X-BF16``,
    ``mtp-X`` -> ``X`` (a sidecar made from a sidecar is named for the same model)."""
    if stem.lower().startswith(MTP_PREFIX) and len(stem) > len(MTP_PREFIX):
        return stem[len(MTP_PREFIX):]
    owner = _SIDECAR_TAG.sub("", stem)
    return owner or stem


def pairing_stems(model_stem: str) -> list[str]:
    """The stems whose sidecars belong to a model of this stem (without ``.gguf``): its own, and for a trunk
    (``<stem>-trunk``) the stem it was made under, which :func:`default_name` gives its sidecars."""
    stems = [model_stem]
    if model_stem.lower().endswith(TRUNK_SUFFIX) and len(model_stem) > len(TRUNK_SUFFIX):
        stems.append(model_stem[: -len(TRUNK_SUFFIX)])
    return stems


def looks_like_sidecar(file_name: str) -> bool:
    """Whether a file name reads as a sidecar's (``*-MTP*``, ``mtp-*``): where pairing looks, never what decides
    that a file is one (:func:`sidecar_layout` does, from its tensors)."""
    low = file_name.lower()
    return MTP_SUFFIX.lower() in low or low.startswith(MTP_PREFIX)


def sidecar_names(model_stem: str, folder: Iterable[str]) -> list[str]:
    """The names in ``folder`` (a directory's entries) of the sidecars a model of this stem may pair with, best
    first: for each of its :func:`pairing_stems`, ``<stem>-MTP.gguf`` and ``mtp-<stem>.gguf`` (earlier versions'
    names and llama.cpp users'), then ``<stem>-MTP-*.gguf`` (the :func:`default_name` s, self-contained before
    head-only); then any other ``.gguf`` that :func:`looks_like_sidecar`."""
    files = sorted(n for n in folder if n.endswith(".gguf"))
    named: list[str] = []
    for s in pairing_stems(model_stem):
        named += [n for n in (f"{s}{MTP_SUFFIX}.gguf", f"{MTP_PREFIX}{s}.gguf") if n in files]
        variant = f"{s}{MTP_SUFFIX}-".lower()
        named += sorted((n for n in files if n.lower().startswith(variant)),
                        key=lambda n: (HEAD_ONLY_SUFFIX.lower() in n.lower(), n))
    named = list(dict.fromkeys(named))
    return named + [n for n in files if n not in named and looks_like_sidecar(n)]
