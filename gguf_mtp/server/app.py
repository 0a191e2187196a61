"""The HTTP side (Starlette): OpenAI's routes, llama-server's own (``/completion``, ``/tokenize``, ``/detokenize``,
``/apply-template``, ``/props``, ``/slots``, ``/health``, ``/metrics``, ``timings``), errors in OpenAI's shape.
Generation happens on the engine thread (:mod:`.engine`); a handler tokenizes and checks its request, queues a
job, then relays the job's events as JSON or server-sent events. While the model loads (:mod:`.loader`) every
route answers llama-server's 503 "Loading model"."""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
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
from ..runtime import MTPSession, SamplerConfig, tokens
from ..runtime.options import check_sampling
from .cors import CorsMiddleware, CorsPolicy
from .loader import Loader
from .metrics import Metrics
from .scheduler import Defaults, Job, Scheduler, random_seed
from .schemas import (
    SAMPLING_NAMES,
    APIError,
    GenRequest,
    chat_request,
    completion_request,
    detokenize_request,
    native_completion_request,
    parse_json,
    template_request,
    tokenize_request,
)

MAX_BODY = 16 << 20  # bytes; a request body larger than this is refused with 413 before it is read whole
MAX_TOKENIZE = 1 << 20  # tokens one /tokenize answers at most
FINGERPRINT = f"gguf-mtp-{__version__}"


@dataclass
class ServerState:
    session: MTPSession
    scheduler: Scheduler
    metrics: Metrics
    model_name: str
    defaults: Defaults
    created: int
    api_key: str | None = None  # --api-key: required as "Authorization: Bearer KEY" everywhere but /health
    model_path: str = ""
    log_requests: bool = True  # one line per request on stderr (--log-disable: none)

    def log(self, line: str) -> None:
        if self.log_requests:
            try:
                print(line, file=sys.stderr, flush=True)
            except (OSError, ValueError):  # stderr closed: the request is still answered
                pass


#: what llama-server answers on every route while the model loads (its exact body)
LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


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
        raise APIError(400, f"sampling: {e}", code="invalid_value") from None


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


async def _prepare(request: Request, st: ServerState, kind: str) -> tuple[GenRequest, Job]:
    body = parse_json(await _read_body(request))
    sched = st.scheduler
    n_vocab = st.session.model.n_vocab
    if kind == "chat":
        req = chat_request(body, sched.n_ctx_seq)
    elif kind == "native":
        req = native_completion_request(body, sched.n_ctx_seq, n_vocab)
    else:
        req = completion_request(body, sched.n_ctx_seq, n_vocab)
    # any `model` is served, as llama-server does (clients send "gpt-4o" or their own default); answers name ours
    sampling = _sampling(req, st.defaults, n_vocab)
    ids = await run_in_threadpool(_tokenize, st, req)
    if not ids:
        raise APIError(400, "the prompt is empty after tokenization", param="prompt", code="empty_prompt")
    max_tokens = req.max_tokens if req.max_tokens is not None else st.defaults.n_predict
    if max_tokens is None or max_tokens < 0:
        max_tokens = sched.n_ctx_seq
    job = Job(tokens=ids, sampling=sampling, max_tokens=max_tokens, stops=req.stop,
              loop=asyncio.get_running_loop(), events=asyncio.Queue(), ignore_eos=req.ignore_eos,
              ids=[] if kind == "native" else None)
    return req, job


def _usage(done: dict[str, Any]) -> dict[str, Any]:
    p, c = done["prompt_tokens"], done["completion_tokens"]
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": done["timings"]["cache_n"]}}


def _settings(st: ServerState, job: Job, req: GenRequest) -> dict[str, Any]:
    """llama-server's ``generation_settings``: the fields we act on, as applied (seed resolved, top_k clamped)."""
    s = job.sampling
    n_predict = req.max_tokens if req.max_tokens is not None else st.defaults.n_predict
    return {"n_predict": n_predict, "max_tokens": n_predict, "seed": s.seed, "temperature": s.temp,
            "top_k": s.top_k, "top_p": s.top_p, "stop": req.stop, "ignore_eos": req.ignore_eos,
            "stream": req.stream, "n_ctx": st.scheduler.n_ctx_seq, "model": st.model_name,
            "speculative.n_max": st.scheduler.n_draft_max}


