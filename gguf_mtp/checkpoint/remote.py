"""Only the bytes of the MTP head, straight from the Hub.

A checkpoint's shards are tens of GB; its head is a few hundred MB. We fetch the small files (config,
tokenizer, index) the normal way, then for each shard read its safetensors header with two HTTP Range
requests and fetch just the byte ranges of the tensors a plan needs, writing them at their offsets into
a sparse local copy of the shard. The converter then runs on that folder unchanged. Fetched ranges are
recorded, so an interrupted run resumes where it stopped; a short or failed range is an error and leaves
no output.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FormatError, GgufMtpError

SMALL_FILES = ["config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja", "chat_template.json", "generation_config.json"]
GAP = 1 << 20  # ranges closer than this are fetched in one request


@dataclass
class FetchReport:
    """What a head-only fetch transferred, against what the shards hold."""

    folder: Path
    bytes_fetched: int = 0
    header_bytes: int = 0
    shard_bytes: int = 0
    requests: int = 0
    shards: dict[str, int] = field(default_factory=dict)  # shard -> bytes fetched from it


def _endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def _cache_root() -> Path:
    return Path(os.environ.get("GGUF_MTP_CACHE", Path.home() / ".cache" / "gguf-mtp")) / "partial"


class RemoteRepo:
    """A Hub model repo at one commit, read through huggingface_hub's HTTP layer."""

    def __init__(self, repo_id: str, revision: str | None = None) -> None:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

        self.repo_id = repo_id
        self.api = HfApi(endpoint=_endpoint())
        try:
            info = self.api.model_info(repo_id, revision=revision)
        except RepositoryNotFoundError:
            raise GgufMtpError(f"{repo_id}: no such repository on the Hub (or it is private: set HF_TOKEN)") from None
        except RevisionNotFoundError:
            raise GgufMtpError(f"{repo_id}: revision {revision!r} not found") from None
        except HfHubHTTPError as e:
            raise GgufMtpError(f"{repo_id}: the Hub answered {e.response.status_code if e.response else '?'}; "
                               "retry later (fetched ranges are kept)") from None
        self.commit = info.sha or (revision or "main")
        self.files = {s.rfilename for s in (info.siblings or [])}

    def url(self, filename: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, filename, revision=self.commit, endpoint=_endpoint())

    def get_range(self, filename: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a file; refuses a short answer."""
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        headers = build_hf_headers()
        headers["Range"] = f"bytes={start}-{end - 1}"
        headers["Accept-Encoding"] = "identity"
        try:
            r = get_session().get(self.url(filename), headers=headers, follow_redirects=True, timeout=60)
            hf_raise_for_status(r)
            data = r.content
        except GgufMtpError:
            raise
        except Exception as e:  # noqa: BLE001 - network errors of any kind become one line
            raise GgufMtpError(f"{self.repo_id}/{filename}: range {start}-{end} failed ({type(e).__name__}: "
                               f"{str(e).splitlines()[0][:160]}); run again to resume") from None
        if len(data) != end - start:
            raise GgufMtpError(f"{self.repo_id}/{filename}: range {start}-{end} returned {len(data)} bytes instead of "
                               f"{end - start}; run again to resume")
        return data

    def size(self, filename: str) -> int:
        from huggingface_hub import get_hf_file_metadata

        meta = get_hf_file_metadata(self.url(filename))
        if meta.size is None:
            raise GgufMtpError(f"{self.repo_id}/{filename}: the Hub did not report its size")
        return int(meta.size)


class PartialCheckpoint:
    """A local folder with the repo's small files and sparse copies of its shards."""

    def __init__(self, repo: RemoteRepo) -> None:
        self.repo = repo
        self.folder = _cache_root() / repo.repo_id.replace("/", "--") / repo.commit
        self.folder.mkdir(parents=True, exist_ok=True)
        self.report = FetchReport(self.folder)
        self._state_path = self.folder / ".gguf-mtp-ranges.json"
        self.state: dict[str, list[list[int]]] = (json.loads(self._state_path.read_text())
                                                  if self._state_path.exists() else {})

    def _save(self) -> None:
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        os.replace(tmp, self._state_path)

    def _have(self, name: str, start: int, end: int) -> bool:
        return any(a <= start and end <= b for a, b in self.state.get(name, []))

    def fetch_small_files(self) -> None:
        from huggingface_hub import hf_hub_download

        for name in SMALL_FILES:
            if name in self.repo.files and not (self.folder / name).exists():
                p = hf_hub_download(self.repo.repo_id, name, revision=self.repo.commit, endpoint=_endpoint())
                data = Path(p).read_bytes()
                tmp = self.folder / f".{name}.tmp"
                tmp.write_bytes(data)
                os.replace(tmp, self.folder / name)
        if not (self.folder / "config.json").exists():
            raise FormatError(f"{self.repo.repo_id}: the repo has no config.json; not a Hugging Face checkpoint")

    def shards(self) -> list[str]:
        idx = self.folder / "model.safetensors.index.json"
        if idx.exists():
            return sorted(set(json.loads(idx.read_text())["weight_map"].values()))
        return sorted(f for f in self.repo.files if f.endswith(".safetensors"))

    def _write(self, name: str, offset: int, data: bytes) -> None:
        with open(self.folder / name, "r+b") as fh:
            fh.seek(offset)
            fh.write(data)

    def fetch_headers(self) -> None:
        for name in self.shards():
            path = self.folder / name
            if not path.exists():
                size = self.repo.size(name)
                with open(path, "wb") as fh:
                    fh.truncate(size)  # sparse: only what we fetch takes disk space
            size = path.stat().st_size
            self.report.shard_bytes += size
            if not self._have(name, 0, 8):
                self._fetch(name, 0, 8, header=True)
            with open(path, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
            if 8 + n > size:
                raise FormatError(f"{self.repo.repo_id}/{name}: header length {n} exceeds the file ({size} bytes)")
            if not self._have(name, 8, 8 + n):
                self._fetch(name, 8, 8 + n, header=True)

    def _fetch(self, name: str, start: int, end: int, header: bool = False) -> None:
        data = self.repo.get_range(name, start, end)
        self._write(name, start, data)
        self.state.setdefault(name, []).append([start, end])
        self._save()
        self.report.requests += 1
        self.report.bytes_fetched += len(data)
        self.report.shards[name] = self.report.shards.get(name, 0) + len(data)
        if header:
            self.report.header_bytes += len(data)

    def fetch_ranges(self, ranges: list[tuple[str, int, int]]) -> None:
        """Fetch file byte ranges ``(shard, start, end)`` not fetched before, merging near neighbours."""
        by_file: dict[str, list[tuple[int, int]]] = {}
        for name, a, b in ranges:
            if not self._have(name, a, b):
                by_file.setdefault(name, []).append((a, b))
        for name, rs in by_file.items():
            rs.sort()
            merged: list[list[int]] = []
            for a, b in rs:
                if merged and a - merged[-1][1] <= GAP:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            for a, b in merged:
                self._fetch(name, a, b)


def fetch_head_checkpoint(repo_id: str, *, revision: str | None = None, layout: str = "head-only") -> FetchReport:
    """Make a local partial checkpoint holding everything a ``layout`` sidecar conversion reads."""
    from ..families import family_class
    from .folder import Checkpoint

    part = PartialCheckpoint(RemoteRepo(repo_id, revision))
    part.fetch_small_files()
    part.fetch_headers()
    ck = Checkpoint.open(part.folder)
    family = family_class(ck.config, f"{repo_id}/config.json")(ck)
    if family.mtp_layers() == 0:
        from ..errors import MissingTensorError

        raise MissingTensorError(family.mtp_missing())
    plan = family.plan(trunk=False, mtp=True, embeddings=layout != "head-only")
    ranges = [(s.ref.path.name, s.ref.offset + s.start * s.ref.itemsize,
               s.ref.offset + (s.start + s.n) * s.ref.itemsize) for t in plan.tensors for s in t.sources
              if s.ref.path is not None]  # generated tensors (rope_freqs) read nothing
    ranges += [(s.ref.scale.path.name, s.ref.scale.offset, s.ref.scale.offset + s.ref.scale.nbytes)
               for t in plan.tensors for s in t.sources if s.ref.scale is not None]  # FP8 block scales
    part.fetch_ranges(ranges)
    return part.report
