"""A model as llama.cpp sees it: one GGUF file or a split set (``<prefix>-00001-of-0000N.gguf``).

Metadata comes from the first shard (the others carry only ``split.*``); tensors from all shards.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import Keys

from ..errors import FormatError
from .format import KV
from .keys import arch_key
from .reader import GGUFFile, TensorInfo
from .validate import check_metadata, check_tensor_set

_SPLIT = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def split_path(prefix: str | Path, no: int, count: int) -> Path:
    """llama.cpp's shard name for 0-based shard ``no`` of ``count``."""
    return Path(f"{prefix}-{no + 1:05d}-of-{count:05d}.gguf")


def split_prefix(path: Path) -> Path | None:
    m = _SPLIT.match(str(path))
    return Path(m.group("prefix")) if m else None


def model_stem(path: Path) -> str:
    """File name without ``.gguf`` and without a split suffix."""
    p = split_prefix(path)
    return (p.name if p else path.name).removesuffix(".gguf")


@dataclass(frozen=True)
class Tensor:
    """A tensor and the shard it lives in."""

    info: TensorInfo
    file: GGUFFile

    @property
    def name(self) -> str:
        return self.info.name


class GGUFModel:
    """All shards of a model. Open it by any shard's path (or the single file).

    Example:
        >>> m = GGUFModel("Kimi-K2-Q4_K_M-00001-of-00013.gguf")   # doctest: +SKIP
        >>> len(m.shards), m.arch                                # doctest: +SKIP
        (13, 'deepseek2')
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        first = GGUFFile(path)
        count = first.get(Keys.Split.LLM_KV_SPLIT_COUNT, 1)
        self.shards: list[GGUFFile] = [first]
        if isinstance(count, int) and count > 1:
            prefix = split_prefix(first.path)
            if prefix is None:
                raise FormatError(f"{first.path}: split.count={count} but the name does not follow "
                                  "<prefix>-00001-of-0000N.gguf; rename the shards as gguf-split wrote them")
            no = first.get(Keys.Split.LLM_KV_SPLIT_NO, 0)
            if no != 0:
                first = GGUFFile(split_path(prefix, 0, count)) if split_path(prefix, 0, count).exists() else first
                if first.get(Keys.Split.LLM_KV_SPLIT_NO, 0) != 0:
                    raise FormatError(f"{split_path(prefix, 0, count)}: first shard of the split set is missing")
            self.shards = [first]
            for i in range(1, count):
                p = split_path(prefix, i, count)
                if not p.exists():
                    raise FormatError(f"{p}: shard {i + 1} of {count} is missing; download the whole split set")
                shard = GGUFFile(p)
                if shard.get(Keys.Split.LLM_KV_SPLIT_NO) != i:
                    raise FormatError(f"{p}: split.no is {shard.get(Keys.Split.LLM_KV_SPLIT_NO)}, expected {i}")
                self.shards.append(shard)
        self.path = self.shards[0].path
        self.kv: dict[str, KV] = dict(self.shards[0].kv)
        self.tensors: dict[str, Tensor] = {}
        for shard in self.shards:
            for name, info in shard.tensors.items():
                if name in self.tensors:
                    raise FormatError(f"{shard.path}: duplicate tensor name {name!r} across the split set")
                self.tensors[name] = Tensor(info, shard)
        check_metadata(self.path, self.kv)  # every consumer reads block_count & co. as llama.cpp would
        check_tensor_set(self.path, self.kv, self.tensors)
        declared = self.kv.get(Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT)
        if len(self.shards) > 1 and declared is not None and declared.value != len(self.tensors):
            raise FormatError(f"{self.path}: split.tensors.count is {declared.value} but the shards hold "
                              f"{len(self.tensors)} tensors; a shard is from another download")

    @property
    def files(self) -> list[Path]:
        """The paths of all shards (one for a single file): the inputs an output must not be."""
        return [s.path for s in self.shards]

    @property
    def is_split(self) -> bool:
        return len(self.shards) > 1

    @property
    def arch(self) -> str:
        a = self.get(Keys.General.ARCHITECTURE)
        if not isinstance(a, str):
            raise FormatError(f"{self.path}: no general.architecture key; not a model file")
        return a

    def get(self, key: str, default: object = None) -> Any:
        """The value of ``key`` as :meth:`KV.scalar` gives it (its type is the file's), or ``default``."""
        kv = self.kv.get(key)
        return default if kv is None else kv.scalar()

    def arch_get(self, template: str, default: object = None) -> Any:
        return self.get(arch_key(template, self.arch), default)

    @property
    def alignment(self) -> int:
        return self.shards[0].alignment

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.shards)

    def model_kvs(self) -> list[KV]:
        """Metadata without the ``split.*`` keys."""
        return [kv for k, kv in self.kv.items() if not k.startswith("split.")]
