"""A local stand-in for the Hugging Face Hub (reached through HF_ENDPOINT): the model-info, tree and resolve
endpoints huggingface_hub uses, with the Hub's headers (X-Repo-Commit, ETag: the git blob id of a small file,
X-Linked-Etag / X-Linked-Size: the sha256 and size of an LFS file) and HTTP Range requests. It counts the
bytes it serves per file.

It can also be hostile, one knob per misbehaviour: file names that leave the repo, a bad commit id, wrong,
short, long, cut or poisoned bytes, ignored ranges, lying sizes and ETags, 5xx answers.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs(name: str) -> bool:
    return name.endswith(".safetensors")


class HubStandIn:
    def __init__(self) -> None:
        self.repos: dict[str, Path] = {}
        self.served: Counter[str] = Counter()  # bytes of file bodies sent, per file name
        self.ranges_ok: list[tuple[str, int, int]] = []  # (file, start, end) of every range served
        self.requests: list[tuple[str, str, str | None]] = []
        # -- hostile knobs (file names are names in the repo) --
        self.fail: set[str] = set()  # files answered with HTTP 500 (GET and HEAD)
        self.fail_head: set[str] = set()  # files answered with HTTP 500 to HEAD only
        self.fail_info = False  # the model-info endpoint answers 500
        self.fail_after_ranges: int | None = None  # answer 500 to range requests after this many
        self.truncate: set[str] = set()  # ranges come back short (consistent headers)
        self.cut: dict[str, int] = {}  # the next range body longer than this stops after it (headers promised all)
        self.long: set[str] = set()  # range bodies carry 16 extra bytes (and a Content-Length that says so)
        self.long_chunked: set[str] = set()  # the same, chunked (no Content-Length): only the body tells
        self.ignore_range: set[str] = set()  # 200 + the whole file; the body is held back until `release`
        self.poison: dict[str, list[tuple[int, int]]] = {}  # file byte intervals sent inverted
        self.content: dict[str, bytes] = {}  # bytes served instead of the file's (the file list is not changed)
        self.size_claim: dict[str, int] = {}  # size claimed everywhere (file list, HEAD, Content-Range totals)
        self.etag_claim: dict[str, str] = {}  # ETag sent on answers (the file list keeps the true one)
        self.answer_commit: str | None = None  # X-Repo-Commit sent on resolve answers
        self.extra_files: dict[str, bytes] = {}  # more files, under any (hostile) name
        self.commit: str | None = None  # commit id given by the model-info endpoint
        self.no_metadata = False  # file list without sizes, blob ids and LFS info
        self.info_json: object | None = None  # the model-info answer, verbatim (malformed ones)
        self.redirect_lfs = False  # like the real Hub: LFS files answer 302 (Hub headers) to a CDN (its own ETag)
        self.release = threading.Event()
        self._ranges = 0
        self._sha: dict[tuple[str, int], str] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, repo_id: str, folder: Path) -> None:
        self.repos[repo_id] = folder

    def sha(self, repo_id: str) -> str:
        return self.commit if self.commit is not None else hashlib.sha1(repo_id.encode()).hexdigest()

    def __enter__(self) -> "HubStandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # -- the repo's files as served ---------------------------------------------------------------------------

    def files(self, repo_id: str) -> dict[str, bytes | Path]:
        folder = self.repos[repo_id]
        out: dict[str, bytes | Path] = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
                                        if p.is_file()}
        out.update(self.extra_files)
        return out

    def data(self, src: bytes | Path) -> bytes:
        return src if isinstance(src, bytes) else src.read_bytes()

    def meta(self, name: str, src: bytes | Path) -> dict[str, object]:
        """size, blob id and LFS sha256 of a file (of its true bytes, whatever `content` serves)."""
        data = self.data(src)
        size = self.size_claim.get(name, len(data))
        ent: dict[str, object] = {"rfilename": name}
        if not self.no_metadata:
            ent.update(size=size, blobId=git_oid(data))
            if lfs(name):
                ent["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": size, "pointerSize": 134}
        return ent

    def etag(self, name: str, src: bytes | Path) -> str:
        if name in self.etag_claim:
            return self.etag_claim[name]
        data = self.data(src)
        return hashlib.sha256(data).hexdigest() if lfs(name) else git_oid(data)

    def _handler(self):  # type: ignore[no-untyped-def]
        hub = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:  # quiet
                pass

            def _json(self, obj: object, code: int = 200) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _empty(self, code: int, error: str | None = None) -> None:
                self.send_response(code)
                if error:
                    self.send_header("X-Error-Code", error)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                try:
                    self._serve(body=True)
                except (BrokenPipeError, ConnectionResetError):  # the client hung up: fine
                    self.close_connection = True

            def _serve(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                with hub.lock:
                    hub.requests.append((self.command, path, self.headers.get("Range")))
                m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
                if m:
                    if hub.fail_info:
                        return self._empty(500)
                    if m.group(1) not in hub.repos:
                        return self._empty(404, "RepoNotFound")
                    if hub.info_json is not None:
                        return self._json(hub.info_json)
                    files = hub.files(m.group(1))
                    return self._json({"id": m.group(1), "sha": hub.sha(m.group(1)),
                                       "siblings": [hub.meta(n, s) for n, s in files.items()]})
                m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?$", path)
                if m:
                    if m.group(1) not in hub.repos:
                        return self._empty(404, "RepoNotFound")
                    out = []
                    for n, s in hub.files(m.group(1)).items():
                        meta = hub.meta(n, s)
                        out.append({"type": "file", "path": n, "size": meta.get("size", len(hub.data(s))),
                                    "oid": meta.get("blobId", git_oid(hub.data(s))), **(
                                        {"lfs": {"oid": meta["lfs"]["sha256"], "size": meta["lfs"]["size"],
                                                 "pointerSize": 134}} if "lfs" in meta else {})})
                    return self._json(out)
                m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path) or re.match(
                    r"^/cdn/([^/]+/[^/]+)/()(.+)$", path)
                if not m:
                    return self._empty(404, "EntryNotFound")
                if m.group(1) not in hub.repos:
                    return self._empty(404, "RepoNotFound")
                name = m.group(3)
                src = hub.files(m.group(1)).get(name)
                if src is None:
                    return self._empty(404, "EntryNotFound")
                cdn = path.startswith("/cdn/")
                if hub.redirect_lfs and lfs(name) and not cdn:
                    return self._redirect(m.group(1), name, src)
                self._resolve(m.group(1), name, src, body, cdn)

            def _redirect(self, repo: str, name: str, src: bytes | Path) -> None:
                """The Hub's answer for an LFS file: its commit, sha256 and size, and where the bytes are."""
                self.send_response(302)
                self.send_header("Location", f"/cdn/{repo}/{name}")
                self.send_header("X-Repo-Commit", hub.answer_commit or hub.sha(repo))
                self.send_header("X-Linked-Etag", f'"{hub.etag(name, src)}"')
                self.send_header("X-Linked-Size", str(hub.size_claim.get(name, len(hub.data(src)))))
                self.send_header("ETag", '"' + git_oid(b"lfs pointer of " + name.encode()) + '"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _resolve(self, repo: str, name: str, src: bytes | Path, body: bool, cdn: bool = False) -> None:
                rng = self.headers.get("Range")
                with hub.lock:
                    fail = name in hub.fail or (not body and name in hub.fail_head)
                    if rng and body and hub.fail_after_ranges is not None:
                        hub._ranges += 1
                        fail = fail or hub._ranges > hub.fail_after_ranges
                if fail:
                    return self._empty(500)
                data = hub.content.get(name, hub.data(src))
                size = hub.size_claim.get(name, len(data))
                ignore = name in hub.ignore_range
                start, end = 0, len(data) - 1
                if rng and not ignore:
                    a, b = re.match(r"bytes=(\d*)-(\d*)", rng).groups()  # type: ignore[union-attr]
                    start = int(a) if a else 0
                    end = min(int(b), len(data) - 1) if b else len(data) - 1
                length = end - start + 1
                if name in hub.truncate and rng:
                    length = max(1, length // 2)
                    end = start + length - 1
                extra = b"\xab" * 16 if rng and (name in hub.long or name in hub.long_chunked) else b""
                partial = bool(rng) and not ignore
                self.send_response(206 if partial else 200)
                if cdn:  # a CDN knows nothing of commits; its ETag is its own
                    self.send_header("ETag", '"' + hashlib.md5(data).hexdigest() + '"')
                else:
                    self.send_header("X-Repo-Commit", hub.answer_commit or hub.sha(repo))
                    etag = hub.etag(name, src)
                    self.send_header("ETag", f'"{etag}"')
                    if lfs(name):
                        self.send_header("X-Linked-Etag", f'"{etag}"')
                        self.send_header("X-Linked-Size", str(size))
                self.send_header("Accept-Ranges", "bytes")
                chunked = name in hub.long_chunked and partial
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(size if not body and not partial else length + len(extra)))
                if partial:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.end_headers()
                if not body:
                    return
                if ignore:
                    self.wfile.flush()
                    hub.release.wait(30)
                out = bytearray(data[start:start + length])
                for a, b in hub.poison.get(name, []):
                    for i in range(max(a, start), min(b, start + length)):
                        out[i - start] ^= 0xFF
                out += extra
                with hub.lock:  # one-shot: the first range of that file longer than the cut
                    cut = hub.cut.get(name) if partial else None
                    if cut is not None and cut < len(out):
                        del hub.cut[name]
                if cut is not None and cut < len(out):
                    self.wfile.write(out[:cut])
                    self.wfile.flush()
                    with hub.lock:
                        hub.served[name] += cut
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if chunked:
                    self.wfile.write(b"%x\r\n" % len(out) + bytes(out) + b"\r\n0\r\n\r\n")
                else:
                    self.wfile.write(out)
                with hub.lock:
                    hub.served[name] += len(out)
                    if partial:
                        hub.ranges_ok.append((name, start, start + len(out)))

        return H
