"""Only the bytes of the MTP head, straight from the Hub.

A checkpoint's shards are tens of GB; its head is a few hundred MB. We fetch the small files (config,
tokenizer, index) whole and check them against the Hub's sha256 / git blob id, then for each shard read its
safetensors header with two HTTP Range requests, check it (:func:`parse_header`: the header must describe
exactly the file size the Hub lists), and only then make a sparse local copy of that size, into which the
byte ranges of the tensors a plan needs are written at their offsets. The converter then runs on that
folder unchanged.

Every range answer is checked before its body is read: status 206, a Content-Range naming exactly the bytes
asked for and the file size, the Hub's commit id and ETag. The cache entry of a shard
(``$GGUF_MTP_CACHE/partial/<org>--<name>/<commit>/``) is keyed by the shard's size and ETag and records each
range with the sha256 of the bytes received; on reuse every range is re-hashed, and an entry whose key or
hash no longer matches is dropped and fetched again. A connection cut mid-range keeps the bytes received, so
a resumed run asks only for the rest. ``force_download`` drops the entry first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FormatError, GgufMtpError
from ..paths import component, confined, relative_name, shown
from .folder import INDEX_NAME, load_json, shard_name
from .hub import SMALL_FILES, RemoteFile, blob_problem, endpoint, hub_error, one_line, repo_snapshot
from .shards import header_length, parse_header

GAP = 1 << 20  # ranges closer than this are fetched in one request
CHUNK = 1 << 20  # bytes per step when reading a small file or re-hashing a cached range
MAX_SMALL = 256 << 20  # largest config / tokenizer / index file accepted
STATE_NAME = ".gguf-mtp-ranges.json"
STATE_FORMAT = 2
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_OID = re.compile(r"^[0-9a-f]{40}$")


class FetchCheckError(FormatError):
    """The Hub's answer failed a check (status, Content-Range, length, commit, ETag, checksum)."""


@dataclass
class FetchReport:
    """What a head-only fetch transferred, against what the shards hold."""

    folder: Path
    bytes_fetched: int = 0
    header_bytes: int = 0
    shard_bytes: int = 0
    requests: int = 0
    shards: dict[str, int] = field(default_factory=dict)  # shard -> bytes fetched from it
    notes: list[str] = field(default_factory=list)


def _cache_root() -> Path:
    return Path(os.environ.get("GGUF_MTP_CACHE", Path.home() / ".cache" / "gguf-mtp")) / "partial"


def _norm_etag(v: str | None) -> str | None:
    if not v:
        return None
    v = v.strip()
    return (v[2:] if v.startswith("W/") else v).strip('"')


class _Cut(Exception):
    """The body of an otherwise valid answer stopped early (``got`` bytes were delivered)."""

    def __init__(self, got: int, why: str) -> None:
        super().__init__(why)
        self.got, self.why = got, why


