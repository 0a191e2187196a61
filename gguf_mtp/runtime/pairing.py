"""Which MTP head a model runs with: its own (bundled), a sidecar next to it (found like an mmproj file),
a sidecar named by the user, or none. Compatibility is checked before anything is loaded."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ..errors import GgufMtpError
from ..ggufio.model import GGUFModel, model_stem
from ..ggufio.validate import check_tensor_types
from ..head import check_compatible, find_head
from ..layout import Layout, sidecar_names


class HeadSource(str, Enum):
    BUNDLED = "bundled"
    SELF_CONTAINED = "self-contained sidecar"
    HEAD_ONLY = "head-only sidecar"
    NONE = "none"


@dataclass
class Pairing:
    """The decision, and why (``notice`` is shown to the user when MTP is off)."""

    source: HeadSource
    model: GGUFModel
    sidecar: GGUFModel | None = None
    notice: str = ""


def sidecar_candidates(model_path: Path) -> list[Path]:
    """The files beside a model it may pair with, best first (:func:`gguf_mtp.layout.sidecar_names`)."""
    d, me = model_path.parent, model_path.resolve()
    return [p for p in (d / n for n in sidecar_names(model_stem(model_path), os.listdir(d))) if p.resolve() != me]


def _sidecar_layout(m: GGUFModel) -> Layout | None:
    head = find_head(m)
    return None if head is None else head.sidecar


def _check_types(m: GGUFModel) -> None:
    check_tensor_types(m.path, ((n, t.info.ggml_type) for n, t in m.tensors.items()))


def _check_runnable(model: GGUFModel) -> None:
    """Refuse what llama.cpp would crash on: a sidecar given as the model, tensors of a type their op cannot use."""
    lay = _sidecar_layout(model)
    if lay is not None:
        what = "self-contained" if lay == Layout.MTP_ONLY else "head-only"
        head = find_head(model)
        assert head is not None
        raise GgufMtpError(f"{model.path}: is a {what} MTP sidecar (the MTP head of a {model.arch} model with "
                           f"{head.n_trunk} trunk layers), not a model; run the model with it: "
                           f"gguf-mtp run MODEL.gguf --mtp {model.path}")
    _check_types(model)


def resolve(model_path: str | os.PathLike[str], mtp: str | os.PathLike[str] | bool | None = "auto") -> Pairing:
    """Decide the head for ``model_path``. ``mtp``: ``"auto"`` (bundled head, else a sidecar beside the
    model), a sidecar path, or ``False``/``None`` (no speculation)."""
    model = GGUFModel(model_path)
    _check_runnable(model)
    if mtp is False or mtp is None:
        return Pairing(HeadSource.NONE, model, notice="MTP disabled (--no-mtp)")
    if isinstance(mtp, (str, Path)) and str(mtp) != "auto":
        side = GGUFModel(mtp)
        lay = _sidecar_layout(side)
        if lay is None:
            raise GgufMtpError(f"{side.path}: not an MTP sidecar (no MTP head, or it carries a trunk); "
                               "pass a file written by `gguf-mtp convert --mtp` or `gguf-mtp extract`")
        head = find_head(side)
        assert head is not None
        check_compatible(head, model)
        _check_types(side)
        return Pairing(HeadSource.SELF_CONTAINED if lay == Layout.MTP_ONLY else HeadSource.HEAD_ONLY, model, side)
    if find_head(model) is not None:
        return Pairing(HeadSource.BUNDLED, model)
    rejected: list[str] = []
    for cand in sidecar_candidates(Path(model_path)):
        try:
            side = GGUFModel(cand)
            lay = _sidecar_layout(side)
            head = find_head(side)
            if lay is None or head is None:
                continue
            check_compatible(head, model)
            _check_types(side)
        except GgufMtpError as e:
            rejected.append(f"{cand.name} ({str(e).split(': ', 1)[-1][:120]})")
            continue
        return Pairing(HeadSource.SELF_CONTAINED if lay == Layout.MTP_ONLY else HeadSource.HEAD_ONLY, model, side)
    why = f"; ignored {', '.join(rejected)}" if rejected else ""
    return Pairing(HeadSource.NONE, model,
                   notice=f"{Path(model_path).name} has no MTP head and no sidecar was found beside it{why}: "
                          "plain decoding")
