"""Resolving a MODEL argument: a local folder, or a Hugging Face repo id fetched into the normal HF cache.

Everything the Hub says is checked before it names a path: the repo id (huggingface_hub's rules), the
commit id (40 hex digits: it becomes a folder name) and every file name of the repo (no ``..``, no absolute
path). After a download the small files are checked against the Hub's sha256 / git blob id and the shards
against their sizes.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import FormatError, GgufMtpError
from ..paths import relative_name, shown

#: what a conversion needs from a repo (no README images, no original/ or consolidated weights)
CONVERT_PATTERNS = ["config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json",
                    "tokenizer_config.json", "chat_template.jinja", "chat_template.json", "generation_config.json",
                    "tiktoken.model"]
#: the files of a checkpoint other than its shards (checked whole against the Hub's checksums)
SMALL_FILES = ["config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja", "chat_template.json", "generation_config.json", "tiktoken.model"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_OID = re.compile(r"^[0-9a-f]{40}$")


def repo_id_problem(text: str) -> str | None:
    """Why ``text`` (shaped like ``org/name``) is not a repo id the Hub accepts, or None."""
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:  # pragma: no cover - dependency of the package
        return None
    try:
        validate_repo_id(text)
    except HFValidationError as e:
        return str(e).strip().splitlines()[0][:200] if str(e).strip() else "invalid"
    return None


def looks_like_repo_id(model: str) -> bool:
    """``model`` is not a local path and is a valid Hub repo id (``org/name``)."""
    return bool(_REPO_ID.match(model)) and not Path(model).exists() and repo_id_problem(model) is None


def refuse_invalid_repo_id(text: str, what: str = "no such file or folder") -> None:
    """Raise the one-line error for a missing path shaped like ``org/name`` that the Hub would refuse."""
    problem = repo_id_problem(text) if _REPO_ID.match(text) and not Path(text).exists() else None
    if problem:
        raise GgufMtpError(f"{text}: {what}, and not a valid Hub repo id ({problem})")


def endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def one_line(e: BaseException) -> str:
    """An exception as a short single line (network errors can be long and multi-line)."""
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0].strip()[:160]}" if lines else type(e).__name__


def hub_error(e: Exception, subject: str, request: str, *, where: str = "", revision: str | None = None,
              offline: bool = False) -> GgufMtpError:
    """The one-line error for ``e``, raised by huggingface_hub or the HTTP session under it while ``subject``
    (a repo id, or ``repo/file``) was read; every Hub failure is worded here. ``request`` picks the wording:

    - ``"model info"``: the commit and file list of a repo at ``revision`` from the endpoint ``where``;
    - ``"snapshot download"``: the files of a repo (``offline``: HF_HUB_OFFLINE was set);
    - ``"HEAD request"``: a file's size and ETag;
    - ``"download"``: a whole small file (fetched again from the start);
    - anything else, e.g. ``"range 0-4096"``: a range GET (a run again resumes).
    """
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    no_repo = f"{subject}: no such repository on the Hub (or it is private: set HF_TOKEN)"
    code = (e.response.status_code if e.response is not None else "?") if isinstance(e, HfHubHTTPError) else None
    if request == "model info":
        if isinstance(e, RepositoryNotFoundError):
            return GgufMtpError(no_repo)
        if isinstance(e, RevisionNotFoundError):
            return GgufMtpError(f"{subject}: revision {shown(revision)} not found")
        if isinstance(e, HfHubHTTPError):
            return GgufMtpError(f"{subject}: the Hub ({where}) answered {code}; retry later")
        if isinstance(e, (KeyError, TypeError, ValueError, AttributeError)):
            return GgufMtpError(f"{subject}: the Hub's answer ({where}) is malformed ({one_line(e)})")
        # connection refused, DNS, TLS, timeouts, offline mode
        return GgufMtpError(f"{subject}: could not reach the Hub at {where} ({one_line(e)}); check the network, "
                            "HF_ENDPOINT and HF_HUB_OFFLINE")
    if request == "snapshot download":
        if isinstance(e, RepositoryNotFoundError):
            return GgufMtpError(no_repo)
        if isinstance(e, LocalEntryNotFoundError):
            if offline:
                return GgufMtpError(f"{subject}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
                                    "download it first or pass a local folder")
            cause = e.__cause__ or e.__context__
            why = (f"the Hub answered {cause.response.status_code}" if isinstance(cause, HfHubHTTPError)
                   and cause.response is not None else "the Hub answered with an error or could not be reached")
            return GgufMtpError(f"{subject}: download failed ({why}); run again to resume: files already downloaded "
                                "are kept")
        if isinstance(e, HfHubHTTPError):
            return GgufMtpError(f"{subject}: download failed (the Hub answered {code}); retry, the download resumes")
        if isinstance(e, ValueError):  # huggingface_hub refuses unsafe names and inconsistent answers with ValueError
            return FormatError(f"{subject}: the Hub's answer was refused ({one_line(e)}); nothing was used")
        return GgufMtpError(f"{subject}: download failed ({one_line(e)}); run again to resume")
    if request == "HEAD request":
        if isinstance(e, HfHubHTTPError):
            return GgufMtpError(f"{subject}: the Hub answered {code} to a HEAD request; retry later "
                                "(fetched ranges are kept)")
        return GgufMtpError(f"{subject}: HEAD request failed ({one_line(e)}); retry later")
    if request == "download":
        return GgufMtpError(f"{subject}: download failed ({one_line(e)}); run again")
    return GgufMtpError(f"{subject}: {request} failed ({one_line(e)}); run again to resume")


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo at a commit, as the Hub describes it. ``etag`` is what the Hub sends as the
    file's ETag: the sha256 of an LFS file, else its git blob id."""

    name: str
    size: int | None = None
    sha256: str | None = None
    blob_id: str | None = None
    opaque_etag: str | None = None  # a mirror's ETag that is neither: a cache key, not a checksum

    @property
    def etag(self) -> str | None:
        return self.sha256 or self.blob_id or self.opaque_etag