class RemoteRepo:
    """A Hub model repo at one commit, read through huggingface_hub's HTTP layer."""

    def __init__(self, repo_id: str, revision: str | None = None) -> None:
        snap = repo_snapshot(repo_id, revision)
        self.repo_id, self.commit, self.files = snap.repo_id, snap.commit, snap.files

    def url(self, filename: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, filename, revision=self.commit, endpoint=endpoint())

    def label(self, filename: str) -> str:
        return f"{self.repo_id}/{filename}"

    def meta(self, filename: str) -> RemoteFile:
        """Size and ETag of a file: from the file list, or a HEAD request where the list lacks them."""
        f = self.files.get(filename, RemoteFile(filename))
        if f.size is not None and f.etag is not None:
            return f
        from huggingface_hub import get_hf_file_metadata

        try:
            m = get_hf_file_metadata(self.url(filename))
        except Exception as e:  # noqa: BLE001 - network errors become one line
            raise hub_error(e, self.label(filename), "HEAD request") from None
        if m.commit_hash is not None and m.commit_hash != self.commit:
            raise FetchCheckError(f"{self.label(filename)}: the Hub answered for commit {shown(m.commit_hash)} "
                                  f"instead of {self.commit}; retry later")
        size = m.size if f.size is None else f.size
        if not isinstance(size, int) or size < 0:
            raise GgufMtpError(f"{self.label(filename)}: the Hub did not report its size")
        if m.size is not None and m.size != size:
            raise FetchCheckError(f"{self.label(filename)}: the Hub lists {size} bytes but its HEAD answer says "
                                  f"{m.size}; retry later")
        if f.etag is not None:
            return RemoteFile(filename, size, f.sha256, f.blob_id)
        etag = _norm_etag(m.etag) or None  # the Hub's ETag is an LFS file's sha256, else the git blob id
        sha = etag if etag and _SHA256.match(etag) else None
        oid = etag if etag and _GIT_OID.match(etag) else None
        return RemoteFile(filename, size, sha, oid, None if sha or oid else etag)

    @contextmanager
    def _get(self, filename: str, extra: dict[str, str]) -> Iterator[Any]:
        from huggingface_hub.utils import build_hf_headers, get_session

        headers = build_hf_headers()
        headers.update(extra)
        headers["Accept-Encoding"] = "identity"
        with get_session().stream("GET", self.url(filename), headers=headers, follow_redirects=True,
                                  timeout=60) as r:
            yield r

    def _check_answer(self, f: RemoteFile, r: Any, what: str) -> None:
        """The Hub's own answer (the redirect, or the response itself) must be about this commit and file."""
        label = self.label(f.name)
        for resp in [*getattr(r, "history", []), r]:
            h = resp.headers
            commit = h.get("X-Repo-Commit")
            if commit is not None and commit != self.commit:
                raise FetchCheckError(f"{label}: {what} was answered for commit {shown(commit)} instead of "
                                      f"{self.commit}; nothing was kept, retry later")
            etag = _norm_etag(h.get("X-Linked-Etag") or (h.get("ETag") if commit is not None else None))
            if etag and f.etag and etag != f.etag:
                raise FetchCheckError(f"{label}: {what} was answered with ETag {shown(etag)}, not the file's "
                                      f"{f.etag}; the file changed or the server is wrong: nothing was kept")
            size = h.get("X-Linked-Size")
            if size is not None and f.size is not None and size.strip() != str(f.size):
                raise FetchCheckError(f"{label}: {what} was answered for a {shown(size)}-byte file, not the "
                                      f"{f.size} bytes the Hub lists; nothing was kept")
        enc = r.headers.get("Content-Encoding", "identity").strip().lower()
        if enc not in ("", "identity"):
            raise FetchCheckError(f"{label}: {what} came back {shown(enc)}-encoded though identity was asked "
                                  "for; nothing was kept")

    def _status(self, f: RemoteFile, r: Any, what: str, want: int) -> None:
        if r.status_code == want:
            return
        label = self.label(f.name)
        if want == 206 and r.status_code == 200:
            raise FetchCheckError(f"{label}: the server ignored the Range request of {what} (status 200, the whole "
                                  "file); it was not read. gguf-mtp needs a Hub or mirror that supports Range")
        if r.status_code in (401, 403):
            raise GgufMtpError(f"{label}: access denied ({r.status_code}) for {what}; set HF_TOKEN")
        if r.status_code == 404:
            raise GgufMtpError(f"{label}: not found (404) at commit {self.commit} for {what}")
        if r.status_code == 416:
            raise FetchCheckError(f"{label}: {what} is outside the file (416); the Hub's size is wrong")
        raise GgufMtpError(f"{label}: the Hub answered {r.status_code} to {what}; run again to resume "
                           "(fetched ranges are kept)")

    def fetch_range(self, f: RemoteFile, start: int, end: int, sink: Callable[[int, bytes], None]) -> None:
        """Stream bytes ``[start, end)`` of ``f`` into ``sink(offset, chunk)``.

        Status, Content-Range, Content-Length, commit and ETag are checked before the body is read. A body
        that stops early raises :class:`_Cut` after the delivered prefix went to the sink; a longer one is
        refused before its extra bytes reach the sink.
        """
        label, want = self.label(f.name), end - start
        what = f"range {start}-{end}"
        got = 0
        try:
            with self._get(f.name, {"Range": f"bytes={start}-{end - 1}"}) as r:
                self._status(f, r, what, 206)
                self._check_answer(f, r, what)
                m = _CONTENT_RANGE.match(r.headers.get("Content-Range", "").strip())
                if not m:
                    raise FetchCheckError(f"{label}: {what} came back without a valid Content-Range; nothing was "
                                          "kept")
                a, b, total = int(m.group(1)), int(m.group(2)), m.group(3)
                if (a, b + 1) != (start, end):
                    raise FetchCheckError(f"{label}: {what} returned bytes {a}-{b + 1} ({b + 1 - a} bytes instead "
                                          f"of {want}); nothing was kept, run again to resume")
                if total != "*" and f.size is not None and int(total) != f.size:
                    raise FetchCheckError(f"{label}: {what} came from a {total}-byte file, not the {f.size} bytes "
                                          "the Hub lists; nothing was kept")
                length = r.headers.get("Content-Length")
                if length is not None and length.strip() != str(want):
                    raise FetchCheckError(f"{label}: {what} announced {shown(length)} bytes instead of {want}; "
                                          "nothing was kept")
                try:
                    for chunk in r.iter_raw():  # as received, so a cut loses nothing already here
                        if got + len(chunk) > want:
                            raise FetchCheckError(f"{label}: {what} returned more than the {want} bytes asked "
                                                  "for; nothing was kept")
                        sink(start + got, chunk)
                        got += len(chunk)
                except GgufMtpError:
                    raise
                except Exception as e:  # noqa: BLE001 - the connection broke mid-body
                    raise _Cut(got, one_line(e)) from None
        except (GgufMtpError, _Cut):
            raise
        except Exception as e:  # noqa: BLE001 - connection refused, timeouts, TLS: one line
            raise hub_error(e, label, what) from None
        if got < want:
            raise _Cut(got, f"returned {got} bytes instead of {want}")

    def fetch_small(self, f: RemoteFile) -> bytes:
        """A whole small file, checked against the Hub's size and sha256 / git blob id."""
        label = self.label(f.name)
        if f.size is not None and f.size > MAX_SMALL:
            raise GgufMtpError(f"{label}: the Hub lists {f.size} bytes, more than the {MAX_SMALL >> 20} MiB "
                               "allowed for a config or tokenizer file")
        buf = bytearray()
        try:
            with self._get(f.name, {}) as r:
                self._status(f, r, "the download", 200)
                self._check_answer(f, r, "the download")
                for chunk in r.iter_raw(CHUNK):
                    buf += chunk
                    if len(buf) > (f.size if f.size is not None else MAX_SMALL):
                        raise FetchCheckError(f"{label}: the download is longer than the "
                                              f"{f.size if f.size is not None else MAX_SMALL} bytes expected; "
                                              "nothing was kept")
        except GgufMtpError:
            raise
        except Exception as e:  # noqa: BLE001 - network errors become one line
            raise hub_error(e, label, "download") from None
        why = blob_problem(bytes(buf), f)
        if why:
            raise FetchCheckError(f"{label}: the downloaded file has {why}; nothing was kept, run again")
        return bytes(buf)


