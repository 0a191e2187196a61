"""Request bodies of the OpenAI endpoints: parsed and checked field by field, so that bad input becomes a 4xx
with OpenAI's error shape and names the field, never an exception deep in the engine.

Fields OpenAI defines that we accept but do not act on (``user``, ``logit_bias``, ...) are still type-checked;
fields nobody defines are ignored, as OpenAI-compatible servers do (clients send their own extras). Values are shown
back in messages through :func:`_show`, which never recurses into what the client sent and never quotes more than a
few characters of it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .text import is_utf8

MAX_STOP = 4  # OpenAI's limit on stop sequences
MAX_STOP_LEN = 256
INT32_MAX = (1 << 31) - 1
ROLES = ("system", "developer", "user", "assistant", "tool")


class APIError(Exception):
    """A request the server refuses: rendered as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code,
                          **self.extra}}


def invalid(param: str, message: str, code: str = "invalid_value") -> APIError:
    """A field of the wrong type or out of range: 400, as OpenAI and llama-server answer (the ``openai`` client
    raises ``BadRequestError``; a 422 would be its ``UnprocessableEntityError``)."""
    return APIError(400, f"{param}: {message}", param=param, code=code)


@dataclass
class GenRequest:
    """What the engine needs from either endpoint."""

    model: str | None
    max_tokens: int | None  # None: until the end of generation or the context (server default)
    temperature: float | None  # None: the server's --temp, and likewise below
    top_p: float | None
    top_k: int | None
    seed: int | None
    stop: list[str]
    stream: bool
    include_usage: bool
    ignore_eos: bool = False  # llama-server's extension: generate through end-of-generation tokens
    # llama-server's sampling fields the request set (SAMPLING_FIELDS; the rest: the server's defaults)
    sampling: dict[str, Any] = field(default_factory=dict)
    prompt: str | list[int] | None = None  # /v1/completions
    return_tokens: bool = False  # /completion: the generated ids in "tokens"
    messages: list[dict[str, Any]] = field(default_factory=list)  # /v1/chat/completions


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; malformed JSON, nesting deeper than Python's parser goes and lone UTF-16
    surrogates (``"\\ud800"``: not text, llama-server's JSON parser refuses them too) are a 400."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise APIError(400, f"the request body is not valid JSON ({e}); send a JSON object",
                       code="invalid_json") from None
    except RecursionError:
        raise APIError(400, "the request body nests arrays or objects too deeply; send a flatter JSON object",
                       code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, f"the request body must be a JSON object, not {type(body).__name__}", code="invalid_json")
    if _SURROGATE_ESCAPE.search(raw):  # only a \\uD800-\\uDFFF escape can make one: the walk is for those bodies only
        where = _lone_surrogate(body)
        if where is not None:
            raise APIError(400, f"{where or 'a key'}: the request body holds a lone UTF-16 surrogate (\\ud800 to "
                           "\\udfff without its pair), which is not text; send valid Unicode", param=where or None,
                           code="invalid_json")
    return body


_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def _lone_surrogate(body: dict[str, Any]) -> str | None:
    """Where a lone surrogate is (``messages[3].content``: two levels are named; "" for a key), else None."""
    for k, v in body.items():
        if not is_utf8(k):
            return ""
        if not _holds_lone(v):
            continue
        where = k if _printable(k) else ""
        if isinstance(v, list):
            i = next(i for i, x in enumerate(v) if _holds_lone(x))
            where += f"[{i}]"
            v = v[i]
        if isinstance(v, dict):
            kk = next(kk for kk, x in v.items() if not is_utf8(kk) or _holds_lone(x))
            where += f".{kk}" if _printable(kk) else ""
        return where
    return None


def _holds_lone(v: Any) -> bool:
    """Whether ``v`` or anything inside it is a string (or key) with a lone surrogate; iterative, as the body may
    nest as deep as the parser allowed, and scalars are never put on the stack (a list may hold millions)."""
    stack = [v]
    while stack:
        x = stack.pop()
        items = x.items() if isinstance(x, dict) else ((None, y) for y in x) if isinstance(x, list) else [(None, x)]
        for k, y in items:
            if k is not None and not is_utf8(k):
                return True
            if isinstance(y, str):
                if not is_utf8(y):
                    return True
            elif isinstance(y, (dict, list)):
                stack.append(y)
    return False


def _printable(k: str) -> bool:
    return len(k) <= 64 and k.isascii() and k.isprintable()


