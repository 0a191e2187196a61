"""The HTTP side (Starlette): OpenAI's routes, llama-server's extras (``timings``, ``/health``, ``/metrics``),
errors in OpenAI's shape. Generation happens on the engine thread (:mod:`.engine`); a handler tokenizes and
checks its request, queues a job, then relays the job's events as JSON or server-sent events."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import __version__
from ..errors import GgufMtpError
from ..runtime import tokens
from ..runtime.options import check_sampling
from ..runtime.sampling import SamplerConfig
from ..runtime.session import MTPSession
from .engine import Defaults, Job, Scheduler, random_seed
from .metrics import Metrics
from .schemas import SAMPLING_NAMES, APIError, GenRequest, chat_request, completion_request, parse_json

MAX_BODY = 16 << 20  # bytes; a request body larger than this is refused with 413 before it is read whole
FINGERPRINT = f"gguf-mtp-{__version__}"


@dataclass
class ServerState:
    session: MTPSession
    scheduler: Scheduler
    metrics: Metrics
    model_name: str
    model_aliases: frozenset[str]
    defaults: Defaults
    created: int
    api_key: str | None = None  # --api-key: required as "Authorization: Bearer KEY" everywhere but /health


def error_response(err: APIError, metrics: Metrics | None = None) -> JSONResponse:
    if metrics is not None:
        metrics.count_error(err.status)
    return JSONResponse(err.body(), status_code=err.status)


async def _read_body(request: Request) -> bytes:
    cl = request.headers.get("content-length", "")
    if cl.isdigit() and int(cl) > MAX_BODY:
        raise APIError(413, f"the request body ({int(cl)} bytes) is larger than {MAX_BODY} bytes",
                       code="request_too_large")
    chunks, n = [], 0
    async for c in request.stream():
        n += len(c)
        if n > MAX_BODY:
            raise APIError(413, f"the request body is larger than {MAX_BODY} bytes", code="request_too_large")
        chunks.append(c)
    return b"".join(chunks)


def _sampling(req: GenRequest, d: Defaults, n_vocab: int) -> SamplerConfig:
    seed = req.seed if req.seed is not None else (d.seed if d.seed >= 0 else random_seed())
    cfg = SamplerConfig(temp=d.temp if req.temperature is None else req.temperature,
                        top_k=d.top_k if req.top_k is None else req.top_k,
                        top_p=d.top_p if req.top_p is None else req.top_p,
                        seed=seed % (1 << 32),  # llama.cpp seeds are 32-bit (runtime.options)
                        **{k: req.sampling.get(k, getattr(d, k)) for k in SAMPLING_NAMES})
    try:  # what run and the Python API check too: top_k above the vocabulary is clamped to it, ...
        return check_sampling(cfg, n_vocab)[0]
    except GgufMtpError as e:  # the schema's ranges keep every request inside these; a server default may not be
        raise APIError(422, f"sampling: {e}", code="invalid_value") from None


def _too_long(st: ServerState, chat: bool, n_tokens: int, exact: bool) -> APIError:
    sched = st.scheduler
    room = sched.n_ctx_seq - sched.n_draft_max - 1
    has = f"{n_tokens} tokens" if exact else f"at least {n_tokens} tokens"
    extra = {"n_prompt_tokens": n_tokens} if exact else {}  # llama-server's fields; a lower bound is not a count
    return APIError(400, f"the prompt has {has}; a slot's context holds {sched.n_ctx_seq} (at most {room} for the "
                    "prompt): shorten it, or raise -c (or lower -np)", param="messages" if chat else "prompt",
                    code="context_length_exceeded", extra=extra | {"n_ctx": sched.n_ctx_seq})


def _tokenize(st: ServerState, req: GenRequest) -> list[int]:
    """Prompt tokens, exactly as ``gguf-mtp run`` makes them (-p: tokenize with BOS; chat: the template), with
    bounded work: what cannot fit a slot is refused before the template or the tokenizer see all of it."""
    s, sched = st.session, st.scheduler
    room = sched.n_ctx_seq - sched.n_draft_max - 1  # a prompt must leave room for one verify step
    closing = sched.closing
    chat = bool(req.messages)
    if isinstance(req.prompt, list):
        if len(req.prompt) > room:
            raise _too_long(st, False, len(req.prompt), True)
        return list(req.prompt)
    try:
        if chat:
            if len(req.messages) > room:  # every template gives each message a token or more (its role, at least)
                raise _too_long(st, True, len(req.messages), False)
            try:
                text = s.template.render(req.messages, add_generation_prompt=True, cancelled=closing)
            except GgufMtpError as e:  # the template's raise_exception, or a template that cannot take these
                if closing():
                    raise tokens.Cancelled(str(e)) from None
                raise APIError(400, f"the chat template cannot render these messages: {e}", param="messages",
                               code="chat_template_error") from None
            return tokens.tokenize(s.model, text, add_special=False, parse_special=True, limit=room,
                                   n_ctx=sched.n_ctx_seq, cancelled=closing)
        return tokens.tokenize(s.model, req.prompt or "", limit=room, n_ctx=sched.n_ctx_seq, cancelled=closing)
    except tokens.PromptTooLong as e:
        raise _too_long(st, chat, e.n_tokens, e.exact) from None
    except tokens.Cancelled:
        raise APIError(503, "the server is shutting down", type="unavailable_error", code="shutting_down") from None


async def _prepare(request: Request, chat: bool) -> tuple[ServerState, GenRequest, Job]:
    st: ServerState = request.app.state.server
    body = parse_json(await _read_body(request))
    sched = st.scheduler
    n_vocab = st.session.model.n_vocab
    req = chat_request(body, sched.n_ctx_seq) if chat else completion_request(body, sched.n_ctx_seq, n_vocab)
    if req.model is not None and req.model not in st.model_aliases:
        raise APIError(404, f"model {req.model!r} is not served here; GET /v1/models lists {st.model_name!r}",
                       type="invalid_request_error", param="model", code="model_not_found")
    sampling = _sampling(req, st.defaults, n_vocab)
    ids = await run_in_threadpool(_tokenize, st, req)
    if not ids:
        raise APIError(400, "the prompt is empty after tokenization", param="prompt", code="empty_prompt")
    max_tokens = req.max_tokens if req.max_tokens is not None else st.defaults.n_predict
    if max_tokens is None or max_tokens < 0:
        max_tokens = sched.n_ctx_seq
    job = Job(tokens=ids, sampling=sampling, max_tokens=max_tokens, stops=req.stop,
              loop=asyncio.get_running_loop(), events=asyncio.Queue(), ignore_eos=req.ignore_eos)
    return st, req, job


def _usage(done: dict[str, Any]) -> dict[str, int]:
    p, c = done["prompt_tokens"], done["completion_tokens"]
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


class _Reply:
    """Builds the JSON objects of one answer, chat or completion, whole or in chunks."""

    def __init__(self, st: ServerState, chat: bool) -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = st.model_name

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": FINGERPRINT}

    def whole(self, text: str, done: dict[str, Any]) -> dict[str, Any]:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "finish_reason": done["finish_reason"], "logprobs": None}
            obj = self._base("chat.completion")
        else:
            choice = {"index": 0, "text": text, "finish_reason": done["finish_reason"], "logprobs": None}
            obj = self._base("text_completion")
        return obj | {"choices": [choice], "usage": _usage(done), "timings": done["timings"]}

    def chunk(self, text: str | None, finish: str | None = None, first: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text is not None:
                delta["content"] = text
            return self._base("chat.completion.chunk") | {
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        return self._base("text_completion") | {
            "choices": [{"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}]}

    def final_chunks(self, done: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
        last = self.chunk(None, done["finish_reason"]) | {"usage": _usage(done), "timings": done["timings"]}
        out = [last]
        if include_usage:  # OpenAI's form: a last chunk with no choices
            out.append(self._base(last["object"]) | {"choices": [], "usage": _usage(done)})
        return out


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


async def _generate(request: Request, chat: bool) -> Response:
    st: ServerState = request.app.state.server
    try:
        st, req, job = await _prepare(request, chat)
        st.scheduler.submit(job)
    except APIError as e:
        return error_response(e, st.metrics)
    reply = _Reply(st, chat)
    if req.stream:
        return StreamingResponse(_stream(st, job, reply, req.include_usage), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    watcher = asyncio.create_task(_watch_disconnect(request, job))
    try:
        parts: list[str] = []
        while True:
            kind, value = await job.events.get()
            if kind == "text":
                parts.append(value)
            elif kind == "done":
                return JSONResponse(reply.whole("".join(parts), value))
            else:
                return error_response(value)
    finally:
        job.cancelled.set()  # no-op once done; stops the generation if this handler is cancelled
        watcher.cancel()


async def _watch_disconnect(request: Request, job: Job) -> None:
    """The body has been read: the next ASGI message can only be the client going away."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            job.cancelled.set()
            return


