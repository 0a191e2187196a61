"""Rendering a conversation with the model's own chat template (``tokenizer.chat_template`` in the GGUF)."""

from __future__ import annotations

from typing import Any

from ..errors import GgufMtpError

FALLBACK_TEMPLATE = (  # ChatML, for models that ship no template
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ChatTemplate:
    def __init__(self, template: str | None, bos: str = "", eos: str = "") -> None:
        try:
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:  # pragma: no cover - jinja2 comes with llama-cpp-python
            raise GgufMtpError("jinja2 is needed for chat templates: pip install jinja2") from None

        def raise_exception(msg: str) -> None:
            raise GgufMtpError(f"chat template: {msg}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        env.filters.setdefault("tojson", lambda v, **kw: __import__("json").dumps(v, ensure_ascii=False, **kw))
        self.source = template or FALLBACK_TEMPLATE
        self.template = env.from_string(self.source)
        self.bos, self.eos = bos, eos

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **kw: Any) -> str:
        return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                    bos_token=self.bos, eos_token=self.eos, **kw)