def _show(v: Any) -> str:
    """A short, safe rendering of a client's value for a message (containers by kind only, never recursed)."""
    if isinstance(v, str):
        return json.dumps(v[:40]) + ("..." if len(v) > 40 else "")
    if isinstance(v, (dict, list)):
        return "an object" if isinstance(v, dict) else "an array"
    text = json.dumps(v) if isinstance(v, float) or v is None or isinstance(v, bool) else str(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if not (_is_int(v) or isinstance(v, float)):
        raise invalid(name, f"expected a number, got {_show(v)}", "invalid_type")
    if isinstance(v, float) and not math.isfinite(v):  # NaN, Infinity: Python's parser accepts them
        raise invalid(name, f"{v} is not a finite number")
    if not lo <= v <= hi:  # before float(): a 400-digit integer does not fit a float
        raise invalid(name, f"{_show(v)} is out of range [{lo:g}, {hi:g}]")
    return float(v)


def _integer(body: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if not _is_int(v):
        raise invalid(name, f"expected an integer, got {_show(v)}", "invalid_type")
    if not lo <= v <= hi:
        raise invalid(name, f"{_show(v)} is out of range [{lo}, {hi}]")
    return int(v)


def _check_type(body: dict[str, Any], name: str, types: tuple[type, ...], what: str) -> None:
    v = body.get(name)
    if v is not None and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
        raise invalid(name, f"expected {what}, got {_show(v)}", "invalid_type")


#: request fields that set SamplerConfig's fields of the same names, with the ranges llama-server accepts
SAMPLING_FIELDS: tuple[tuple[str, float, float], ...] = (
    ("min_p", 0.0, 1.0), ("typical_p", 0.0, 1.0), ("repeat_penalty", 0.0, 10.0), ("repeat_last_n", -1, INT32_MAX),
    ("presence_penalty", -2.0, 2.0), ("frequency_penalty", -2.0, 2.0))
#: SamplerConfig's fields a request or the serve command's defaults set (ignore_eos: a -inf bias on every
#: end-of-generation token, as llama-server's, so none is ever picked)
SAMPLING_NAMES = tuple(k for k, _, _ in SAMPLING_FIELDS) + ("ignore_eos",)


def _common(body: dict[str, Any], n_ctx: int) -> dict[str, Any]:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model", "expected a string", "invalid_type")
    mt = body.get("max_completion_tokens", None)
    name = "max_completion_tokens" if mt is not None else "max_tokens"
    max_tokens = _integer(body, name, 1, n_ctx)  # more than a slot's context could never be produced
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    # llama-server's reading: top_k is a 32-bit integer, and one below 0 means 0 (off); one above the vocabulary
    # keeps every token (runtime.options.check_sampling clamps it to the vocabulary for llama.cpp)
    top_k = _integer(body, "top_k", -INT32_MAX - 1, INT32_MAX)
    if top_k is not None and top_k < 0:
        top_k = 0
    seed = _integer(body, "seed", -(1 << 63), (1 << 64) - 1)
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise invalid("stop", "expected a string or a list of strings", "invalid_type")
    if len(stops) > MAX_STOP:
        raise invalid("stop", f"at most {MAX_STOP} stop sequences, got {len(stops)}")
    if any(not s or len(s) > MAX_STOP_LEN for s in stops):
        raise invalid("stop", f"stop sequences must be 1 to {MAX_STOP_LEN} characters long")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid("stream", "expected true or false", "invalid_type")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise invalid("stream_options", "expected an object", "invalid_type")
    include_usage = bool((so or {}).get("include_usage", False))
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise invalid("ignore_eos", "expected true or false", "invalid_type")
    n = _integer(body, "n", 1, 1 << 30)
    if n not in (None, 1):
        raise invalid("n", "only n = 1 is supported", "unsupported_value")
    # llama-server's sampling fields, applied (SamplerConfig's fields of the same names)
    sampling: dict[str, Any] = {}
    for k, lo, hi in SAMPLING_FIELDS:
        v = _integer(body, k, int(lo), int(hi)) if k == "repeat_last_n" else _number(body, k, lo, hi)
        if v is not None:
            sampling[k] = v
    if ignore_eos:
        sampling["ignore_eos"] = True
    if sampling.get("repeat_penalty") == 0:  # llama.cpp divides by it; 0 is llama-server's "off" as 1 is
        sampling["repeat_penalty"] = 1.0
    if _integer(body, "n_probs", 0, INT32_MAX):
        raise invalid("n_probs", "token probabilities are not supported by this server", "unsupported_value")
    _check_type(body, "user", (str,), "a string")
    _check_type(body, "logit_bias", (dict,), "an object")
    for k in ("logprobs", "top_logprobs", "echo"):
        if body.get(k) not in (None, False):  # 0 == False: "no logprobs"
            raise invalid(k, "is not supported by this server", "unsupported_value")
    return dict(model=model, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                seed=seed, stop=stops, stream=stream, include_usage=include_usage,
                ignore_eos=ignore_eos, sampling=sampling)


def completion_request(body: dict[str, Any], n_ctx: int, n_vocab: int) -> GenRequest:
    """``POST /v1/completions``."""
    if "prompt" not in body or body["prompt"] is None:
        raise invalid("prompt", "is required", "missing_field")
    p = body["prompt"]
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, list):
        if not p or not all(_is_int(t) for t in p):
            raise invalid("prompt", "expected a string or a list of token ids (batches of prompts are not supported)",
                          "invalid_type")
        bad = next((t for t in p if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise invalid("prompt", f"token id {bad} is outside the vocabulary (0..{n_vocab - 1})")
    elif not isinstance(p, str):
        raise invalid("prompt", "expected a string or a list of token ids", "invalid_type")
    elif not p:
        raise invalid("prompt", "is empty")
    _check_type(body, "suffix", (str,), "a string")
    if body.get("suffix"):
        raise invalid("suffix", "is not supported by this server", "unsupported_value")
    return GenRequest(prompt=p, **_common(body, n_ctx))


def _content(m: dict[str, Any], i: int) -> str:
    c = m.get("content")
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # content parts: text only
        out = []
        for j, part in enumerate(c):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise invalid(f"messages[{i}].content[{j}]", f"only text parts are supported, got {kind!r}",
                              "unsupported_value")
            out.append(part["text"])
        return "".join(out)
    raise invalid(f"messages[{i}].content", "expected a string or a list of text parts", "invalid_type")


def chat_request(body: dict[str, Any], n_ctx: int) -> GenRequest:
    """``POST /v1/chat/completions``."""
    msgs = body.get("messages")
    if msgs is None:
        raise invalid("messages", "is required", "missing_field")
    if not isinstance(msgs, list) or not msgs:
        raise invalid("messages", "expected a non-empty list of messages", "invalid_type")
    clean: list[dict[str, Any]] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise invalid(f"messages[{i}]", "expected an object with role and content", "invalid_type")
        role = m.get("role")
        if role not in ROLES:
            raise invalid(f"messages[{i}].role", f"expected one of {', '.join(ROLES)}, got {_show(role)}")
        entry: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": _content(m, i)}
        if isinstance(m.get("name"), str):
            entry["name"] = m["name"]
        clean.append(entry)
    for k in ("tools", "functions"):
        if body.get(k):
            raise invalid(k, "tool calling is not supported by this server", "unsupported_value")
    rf = body.get("response_format")
    if rf is not None and (not isinstance(rf, dict) or rf.get("type") not in (None, "text")):
        raise invalid("response_format", "only {\"type\": \"text\"} is supported", "unsupported_value")
    return GenRequest(messages=clean, **_common(body, n_ctx))


# -- llama-server's own endpoints --------------------------------------------------------------------------------

def native_completion_request(body: dict[str, Any], n_ctx: int, n_vocab: int) -> GenRequest:
    """``POST /completion`` (llama-server's native API): the fields of ``/v1/completions`` plus ``n_predict``
    (-1: no limit; it wins over ``max_tokens``, as in llama-server)."""
    n_predict = _integer(body, "n_predict", -1, INT32_MAX)
    if n_predict == 0:
        raise invalid("n_predict", "0 (evaluate the prompt only) is not supported; ask for 1 token or more, or -1 for "
                      "no limit", "unsupported_value")
    if n_predict is not None:
        body = {k: v for k, v in body.items() if k not in ("max_tokens", "max_completion_tokens")}
    req = completion_request(body, n_ctx, n_vocab)
    req.return_tokens = _flag(body, "return_tokens", False)
    if n_predict is not None:
        req.max_tokens = n_predict  # above the slot's context it stops there, as a negative one does
    return req


@dataclass
class TokenizeRequest:
    content: list[str | int]
    add_special: bool
    parse_special: bool
    with_pieces: bool


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    v = body.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise invalid(name, "expected true or false", "invalid_type")
    return v


def _token_ids(v: Any, name: str, n_vocab: int) -> list[int]:
    if not isinstance(v, list) or not all(_is_int(t) for t in v):
        raise invalid(name, "expected a list of token ids", "invalid_type")
    bad = next((t for t in v if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise invalid(name, f"token id {bad} is outside the vocabulary (0..{n_vocab - 1})")
    return list(v)


def tokenize_request(body: dict[str, Any], n_vocab: int) -> TokenizeRequest:
    """``POST /tokenize``: ``content`` a string, or strings and token ids mixed (no ``content``: no tokens, as
    llama-server answers); ``add_special`` false, ``parse_special`` true by default."""
    c = body.get("content")
    parts: list[str | int]
    if c is None:
        parts = []
    elif isinstance(c, str):
        parts = [c]
    elif isinstance(c, list) and all(isinstance(x, str) or _is_int(x) for x in c):
        parts = list(c)
        _token_ids([x for x in parts if not isinstance(x, str)], "content", n_vocab)
    else:
        raise invalid("content", "expected a string, or a list of strings and token ids", "invalid_type")
    return TokenizeRequest(parts, _flag(body, "add_special", False), _flag(body, "parse_special", True),
                           _flag(body, "with_pieces", False))


def detokenize_request(body: dict[str, Any], n_vocab: int) -> list[int]:
    """``POST /detokenize``: ``tokens`` (none: empty text, as llama-server answers)."""
    t = body.get("tokens")
    return [] if t is None else _token_ids(t, "tokens", n_vocab)


def template_request(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``POST /apply-template``: ``messages`` as ``/v1/chat/completions`` takes them."""
    return chat_request(body, INT32_MAX).messages
