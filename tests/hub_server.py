"""A local stand-in for the Hugging Face Hub (reached through HF_ENDPOINT): the model-info, tree and resolve
endpoints huggingface_hub uses, with ETag / X-Repo-Commit / size headers and HTTP Range requests. It counts
the bytes it serves per file and can fail or truncate chosen requests."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


class HubStandIn:
    def __init__(self) -> None:
        self.repos: dict[str, Path] = {}
        self.served: Counter[str] = Counter()  # bytes of file bodies sent, per file name
        self.ranges_ok: list[tuple[str, int, int]] = []  # (file, start, end) of every range served
        self.requests: list[tuple[str, str, str | None]] = []
        self.fail: set[str] = set()  # file names answered with HTTP 500
        self.fail_after_ranges: int | None = None  # answer 500 to range requests after this many
        self.truncate: set[str] = set()  # file names whose ranges come back short (consistent headers)
        self._ranges = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, repo_id: str, folder: Path) -> None:
        self.repos[repo_id] = folder

    def sha(self, repo_id: str) -> str:
        return hashlib.sha1(repo_id.encode()).hexdigest()

    def __enter__(self) -> "HubStandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

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

            def _missing(self, what: str = "RepoNotFound") -> None:
                self.send_response(404)
                self.send_header("X-Error-Code", what)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                with hub.lock:
                    hub.requests.append((self.command, path, self.headers.get("Range")))
                m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
                if m:
                    folder = hub.repos.get(m.group(1))
                    if folder is None:
                        return self._missing()
                    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
                    return self._json({"id": m.group(1), "sha": hub.sha(m.group(1)),
                                       "siblings": [{"rfilename": f} for f in files]})
                m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?$", path)
                if m:
                    folder = hub.repos.get(m.group(1))
                    if folder is None:
                        return self._missing()
                    return self._json([{"type": "file", "path": p.relative_to(folder).as_posix(),
                                        "size": p.stat().st_size,
                                        "oid": hashlib.sha1(p.relative_to(folder).as_posix().encode()).hexdigest()}
                                       for p in sorted(folder.rglob("*")) if p.is_file()])
                m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
                if not m:
                    return self._missing("EntryNotFound")
                folder = hub.repos.get(m.group(1))
                if folder is None:
                    return self._missing()
                name = m.group(3)
                f = folder / name
                if not f.is_file():
                    return self._missing("EntryNotFound")
                rng = self.headers.get("Range")
                with hub.lock:
                    fail = name in hub.fail
                    if rng and body and hub.fail_after_ranges is not None:
                        hub._ranges += 1
                        fail = fail or hub._ranges > hub.fail_after_ranges
                if fail:
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                size = f.stat().st_size
                start, end = 0, size - 1
                if rng:
                    a, b = re.match(r"bytes=(\d*)-(\d*)", rng).groups()  # type: ignore[union-attr]
                    start = int(a) if a else 0
                    end = min(int(b), size - 1) if b else size - 1
                length = end - start + 1
                if name in hub.truncate and rng:
                    length = max(1, length // 2)
                    end = start + length - 1
                self.send_response(206 if rng else 200)
                self.send_header("X-Repo-Commit", hub.sha(m.group(1)))
                self.send_header("ETag", '"' + hashlib.sha1(f"{name}:{size}".encode()).hexdigest() + '"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(length))
                if rng:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.end_headers()
                if not body:
                    return
                with open(f, "rb") as fh:
                    fh.seek(start)
                    data = fh.read(length)
                with hub.lock:
                    hub.served[name] += len(data)
                    if rng:
                        hub.ranges_ok.append((name, start, start + len(data)))
                self.wfile.write(data)

        return H