@dataclass(frozen=True)
class RepoSnapshot:
    """A repo id resolved to a commit, with its (checked) file list."""

    repo_id: str
    commit: str
    files: dict[str, RemoteFile]


def _int_or_none(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def repo_snapshot(repo_id: str, revision: str | None = None) -> RepoSnapshot:
    """The commit and file list of ``repo_id`` at ``revision``; names and the commit id are checked."""
    problem = repo_id_problem(repo_id)
    if problem:
        raise GgufMtpError(f"{repo_id}: not a valid Hub repo id ({problem})")
    from huggingface_hub import HfApi

    where = endpoint()
    try:
        info = HfApi(endpoint=where).model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as e:  # noqa: BLE001 - whatever went wrong becomes one line
        raise hub_error(e, repo_id, "model info", where=where, revision=revision) from None
    commit = info.sha
    if not isinstance(commit, str) or not _COMMIT.match(commit):
        raise FormatError(f"{repo_id}: the Hub ({where}) gave {shown(commit)} as the commit id of revision "
                          f"{shown(revision or 'main')}, which is not a commit id (40 hex digits); the server is "
                          "damaged or hostile: nothing was downloaded")
    files: dict[str, RemoteFile] = {}
    for s in info.siblings or []:
        name = relative_name(s.rfilename, f"{where}: the file list of {repo_id}@{commit[:12]}")
        lfs: object = s.lfs or {}
        sha = lfs.get("sha256") if isinstance(lfs, dict) else None
        blob = s.blob_id
        files[name] = RemoteFile(name, _int_or_none(s.size),
                                 sha if isinstance(sha, str) and _SHA256.match(sha) else None,
                                 blob if isinstance(blob, str) and _GIT_OID.match(blob) else None)
    return RepoSnapshot(repo_id, commit, files)


def blob_problem(data: bytes, f: RemoteFile) -> str | None:
    """Why ``data`` is not the Hub's file ``f`` (size, LFS sha256, git blob id), or None."""
    if f.size is not None and len(data) != f.size:
        return f"{len(data)} bytes instead of the {f.size} the Hub lists"
    if f.sha256 and hashlib.sha256(data).hexdigest() != f.sha256:
        return "its sha256 differs from the Hub's"
    if not f.sha256 and f.blob_id:
        oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if oid != f.blob_id:
            return "its git blob id differs from the Hub's"
    return None


def verify_download(folder: Path, snap: RepoSnapshot) -> None:
    """Check a downloaded snapshot: small files against their checksums, shards against their sizes."""
    for name, f in snap.files.items():
        path = folder / name
        if not path.is_file():
            continue
        if name in SMALL_FILES:
            why = blob_problem(path.read_bytes(), f)
        elif name.endswith(".safetensors") and f.size is not None and path.stat().st_size != f.size:
            why = f"{path.stat().st_size} bytes instead of the {f.size} the Hub lists"
        else:
            why = None
        if why:
            raise FormatError(f"{path}: {why}; run again with --force-download to download it anew")


@contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """huggingface_hub's progress bars off for the duration (``--quiet``)."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    toggle = not enabled and not are_progress_bars_disabled()
    if toggle:
        disable_progress_bars()
    try:
        yield
    finally:
        if toggle:
            enable_progress_bars()


def resolve_model(model: str | os.PathLike[str], *, revision: str | None = None, local_dir: Path | None = None,
                  include: list[str] | None = None, force_download: bool = False, progress: bool = True) -> Path:
    """A local checkpoint folder for ``model`` (downloading only the needed files for a repo id)."""
    text = str(model)
    p = Path(text).expanduser()
    if p.exists():
        return p
    if not looks_like_repo_id(text):
        refuse_invalid_repo_id(text, "no such folder")
        return p
    try:
        from huggingface_hub import constants, snapshot_download
    except ImportError:  # pragma: no cover - dependency of the package
        raise GgufMtpError("huggingface_hub is not installed; pip install huggingface_hub") from None

    offline = constants.is_offline_mode()
    # online, resolve and check the commit and file names first, then download exactly that commit
    snap = None if offline else repo_snapshot(text, revision)
    try:
        with _progress_bars(progress):
            folder = Path(snapshot_download(text, revision=snap.commit if snap else revision, local_dir=local_dir,
                                            allow_patterns=include or CONVERT_PATTERNS,
                                            force_download=force_download,
                                            endpoint=os.environ.get("HF_ENDPOINT") or None))
    except Exception as e:  # noqa: BLE001 - network errors of any kind become one line
        raise hub_error(e, text, "snapshot download", offline=offline) from None
    if snap is not None:
        verify_download(folder, snap)
    return folder