# -- ranges as sorted, merged intervals ---------------------------------------------------------------------

def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _missing(covered: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """Parts of ``[a, b)`` not in the merged intervals ``covered``."""
    out, pos = [], a
    for s, e in covered:
        if e <= pos or s >= b:
            continue
        if s > pos:
            out.append((pos, s))
        pos = max(pos, e)
    if pos < b:
        out.append((pos, b))
    return out


def _parse_state(data: Any) -> dict[str, dict[str, Any]] | None:
    """The ``files`` of a state file, or None when it is not one we wrote (damaged, older format)."""
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT or not isinstance(data.get("files"), dict):
        return None
    out: dict[str, dict[str, Any]] = {}
    for name, ent in data["files"].items():
        try:
            relative_name(name, "state")
        except GgufMtpError:
            return None
        if not (isinstance(ent, dict) and isinstance(ent.get("size"), int) and ent["size"] >= 0
                and (ent.get("etag") is None or isinstance(ent.get("etag"), str))
                and isinstance(ent.get("ready"), bool)
                and isinstance(ent.get("ranges"), list)):
            return None
        for r in ent["ranges"]:
            if not (isinstance(r, list) and len(r) == 3 and all(isinstance(x, int) for x in r[:2])
                    and 0 <= r[0] < r[1] <= ent["size"] and isinstance(r[2], str) and _SHA256.match(r[2])):
                return None
        out[name] = {"size": ent["size"], "etag": ent.get("etag"), "ranges": [list(r) for r in ent["ranges"]],
                     "ready": ent["ready"]}
    return out


class PartialCheckpoint:
    """A local folder with the repo's small files and sparse copies of its shards."""

    def __init__(self, repo: RemoteRepo, *, force_download: bool = False) -> None:
        self.repo = repo
        self.root = _cache_root()
        self.folder = (self.root / component(repo.repo_id.replace("/", "--"), f"{repo.repo_id}: repo folder")
                       / component(repo.commit, f"{repo.repo_id}: commit id"))
        self.report = FetchReport(self.folder)
        self._state_path = self.folder / STATE_NAME
        if force_download:
            self.drop_all()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.files = self._load()
        self._verified: set[str] = set()

    # -- the state file -----------------------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, Any]]:
        if not self._state_path.exists():
            return {}
        try:
            files = _parse_state(json.loads(self._state_path.read_text(encoding="utf-8")))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError):
            files = None
        if files is None:
            self.report.notes.append(f"discarded {self._state_path} (damaged or from an older version) and the "
                                     "ranges it described: they are fetched anew")
            self.drop_all()
            self.folder.mkdir(parents=True, exist_ok=True)
            return {}
        return files

    def _save(self) -> None:
        tmp = self._state_path.with_name(STATE_NAME + ".tmp")
        tmp.write_text(json.dumps({"format": STATE_FORMAT, "repo": self.repo.repo_id, "commit": self.repo.commit,
                                   "files": self.files}))
        os.replace(tmp, self._state_path)

    def drop_all(self) -> None:
        """Delete this commit's cache entry (only if it really is a folder inside the cache)."""
        f = self.folder
        self.files, self._verified = {}, set()
        if f.is_symlink():
            f.unlink()
        elif f.is_dir() and self.root.resolve() in f.resolve().parents:
            shutil.rmtree(f)

    def drop_file(self, name: str) -> None:
        """Forget a shard's ranges and delete its sparse copy."""
        self.files.pop(name, None)
        self._verified.discard(name)
        self._path(name).unlink(missing_ok=True)
        self._save()

    def _path(self, name: str) -> Path:
        return confined(self.folder, name, f"{self.repo.label(name)}: shard name")

    def _covered(self, name: str) -> list[tuple[int, int]]:
        return _union([(a, b) for a, b, _ in self.files.get(name, {}).get("ranges", [])])

    def _have(self, name: str, start: int, end: int) -> bool:
        return not _missing(self._covered(name), start, end)

    def _record(self, name: str, start: int, end: int, sha: str) -> None:
        self.files[name]["ranges"].append([start, end, sha])
        self._save()

    # -- checks of what is cached ---------------------------------------------------------------------------

    def _reconcile(self, f: RemoteFile) -> None:
        """Drop a shard's cache entry when its key (size, ETag) changed or its bytes no longer hash the same."""
        name = f.name
        ent = self.files.get(name)
        if ent is None or name in self._verified:
            return
        path = self._path(name)
        if (ent["size"], ent["etag"]) != (f.size, f.etag) or not path.is_file() or path.is_symlink() \
                or (path.stat().st_size != ent["size"] if ent["ready"] else path.stat().st_size > ent["size"]):
            self.report.notes.append(f"{name}: the cached ranges were for another version of the file (or were "
                                     "damaged); fetched anew")
            self.drop_file(name)
            return
        good = []
        with open(path, "rb") as fh:
            for a, b, sha in ent["ranges"]:
                fh.seek(a)
                h = hashlib.sha256()
                left = b - a
                while left:
                    chunk = fh.read(min(CHUNK, left))
                    if not chunk:
                        break
                    h.update(chunk)
                    left -= len(chunk)
                if h.hexdigest() == sha:
                    good.append([a, b, sha])
        if len(good) != len(ent["ranges"]):
            self.report.notes.append(f"{name}: {len(ent['ranges']) - len(good)} cached ranges changed on disk; "
                                     "fetched anew")
            ent["ranges"] = good
            self._save()
        self._verified.add(name)

    # -- fetching -------------------------------------------------------------------------------------------

    def _count(self, name: str, n: int, header: bool) -> None:
        self.report.requests += 1
        self.report.bytes_fetched += n
        self.report.shards[name] = self.report.shards.get(name, 0) + n
        if header:
            self.report.header_bytes += n

    def _read_local(self, name: str, start: int, end: int) -> bytes:
        with open(self._path(name), "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    def fetch_small_files(self) -> None:
        """config, tokenizer, index...: whole, checked against the Hub's checksums, written atomically."""
        for name in SMALL_FILES:
            if name not in self.repo.files:
                continue
            f = self.repo.meta(name)
            path = self.folder / name
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_SMALL \
                    and blob_problem(path.read_bytes(), f) is None:
                continue
            data = self.repo.fetch_small(f)
            tmp = self.folder / f".{name}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)
        if not (self.folder / "config.json").exists():
            raise FormatError(f"{self.repo.repo_id}: the repo has no config.json; not a Hugging Face checkpoint")

    def shards(self) -> list[str]:
        """Shard names, from the index (each checked, and required to be in the repo) or the file list."""
        idx = self.folder / INDEX_NAME
        if not idx.exists():
            return sorted(f for f in self.repo.files if f.endswith(".safetensors") and "/" not in f)
        wm = load_json(idx, "").get("weight_map")
        label = self.repo.label(INDEX_NAME)
        if not isinstance(wm, dict):
            raise FormatError(f"{label}: has no weight_map")
        names: set[str] = set()
        for tensor, shard in wm.items():
            what = f"{label}: weight_map[{shown(tensor)}]"
            name = shard_name(shard, what)
            if name not in self.repo.files:
                raise FormatError(f"{what} names {shown(name)}, which the repo does not have; the index is "
                                  "damaged or from another revision")
            names.add(name)
        return sorted(names)

    def fetch_headers(self) -> None:
        """Fetch and check every shard's header. The local copy holds just the header until the header
        describes exactly the size the Hub lists; only then is it extended (sparse) to that size."""
        for name in self.shards():
            f = self.repo.meta(name)
            assert f.size is not None
            self._reconcile(f)
            label = self.repo.label(name)
            path = self._path(name)
            if name not in self.files:
                path.parent.mkdir(parents=True, exist_ok=True)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644))
                self.files[name] = {"size": f.size, "etag": f.etag, "ranges": [], "ready": False}
                self._save()
                self._verified.add(name)
            try:
                self._ensure(f, 0, 8)
                n = header_length(self._read_local(name, 0, 8), f.size, label)
                self._ensure(f, 8, 8 + n)
                parse_header(self._read_local(name, 8, 8 + n), f.size, label)
            except FetchCheckError:
                raise
            except FormatError as e:  # an inconsistent header: nothing of this shard may be reused
                self.drop_file(name)
                raise FormatError(f"{e}; nothing of this shard is kept, run again to fetch it anew") from None
            self.report.shard_bytes += f.size
            ent = self.files[name]
            if not ent["ready"]:
                os.truncate(path, f.size)  # sparse: only what we fetch takes disk space
                ent["ready"] = True
                self._save()

    def _ensure(self, f: RemoteFile, start: int, end: int) -> None:
        for a, b in _missing(self._covered(f.name), start, end):
            self._fetch(f, a, b, header=True)

    def _fetch(self, f: RemoteFile, start: int, end: int, header: bool = False) -> None:
        """One range into the local copy, recorded with its sha256; a cut keeps the prefix received."""
        h = hashlib.sha256()
        got = 0
        fd = os.open(self._path(f.name), os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))

        def sink(off: int, chunk: bytes) -> None:
            nonlocal got
            view = memoryview(chunk)
            while view:
                view = view[os.pwrite(fd, view, off + len(chunk) - len(view)):]
            h.update(chunk)
            got += len(chunk)

        try:
            self.repo.fetch_range(f, start, end, sink)
        except (KeyboardInterrupt, SystemExit):  # interrupted by the user or a signal: keep what arrived
            if got:
                self._record(f.name, start, start + got, h.hexdigest())
            raise
        except _Cut as c:
            if got:
                self._record(f.name, start, start + got, h.hexdigest())
            raise GgufMtpError(f"{self.repo.label(f.name)}: range {start}-{end} broke after {got} of {end - start} "
                               f"bytes ({c.why}); run again to resume (the bytes received are kept)") from None
        finally:
            os.close(fd)
            self._count(f.name, got, header)
        self._record(f.name, start, end, h.hexdigest())

    def fetch_ranges(self, ranges: list[tuple[str, int, int]]) -> None:
        """Fetch the parts of file byte ranges ``(shard, start, end)`` not held yet, merging near neighbours
        (never across bytes already held)."""
        by_file: dict[str, list[tuple[int, int]]] = {}
        for name, a, b in ranges:
            by_file.setdefault(name, []).extend(_missing(self._covered(name), a, b))
        for name, rs in by_file.items():
            f = self.repo.meta(name)
            covered = self._covered(name)
            merged: list[tuple[int, int]] = []
            for a, b in _union(rs):
                gap = (merged[-1][1], a) if merged else None
                if gap and gap[1] - gap[0] <= GAP and not any(s < gap[1] and gap[0] < e for s, e in covered):
                    merged[-1] = (merged[-1][0], b)
                else:
                    merged.append((a, b))
            for a, b in merged:
                self._fetch(f, a, b)

    def check_covered(self, ranges: list[tuple[str, int, int]]) -> None:
        """Every planned range is held (a hole of the sparse copy would read as zeros)."""
        for name, a, b in ranges:
            if not self._have(name, a, b):
                raise GgufMtpError(f"{self.repo.label(name)}: bytes {a}-{b} were not fetched; run again")


