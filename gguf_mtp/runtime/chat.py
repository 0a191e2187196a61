"""Rendering a conversation with the model's own chat template (``tokenizer.chat_template`` in the GGUF).

The template is code from the model file, so it runs in jinja2's immutable sandbox with limits: a render that
takes longer than ``RENDER_SECONDS`` or produces more than ``MAX_OUTPUT`` characters is stopped, and every
failure (syntax, undefined names, sandbox violations, runaway recursion) becomes one :class:`GgufMtpError` line.
The time limit is a timer signal when rendering on the main thread (it interrupts any Python loop) and checks at
every call, attribute access and operator elsewhere; the same checks ask the caller's ``cancelled`` (a server
shutting down). Limits are per thread: a server renders several requests at once.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Sized
from typing import Any, cast

from ..errors import GgufMtpError

FALLBACK_TEMPLATE = (  # ChatML, for models that ship no template
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
RENDER_SECONDS = 5.0
MAX_OUTPUT = 16 << 20  # characters, beside the conversation itself
MAX_SOURCE = 1 << 20  # released templates are a few kB to ~30 kB
MAX_RANGE = 100_000  # jinja2's sandbox limit for range()


class _Stop(Exception):
    """Raised inside a render that ran out of time or space."""


def _env(limits: _Limits) -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class LimitedEnvironment(ImmutableSandboxedEnvironment):
        # arithmetic the template could use to build huge values in one step
        intercepted_binops = frozenset({"*", "**", "+"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            limits.tick()
            if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 \
                    and max(1, abs(left).bit_length()) * right > 4096:
                raise _Stop(f"{left} ** {right} is too large")
            if operator == "*" and (isinstance(left, (str, list, tuple)) and isinstance(right, int)
                                    or isinstance(right, (str, list, tuple)) and isinstance(left, int)):
                seq, n = (left, right) if isinstance(right, int) else (right, left)
                if len(cast(Sized, seq)) * cast(int, n) > MAX_OUTPUT:
                    raise _Stop("a repeated string or list is too large")
            if operator == "+" and isinstance(left, (str, list)) and isinstance(right, (str, list)) \
                    and len(left) + len(right) > MAX_OUTPUT:
                raise _Stop("a string is too large")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            limits.tick()
            return super().call(__context, __obj, *args, **kwargs)

        def getattr(self, obj: Any, attribute: str) -> Any:
            limits.tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            limits.tick()
            return super().getitem(obj, argument)

    return LimitedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])


class _Limits(threading.local):
    """The running render's deadline and cancel check (each thread renders with its own)."""

    def __init__(self) -> None:
        self.deadline = float("inf")
        self.cancelled: Callable[[], bool] | None = None

    def start(self, seconds: float, cancelled: Callable[[], bool] | None = None) -> None:
        self.deadline = time.monotonic() + seconds
        self.cancelled = cancelled

    def stop(self) -> None:
        self.deadline, self.cancelled = float("inf"), None

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _Stop(f"it ran longer than {RENDER_SECONDS:g} s")
        if self.cancelled is not None and self.cancelled():
            raise _Stop("it was cancelled")


class ChatTemplate:
    def __init__(self, template: object, bos: str = "", eos: str = "") -> None:
        if template is not None and not isinstance(template, str):
            raise GgufMtpError(f"chat template: tokenizer.chat_template is {type(template).__name__}, not text")
        if template is not None and len(template) > MAX_SOURCE:
            raise GgufMtpError(f"chat template: {len(template)} characters, more than {MAX_SOURCE}; "
                               "not a chat template")
        self.source = template or FALLBACK_TEMPLATE
        self.bos, self.eos = bos, eos
        self._limits = _Limits()
        self._template: Any = None  # compiled on first use: a broken template only matters for chat

    def _compile(self) -> Any:
        if self._template is None:
            try:
                import jinja2
            except ImportError:  # pragma: no cover - jinja2 comes with llama-cpp-python
                raise GgufMtpError("jinja2 is needed for chat templates: pip install jinja2") from None

            def raise_exception(msg: str) -> None:
                raise GgufMtpError(f"chat template: {msg}")

            env = _env(self._limits)
            env.globals["raise_exception"] = raise_exception
            env.globals["range"] = self._range
            env.filters.setdefault("tojson", lambda v, **kw: json.dumps(v, ensure_ascii=False, **kw))
            try:
                self._template = env.from_string(self.source)
            except (jinja2.TemplateError, RecursionError, MemoryError, ValueError) as e:
                raise GgufMtpError(f"chat template does not compile ({_short(e)}); use -p for plain completion, "
                                   "or a model file with a working template") from None
        return self._template

    def _range(self, *args: int) -> _Range:
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise _Stop(f"range() of {len(r)} items")
        return _Range(r, self._limits)

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, *,
               cancelled: Callable[[], bool] | None = None, **kw: Any) -> str:
        """The conversation as the template writes it; ``cancelled`` is asked as the template runs (True stops it
        with a :class:`GgufMtpError`)."""
        template = self._compile()
        budget = MAX_OUTPUT + sum(len(str(m.get("content", ""))) for m in messages)
        self._limits.start(RENDER_SECONDS, cancelled)
        out: list[str] = []
        size = 0
        timer = _Alarm(RENDER_SECONDS)
        try:
            with timer:
                for chunk in template.generate(messages=messages, add_generation_prompt=add_generation_prompt,
                                               bos_token=self.bos, eos_token=self.eos, **kw):
                    size += len(chunk)
                    if size > budget:
                        raise _Stop(f"its output passed {budget} characters")
                    out.append(chunk)
        except GgufMtpError:
            raise
        except _Stop as e:
            raise GgufMtpError(f"chat template stopped: {e}; use -p for plain completion") from None
        except Exception as e:  # noqa: BLE001 - the template is code from the model file: any failure is its own
            raise GgufMtpError(f"chat template failed ({_short(e)}); use -p for plain completion") from None
        finally:
            self._limits.stop()
        return "".join(out)


class _Range:
    """range() for templates: checks the time limit while a loop runs over it."""

    def __init__(self, r: range, limits: _Limits) -> None:
        self.r, self.limits = r, limits

    def __iter__(self) -> Any:
        for i, x in enumerate(self.r):
            if not i & 1023:
                self.limits.tick()
            yield x

    def __len__(self) -> int:
        return len(self.r)

    def __getitem__(self, i: Any) -> Any:
        x = self.r[i]
        return _Range(x, self.limits) if isinstance(x, range) else x

    def __reversed__(self) -> _Range:
        return _Range(self.r[::-1], self.limits)

    def __contains__(self, x: object) -> bool:
        return x in self.r


class _Alarm:
    """SIGALRM after ``seconds`` raising :class:`_Stop`, on the main thread only (a signal handler can only be set
    there); elsewhere the sandbox's own checks apply."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")

    def _fire(self, signum: int, frame: Any) -> None:
        raise _Stop(f"it ran longer than {self.seconds:g} s")

    def __enter__(self) -> _Alarm:
        if self.armed:
            self.old = signal.signal(signal.SIGALRM, self._fire)
            self.old_timer = signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
            if self.old_timer[0]:
                signal.setitimer(signal.ITIMER_REAL, *self.old_timer)


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."
