"""A Hugging Face checkpoint folder: config.json, the safetensors shards and their tensor index."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FormatError, GgufMtpError, MissingTensorError, UnsupportedError
from ..files import open_input
from ..paths import confined, relative_name, shown
from .schema import check_config
from .shards import TensorRef, attach_fp8_scales, read_header

INDEX_NAME = "model.safetensors.index.json"


def load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        with open_input(path, path.name) as fh:  # regular files only: a FIFO would block forever
            data = json.loads(fh.read().decode("utf-8"))
    except FileNotFoundError:
        raise FormatError(f"{path}: missing; {what}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise FormatError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise FormatError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise FormatError(f"{path}: expected a JSON object")
    return data


@dataclass
class Checkpoint:
    """Config and lazily indexed tensors of a local checkpoint folder.

    Example:
        >>> ck = Checkpoint.open("Qwen3.5-9B")          # doctest: +SKIP
        >>> ck.tensor("mtp.fc.weight").shape            # doctest: +SKIP
        (4096, 8192)
    """

    root: Path
    config: dict[str, Any]
    tensors: dict[str, TensorRef] = field(default_factory=dict)

    @classmethod
    def open(cls, root: str | Path) -> Checkpoint:
        root = Path(root)
        if not root.exists():
            raise GgufMtpError(f"{root}: no such folder; pass a checkpoint folder or a Hugging Face repo id")
        if not root.is_dir():
            raise GgufMtpError(f"{root}: not a folder; pass the checkpoint folder that holds config.json")
        config_file = confined(root, "config.json", f"{root}: config.json", links_to=link_roots(root))
        config = check_config(load_json(config_file, "this folder is not a Hugging Face checkpoint"),
                              root / "config.json")
        qc = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config") or {}
        method = str(qc.get("quant_method", "")).lower()
        if method and method != "fp8":
            raise UnsupportedError(f"{root / 'config.json'}: quantization_config.quant_method = {method!r} is not "
                                   "supported (only block-scaled fp8); convert from the bf16 release of the model")
        tensors = _index(root)
        if method == "fp8":
            block = (qc.get("weight_block_size") or [128, 128])[0]
            tensors = attach_fp8_scales(tensors, int(block))
        return cls(root, config, tensors)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def tensor(self, name: str) -> TensorRef:
        try:
            return self.tensors[name]
        except KeyError:
            raise MissingTensorError(f"{self.root}: tensor {name!r} is not in the checkpoint") from None

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def files(self) -> list[Path]:
        """Every file this checkpoint consists of: all files in its folder (config, tokenizer, chat
        template, index, shards...) and every shard its tensors live in. An output must be none of them."""
        out = {Path(e.path) for e in os.scandir(self.root) if e.is_file()}
        for t in self.tensors.values():
            out.add(t.path)
            if t.scale is not None:
                out.add(t.scale.path)
        return sorted(out)


def link_roots(root: Path) -> list[Path]:
    """Folders outside ``root`` that its files may be symlinks into: the Hugging Face cache (a snapshot's
    files link to ``../../blobs``; old ``local_dir`` downloads link into the cache)."""
    out = []
    real = root.resolve()
    if real.parent.name == "snapshots":
        out.append(real.parent.parent / "blobs")
    try:
        from huggingface_hub import constants

        out.append(Path(constants.HF_HUB_CACHE))
    except ImportError:  # pragma: no cover - dependency of the package
        pass
    return out


def _index(root: Path) -> dict[str, TensorRef]:
    links = link_roots(root)
    index_path = root / INDEX_NAME
    if index_path.exists():
        index_path = confined(root, INDEX_NAME, f"{root}: {INDEX_NAME}", links_to=links)
        wm = load_json(index_path, "").get("weight_map")
        if not isinstance(wm, dict):
            raise FormatError(f"{index_path}: has no weight_map")
        shards: dict[str, list[str]] = {}
        for name, shard in wm.items():
            shards.setdefault(shard_name(shard, f"{index_path}: weight_map[{shown(name)}]"), []).append(name)
        out: dict[str, TensorRef] = {}
        for shard, names in shards.items():
            path = confined(root, shard, f"{index_path}: weight_map[{shown(names[0])}]", links_to=links)
            header = read_header(path)
            for name in names:
                if name not in header:
                    raise MissingTensorError(
                        f"{path}: tensor {shown(name)} listed in {INDEX_NAME} is not in this shard; "
                        "the download is incomplete or mixed from two revisions"
                    )
                out[name] = header[name]
        return out
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise FormatError(f"{root}: no *.safetensors files and no {INDEX_NAME}; download the weights too")
    out = {}
    where: dict[str, Path] = {}
    for f in files:
        path = confined(root, f.name, f"{root}: shard", links_to=links)
        for name, ref in read_header(path).items():
            if name in out:
                raise FormatError(f"{root}: tensor {shown(name)} is in both {where[name].name} and {f.name}, and "
                                  f"there is no {INDEX_NAME} to say which one counts; remove the stray shard")
            out[name], where[name] = ref, f
    return out


def shard_name(name: object, what: str) -> str:
    """A shard name from an index or a repo's file list: a relative path inside the folder, ``*.safetensors``."""
    text = relative_name(name, what)
    if not text.endswith(".safetensors"):
        raise FormatError(f"{what} names {shown(name)}, which is not a .safetensors file; the index is damaged")
    return text