class _Reply:
    """Builds the JSON objects of one answer, chat, completion or llama-server's native ``/completion``, whole
    or in chunks."""

    def __init__(self, st: ServerState, kind: str, req: GenRequest, job: Job) -> None:
        self.kind, self.chat, self.native = kind, kind == "chat", kind == "native"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = st.model_name  # ours, whatever the request named (llama-server's choice)
        self.settings = _settings(st, job, req) if self.native else {}
        self.job = job
        self.return_tokens = req.return_tokens

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": FINGERPRINT}

    def _native(self, text: str, done: dict[str, Any], ids: list[int]) -> dict[str, Any]:
        t = done["timings"]
        return {"index": 0, "content": text, "tokens": ids, "id_slot": done["slot"], "stop": True, "model": self.model,
                "tokens_predicted": done["completion_tokens"], "tokens_evaluated": done["prompt_tokens"],
                "generation_settings": self.settings, "has_new_line": "\n" in text, "truncated": done["truncated"],
                "stop_type": done["stop_type"], "stopping_word": done["stopping_word"], "tokens_cached": t["cache_n"],
                "timings": t}

    def whole(self, text: str, done: dict[str, Any]) -> dict[str, Any]:
        if self.native:
            return self._native(text, done, (self.job.ids or []) if self.return_tokens else [])
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "finish_reason": done["finish_reason"], "logprobs": None}
            obj = self._base("chat.completion")
        else:
            choice = {"index": 0, "text": text, "finish_reason": done["finish_reason"], "logprobs": None}
            obj = self._base("text_completion")
        return obj | {"choices": [choice], "usage": _usage(done), "timings": done["timings"]}

    def chunk(self, text: str | None, finish: str | None = None, first: bool = False,
              ids: list[int] | None = None) -> dict[str, Any]:
        if self.native:
            return {"index": 0, "content": text or "", "tokens": ids or [], "stop": False}
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text is not None:
                delta["content"] = text
            return self._base("chat.completion.chunk") | {
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        return self._base("text_completion") | {
            "choices": [{"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}]}

    def final_chunks(self, done: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
        if self.native:  # the last event: the whole answer's fields, its content already sent
            return [self._native("", done, [])]
        last = self.chunk(None, done["finish_reason"]) | {"usage": _usage(done), "timings": done["timings"]}
        out = [last]
        if include_usage:  # OpenAI's form: a last chunk with no choices
            out.append(self._base(last["object"]) | {"choices": [], "usage": _usage(done)})
        return out


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _log_done(st: ServerState, where: str, done: dict[str, Any]) -> None:
    """One line per answered request, with what llama-server prints after one (prompt, cache, speed, drafts)."""
    t = done["timings"]
    ttft = done["ttft_ms"]
    drafted, accepted = t["draft_n"], t["draft_n_accepted"]
    acc = f"{accepted / drafted:.1%}" if drafted else "-"
    st.log(f"{where} 200 | slot {done['slot']} | prompt {done['prompt_tokens']} tokens ({t['cache_n']} cached, "
           f"{t['prompt_n']} processed in {t['prompt_ms']:.1f} ms) | generated {done['completion_tokens']} in "
           f"{t['predicted_ms']:.1f} ms, {t['predicted_per_second']:.1f} t/s, first token "
           + (f"{ttft:.1f} ms" if ttft is not None else "-")
           + f" | drafted {drafted}, accepted {accepted} ({acc}) | {done['finish_reason']}")


def _log_error(st: ServerState | None, where: str, err: APIError) -> None:
    if st is not None:
        st.log(f"{where} {err.status} | {err.code or err.type}: {err.message[:200]}")


async def _generate(request: Request, st: ServerState, kind: str) -> Response:
    where = f"{request.method} {request.url.path}"
    try:
        req, job = await _prepare(request, st, kind)
        st.scheduler.submit(job)
    except APIError as e:
        _log_error(st, where, e)
        return error_response(e, st.metrics)
    reply = _Reply(st, kind, req, job)
    if req.stream:
        return StreamingResponse(_stream(st, job, reply, req.include_usage, where), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    watcher = asyncio.create_task(_watch_disconnect(request, job))
    try:
        parts: list[str] = []
        while True:
            ev, value = await job.events.get()
            if ev == "text":
                parts.append(value)
            elif ev == "ids":
                continue  # gathered in job.ids
            elif ev == "done":
                _log_done(st, where, value)
                return JSONResponse(reply.whole("".join(parts), value))
            else:
                _log_error(st, where, value)
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


async def _stream(st: ServerState, job: Job, reply: _Reply, include_usage: bool, where: str) -> AsyncIterator[bytes]:
    ended = False
    try:
        if reply.chat:
            yield _sse(reply.chunk(None, first=True))
        ids: list[int] = []
        while True:
            ev, value = await job.events.get()
            if ev == "ids":
                ids = value
            elif ev == "text":
                yield _sse(reply.chunk(value, ids=ids))
                ids = []
            elif ev == "done":
                ended = True
                _log_done(st, where, value)
                for c in reply.final_chunks(value, include_usage):
                    yield _sse(c)
                break
            else:
                ended = True
                _log_error(st, where, value)
                yield _sse(value.body())
                break
        if not reply.native:  # llama-server ends only its OpenAI streams with [DONE]
            yield b"data: [DONE]\n\n"
    finally:
        job.cancelled.set()  # the client went away (or we are done): stop generating at the next step
        if not ended:
            st.log(f"{where} 499 | the client went away; generation cancelled")


StateHandler = Callable[[Request, ServerState], Awaitable[Response]]
Handler = Callable[[Request], Awaitable[Response]]


def _loader(request: Request) -> Loader:
    loader: Loader = request.app.state.loader
    return loader


def _route(fn: StateHandler, keyed: bool = True) -> Handler:
    """The loading check (503, llama-server's body, before the key as llama-server does), then the API key."""

    async def check(request: Request) -> Response:
        st = _loader(request).ready_state()
        if st is None:
            return JSONResponse(LOADING, status_code=503)
        if keyed and st.api_key:
            auth = request.headers.get("authorization", "")
            given = auth[7:] if auth[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
            if not hmac.compare_digest(given.encode(), st.api_key.encode()):
                st.log(f"{request.method} {request.url.path} 401 | invalid or missing API key")
                return error_response(APIError(401, "invalid or missing API key; send Authorization: Bearer KEY",
                                               type="authentication_error", code="invalid_api_key"), st.metrics)
        return await fn(request, st)

    return check


async def chat_completions(request: Request, st: ServerState) -> Response:
    return await _generate(request, st, "chat")


async def completions(request: Request, st: ServerState) -> Response:
    return await _generate(request, st, "completion")


async def native_completion(request: Request, st: ServerState) -> Response:
    return await _generate(request, st, "native")


async def models(request: Request, st: ServerState) -> Response:
    s = st.session
    meta = {"mtp": s.pairing.source.value, "n_draft_max": st.scheduler.n_draft_max, "n_slots": len(st.scheduler.slots),
            "n_ctx_slot": st.scheduler.n_ctx_seq, "n_vocab": s.model.n_vocab, "n_embd": s.model.n_embd}
    return JSONResponse({"object": "list", "data": [{"id": st.model_name, "object": "model", "created": st.created,
                                                      "owned_by": "gguf-mtp", "meta": meta}]})


async def health(request: Request, st: ServerState) -> Response:
    return JSONResponse({"status": "ok"})


async def metrics(request: Request, st: ServerState) -> Response:
    return PlainTextResponse(st.metrics.render(), media_type="text/plain; version=0.0.4")


def _default_params(st: ServerState) -> dict[str, Any]:
    d = st.defaults
    return {"n_predict": d.n_predict, "max_tokens": d.n_predict, "seed": d.seed % (1 << 32), "temperature": d.temp,
            "top_k": d.top_k, "top_p": d.top_p, "stop": [], "ignore_eos": False,
            "speculative.n_max": st.scheduler.n_draft_max}


async def props(request: Request, st: ServerState) -> Response:
    """``GET /props``: llama-server's global properties, the fields we can fill truthfully."""
    s = st.session
    return JSONResponse({
        "default_generation_settings": {"params": _default_params(st), "n_ctx": st.scheduler.n_ctx_seq},
        "total_slots": len(st.scheduler.slots),
        "model_alias": st.model_name,
        "model_path": st.model_path,
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": True, "endpoint_props": False, "endpoint_metrics": True,
        "chat_template": s.template.source or "",
        "bos_token": s.template.bos, "eos_token": s.template.eos,
        "build_info": FINGERPRINT,
        "is_sleeping": False,
        "mtp": s.pairing.source.value,
    })


async def slots(request: Request, st: ServerState) -> Response:
    """``GET /slots``: each slot's state, read without stopping the engine thread (a snapshot of its fields)."""
    out = []
    for sl in st.scheduler.slots:
        job = sl.job
        entry: dict[str, Any] = {"id": sl.index, "n_ctx": st.scheduler.n_ctx_seq,
                                 "speculative": st.session.mtp_enabled, "is_processing": job is not None}
        if job is not None:
            n = sl.n
            entry |= {"n_prompt_tokens": len(job.tokens), "n_prompt_tokens_cache": sl.cached,
                      "params": {"seed": job.sampling.seed, "temperature": job.sampling.temp,
                                 "top_k": job.sampling.top_k, "top_p": job.sampling.top_p,
                                 "n_predict": job.max_tokens, "stop": job.stops, "ignore_eos": job.ignore_eos},
                      "next_token": [{"has_next_token": True, "n_remain": max(0, job.max_tokens - n),
                                      "n_decoded": n}]}
        else:
            entry["next_token"] = [{"has_next_token": False, "n_remain": 0, "n_decoded": sl.n_decoded_last}]
        out.append(entry)
    if request.query_params.get("fail_on_no_slot") and all(e["is_processing"] for e in out):
        return error_response(APIError(503, "no slot available", type="unavailable_error", code="no_slot"),
                              st.metrics)
    return JSONResponse(out)


async def tokenize(request: Request, st: ServerState) -> Response:
    """``POST /tokenize``: ``content`` (a string, or strings and token ids mixed), ``add_special`` (default
    false), ``parse_special`` (default true), ``with_pieces``."""
    try:
        req = tokenize_request(parse_json(await _read_body(request)), st.session.model.n_vocab)
        model = st.session.model

        def run() -> list[int]:
            ids: list[int] = []
            for i, part in enumerate(req.content):
                if isinstance(part, int):
                    ids.append(part)
                else:  # bounded, as a prompt is: tokenizing stops once the answer would pass MAX_TOKENIZE
                    ids += tokens.tokenize(model, part, add_special=req.add_special and i == 0,
                                           parse_special=req.parse_special, limit=MAX_TOKENIZE - len(ids),
                                           n_ctx=MAX_TOKENIZE, cancelled=st.scheduler.closing)
            return ids

        ids = await run_in_threadpool(run)
    except tokens.PromptTooLong:
        return error_response(APIError(400, f"content: more than {MAX_TOKENIZE} tokens; send less text at once",
                                       param="content", code="content_too_long"), st.metrics)
    except tokens.Cancelled:
        return error_response(APIError(503, "the server is shutting down", type="unavailable_error",
                                       code="shutting_down"), st.metrics)
    except APIError as e:
        return error_response(e, st.metrics)
    if not req.with_pieces:
        return JSONResponse({"tokens": ids})
    out = []
    for t in ids:
        b = model.piece(t)
        try:
            piece: str | list[int] = b.decode("utf-8")
        except UnicodeDecodeError:  # a part of a character: its bytes, as llama-server gives them
            piece = list(b)
        out.append({"id": t, "piece": piece})
    return JSONResponse({"tokens": out})


async def detokenize(request: Request, st: ServerState) -> Response:
    """``POST /detokenize``: ``tokens`` back to ``content``."""
    try:
        ids = detokenize_request(parse_json(await _read_body(request)), st.session.model.n_vocab)
    except APIError as e:
        return error_response(e, st.metrics)
    model = st.session.model
    text = b"".join(model.piece(t) for t in ids).decode("utf-8", "replace")
    return JSONResponse({"content": text})


async def apply_template(request: Request, st: ServerState) -> Response:
    """``POST /apply-template``: the chat template's prompt for ``messages``, without generating."""
    try:
        msgs = template_request(parse_json(await _read_body(request)))
        if len(msgs) > st.scheduler.n_ctx_seq:
            raise _too_long(st, True, len(msgs), False)
        try:
            text = await run_in_threadpool(st.session.template.render, msgs, True)
        except GgufMtpError as e:
            raise APIError(400, f"the chat template cannot render these messages: {e}", param="messages",
                           code="chat_template_error") from None
    except APIError as e:
        return error_response(e, st.metrics)
    return JSONResponse({"prompt": text})


async def embeddings(request: Request, st: ServerState) -> Response:
    """Embeddings cannot come from this server; answered as llama-server answers without ``--embeddings``."""
    return error_response(APIError(
        501, "This server does not support embeddings: gguf-mtp serves generation only (use llama-server "
        "--embeddings with an embedding model)", type="not_supported_error", code="not_supported"), st.metrics)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        err = APIError(404, f"no route {request.method} {request.url.path}; see GET /v1/models, "
                       "POST /v1/chat/completions, POST /v1/completions, POST /completion", code="not_found")
    elif exc.status_code == 405:
        err = APIError(405, f"{request.url.path} does not accept {request.method}", code="method_not_allowed")
    else:
        err = APIError(exc.status_code, str(exc.detail))
    return error_response(err)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error",
                                   code="internal_error"))


def build_app(loader: Loader, cors: CorsPolicy | None = None) -> Any:
    """The ASGI app. The port answers while ``loader`` loads the model (503 until it is ready); the lifespan's
    end cancels every job (or the load) and joins the engine thread."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            loader.cancel()
            await run_in_threadpool(loader.join)
            st = loader.state
            if st is not None:
                await run_in_threadpool(st.scheduler.close)

    get, post = ["GET"], ["POST"]
    routes = [Route("/health", _route(health, keyed=False), methods=get),
              Route("/v1/health", _route(health, keyed=False), methods=get),
              Route("/metrics", _route(metrics), methods=get),
              Route("/props", _route(props), methods=get),
              Route("/slots", _route(slots), methods=get),
              Route("/completion", _route(native_completion), methods=post),
              Route("/tokenize", _route(tokenize), methods=post),
              Route("/detokenize", _route(detokenize), methods=post),
              Route("/apply-template", _route(apply_template), methods=post)]
    for prefix in ("/v1", ""):  # the OpenAI paths, with /v1 and without, as llama-server has them
        routes += [Route(f"{prefix}/models", _route(models), methods=get),
                   Route(f"{prefix}/chat/completions", _route(chat_completions), methods=post),
                   Route(f"{prefix}/completions", _route(completions), methods=post),
                   Route(f"{prefix}/embeddings", _route(embeddings), methods=post)]
    routes.append(Route("/embedding", _route(embeddings), methods=post))
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error, Exception: _internal_error})
    app.state.loader = loader
    return CorsMiddleware(app, cors) if cors is not None else app