def fetch_head_checkpoint(repo_id: str, *, revision: str | None = None, layout: str = "head-only",
                          force_download: bool = False) -> FetchReport:
    """Make a local partial checkpoint holding everything a ``layout`` sidecar conversion reads."""
    from ..families import family_class
    from .folder import Checkpoint

    part = PartialCheckpoint(RemoteRepo(repo_id, revision), force_download=force_download)
    part.fetch_small_files()
    part.fetch_headers()
    ck = Checkpoint.open(part.folder)
    family = family_class(ck.config, f"{repo_id}/config.json")(ck)
    if family.mtp_layers() == 0:
        from ..errors import MissingTensorError

        raise MissingTensorError(family.mtp_missing())
    plan = family.plan(trunk=False, mtp=True, embeddings=layout != "head-only")
    def rel(p: Path) -> str:
        return p.relative_to(part.folder).as_posix()

    ranges = [(rel(s.ref.path), s.ref.offset + s.start * s.ref.itemsize,
               s.ref.offset + (s.start + s.n) * s.ref.itemsize) for t in plan.tensors for s in t.sources
              if s.ref.path is not None]  # generated tensors (rope_freqs) read nothing
    ranges += [(rel(s.ref.scale.path), s.ref.scale.offset, s.ref.scale.offset + s.ref.scale.nbytes)
               for t in plan.tensors for s in t.sources if s.ref.scale is not None]  # FP8 block scales
    part.fetch_ranges(ranges)
    part.check_covered(ranges)
    return part.report
