"""What a GGUF file holds, from the MTP point of view: layout, layer counts, the head's tensors."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .archs import mtp_archs
from .draft_head import is_draft_head, lm_head
from .ggml_types import file_type_name, type_name
from .ggufio.model import GGUFModel
from .layout import Layout, detect
from .progress import human_bytes


@dataclass(frozen=True)
class TensorSummary:
    name: str
    type: str
    shape: list[int]
    nbytes: int


@dataclass(frozen=True)
class FileReport:
    """Summary of one GGUF file. ``layout`` is decided from metadata and tensors only."""

    path: str
    architecture: str
    layout: Layout
    file_type: str | None
    block_count: int
    trunk_layers: int
    mtp_layers: int
    has_embeddings: bool
    tensor_count: int
    file_size: int
    mtp_bytes: int
    mtp_tensors: list[TensorSummary]
    problems: list[str]
    #: the MTP layers' own LM heads (``nextn.shared_head_head``: drafts read them instead of ``output``), and the
    #: LM head the target verifies with (None in a head-only sidecar)
    draft_heads: list[TensorSummary] = field(default_factory=list)
    lm_head: TensorSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layout"] = self.layout.value
        return d

    def _layers(self) -> str:
        if self.layout in (Layout.MTP_ONLY, Layout.HEAD_ONLY):
            return (f"{self.mtp_layers} MTP here; the target has {self.trunk_layers} trunk "
                    f"(block_count {self.block_count})")
        return f"{self.trunk_layers} trunk + {self.mtp_layers} MTP (block_count {self.block_count})"

    def format(self) -> str:
        """A compact human-readable table."""
        rows = [
            ("file", self.path),
            ("architecture", self.architecture or "?"),
            ("layout", self.layout.describe),
            ("file type", self.file_type or "?"),
            ("layers", self._layers()),
            ("embeddings", "present" if self.has_embeddings else "absent (borrowed from the target model)"),
            ("tensors", str(self.tensor_count)),
            ("size", f"{human_bytes(self.file_size)} (MTP head {human_bytes(self.mtp_bytes)})"),
        ]
        if self.draft_heads:
            types = "/".join(sorted({t.type for t in self.draft_heads}))
            verify = f"; the target verifies with {self.lm_head.name} ({self.lm_head.type})" if self.lm_head else ""
            rows.append(("draft LM head", f"{types}, {len(self.draft_heads)} layer(s), "
                                          f"{human_bytes(sum(t.nbytes for t in self.draft_heads))}{verify}"))
        w = max(len(k) for k, _ in rows)
        lines = [f"{k:<{w}}  {v}" for k, v in rows]
        if self.mtp_tensors:
            nw = max(len(t.name) for t in self.mtp_tensors)
            lines += ["", f"{'MTP tensor':<{nw}}  {'type':<6}  {'shape':<18}  size"]
            for t in self.mtp_tensors:
                lines.append(f"{t.name:<{nw}}  {t.type:<6}  {str(t.shape):<18}  {human_bytes(t.nbytes)}")
        for p in self.problems:
            lines.append(f"warning: {p}")
        return "\n".join(lines)


def inspect_file(path: str | os.PathLike[str]) -> FileReport:
    """Read ``path``'s header (no tensor data) and report its layout and MTP head.

    Example:
        >>> inspect_file("Qwen3.5-9B-Q8_0-MTP.gguf").layout        # doctest: +SKIP
        <Layout.MTP_ONLY: 'mtp-only'>
    """
    m = GGUFModel(path)  # a split set is inspected whole, from any of its shards
    values = {k: kv.value for k, kv in m.kv.items() if kv.vtype != 9}  # scalars suffice for detection
    for k in m.kv:
        if k.endswith("nextn_shared_target_tensors"):
            values[k] = True
    info = detect(values, m.tensors.keys(), mtp_archs())
    infos = {n: t.info for n, t in m.tensors.items()}

    def summary(n: str) -> TensorSummary:
        return TensorSummary(n, infos[n].type_name, list(infos[n].shape), infos[n].nbytes)

    mtp = [summary(n) for n in info.mtp_tensors]
    lm = lm_head(m)
    shown = str(Path(path)) + (f" (+{len(m.shards) - 1} more shards)" if m.is_split else "")
    return FileReport(
        path=shown, architecture=info.arch, layout=info.layout,
        file_type=file_type_name(m.get("general.file_type")), block_count=info.block_count,
        trunk_layers=info.n_trunk, mtp_layers=info.n_mtp, has_embeddings=info.has_embeddings,
        tensor_count=len(m.tensors), file_size=m.total_bytes, mtp_bytes=sum(t.nbytes for t in mtp),
        mtp_tensors=mtp, problems=list(info.problems),
        draft_heads=[t for t in mtp if is_draft_head(t.name)], lm_head=summary(lm.name) if lm is not None else None,
    )


__all__ = ["inspect_file", "FileReport", "TensorSummary", "type_name"]
