"""CORS as llama-server does it by default: every origin may call the server, the ``Origin`` header is echoed back
with credentials allowed, and a browser's preflight ``OPTIONS`` is answered on any path before the API key and
the loading check (browsers send no ``Authorization`` on a preflight). ``--cors-origins localhost`` echoes only
pages served from this machine; a comma-separated list echoes only those origins."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

METHODS = "GET, POST, OPTIONS"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


@dataclass(frozen=True)
class CorsPolicy:
    origins: str = "*"  # "*", "localhost", or a comma-separated list of origins
    credentials: bool = True

    def allow_origin(self, origin: str) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a request from ``origin`` ("" if none sent), or None."""
        if self.origins == "*":
            return (origin or None) if self.credentials else "*"  # "*" with credentials is refused by browsers
        if not origin:
            return None
        if self.origins == "localhost":
            try:
                host = urlsplit(origin).hostname or ""
            except ValueError:
                return None
            return origin if host in LOCAL_HOSTS else None
        allowed = {o.strip().rstrip("/") for o in self.origins.split(",") if o.strip()}
        return origin if origin.rstrip("/") in allowed else None


class CorsMiddleware:
    """Pure ASGI, so that streamed answers get their headers too."""

    def __init__(self, app: ASGIApp, policy: CorsPolicy) -> None:
        self.app, self.policy = app, policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        allow = self.policy.allow_origin(headers.get("origin", ""))
        extra: list[tuple[bytes, bytes]] = []
        if allow is not None:
            extra.append((b"access-control-allow-origin", allow.encode("latin-1")))
            if allow != "*":  # a browser reading a credentialed answer needs this on the answer itself too
                extra += [(b"vary", b"Origin"), (b"access-control-allow-credentials", b"true")]
        if scope["method"] == "OPTIONS":
            # the headers asked for are allowed: a literal "*" would not cover Authorization in a browser
            asked = headers.get("access-control-request-headers", "") or "*"
            if allow is None or allow == "*":
                extra.append((b"access-control-allow-credentials", b"false"))
            extra += [(b"access-control-allow-methods", METHODS.encode()),
                      (b"access-control-allow-headers", asked.encode("latin-1")),
                      (b"access-control-max-age", b"600"),
                      (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": extra})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        await self.app(scope, receive, send_with_cors)