async def _stream(st: ServerState, job: Job, reply: _Reply, include_usage: bool) -> AsyncIterator[bytes]:
    try:
        if reply.chat:
            yield _sse(reply.chunk(None, first=True))
        while True:
            kind, value = await job.events.get()
            if kind == "text":
                yield _sse(reply.chunk(value))
            elif kind == "done":
                for c in reply.final_chunks(value, include_usage):
                    yield _sse(c)
                break
            else:
                yield _sse(value.body())
                break
        yield b"data: [DONE]\n\n"
    finally:
        job.cancelled.set()  # the client went away (or we are done): stop generating at the next step


Handler = Callable[[Request], Awaitable[Response]]


def _keyed(fn: Handler) -> Handler:
    async def check(request: Request) -> Response:
        st: ServerState = request.app.state.server
        if st.api_key:
            auth = request.headers.get("authorization", "")
            given = auth[7:] if auth[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
            if not hmac.compare_digest(given.encode(), st.api_key.encode()):
                return error_response(APIError(401, "invalid or missing API key; send Authorization: Bearer KEY",
                                               type="authentication_error", code="invalid_api_key"), st.metrics)
        return await fn(request)

    return check


async def chat_completions(request: Request) -> Response:
    return await _generate(request, chat=True)


async def completions(request: Request) -> Response:
    return await _generate(request, chat=False)


async def models(request: Request) -> Response:
    st: ServerState = request.app.state.server
    s = st.session
    meta = {"mtp": s.pairing.source.value, "n_draft_max": st.scheduler.n_draft_max, "n_slots": len(st.scheduler.slots),
            "n_ctx_slot": st.scheduler.n_ctx_seq, "n_vocab": s.model.n_vocab}
    return JSONResponse({"object": "list", "data": [{"id": st.model_name, "object": "model", "created": st.created,
                                                      "owned_by": "gguf-mtp", "meta": meta}]})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    st: ServerState = request.app.state.server
    return PlainTextResponse(st.metrics.render(), media_type="text/plain; version=0.0.4")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        err = APIError(404, f"no route {request.method} {request.url.path}; see GET /v1/models, "
                       "POST /v1/chat/completions, POST /v1/completions", code="not_found")
    elif exc.status_code == 405:
        err = APIError(405, f"{request.url.path} does not accept {request.method}", code="method_not_allowed")
    else:
        err = APIError(exc.status_code, str(exc.detail))
    return error_response(err)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error",
                                   code="internal_error"))


def build_app(st: ServerState) -> Starlette:
    """The ASGI app; its lifespan starts the engine thread and, at shutdown, cancels every job and joins it."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        st.scheduler.start()
        try:
            yield
        finally:
            await run_in_threadpool(st.scheduler.close)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/metrics", _keyed(metrics), methods=["GET"]),
        Route("/v1/models", _keyed(models), methods=["GET"]),
        Route("/models", _keyed(models), methods=["GET"]),
        Route("/v1/chat/completions", _keyed(chat_completions), methods=["POST"]),
        Route("/chat/completions", _keyed(chat_completions), methods=["POST"]),
        Route("/v1/completions", _keyed(completions), methods=["POST"]),
        Route("/completions", _keyed(completions), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error, Exception: _internal_error})
    app.state.server = st
    return app
