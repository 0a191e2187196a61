"""Chat templates are code from the model file: invalid, non-string or resource-hungry ones end in one
`chat template` line within the time limit, never a traceback, a hang or a memory blow-up; plain completion
(-p) does not need the template at all."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import gguf_mtp.runtime.chat as chat
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.ggufio.format import KV
from gguf_mtp.runtime.chat import ChatTemplate
from gguf_mtp_cli.main import main
from tests.gguf_mutate import RawGGUF

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: runs `run`

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fast_limit(monkeypatch):
    monkeypatch.setattr(chat, "RENDER_SECONDS", 0.5)


def test_working_templates_render() -> None:
    assert ChatTemplate(None).render(MSGS) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    t = ChatTemplate("{% for m in messages|reverse %}{{ m.content|upper }}{% endfor %}"
                     "{% for i in range(3)|reverse %}{{ i }}{% endfor %}{{ range(5)|length }}{{ messages|tojson }}")
    assert t.render(MSGS) == 'HI2105[{"content": "hi", "role": "user"}]'


HUNGRY = {
    "syntax": ("{% for %}", "does not compile"),
    "unclosed": ("{% if x %}", "does not compile"),
    "type error": ("{{ messages[0]['content'] + 1 }}", "failed"),
    "raise_exception": ("{{ raise_exception('only user and assistant roles') }}", "only user and assistant roles"),
    "sandbox": ("{{ messages.__class__.__mro__ }}", "failed"),
    "string bomb": ("{{ 'a' * 1000000000 }}", "too large"),
    "list bomb": ("{{ ([1] * 100000) * 100000 }}", "too large"),
    "power": ("{{ 2 ** 100000000 }}", "too large"),
    "huge range": ("{% for i in range(10**9) %}{% endfor %}", "range() of"),
    "nested loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "longer than"),
    "nested list loops": ("{% set x = range(100000)|list %}{% for a in x %}{% for b in x %}{% endfor %}{% endfor %}",
                          "longer than"),
    "output": ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output passed"),
    "recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "failed"),
}


@pytest.mark.parametrize("name", HUNGRY)
def test_bad_template_is_one_line(fast_limit, name: str) -> None:
    source, words = HUNGRY[name]
    t0 = time.monotonic()
    with pytest.raises(GgufMtpError, match="chat template") as e:
        ChatTemplate(source).render(MSGS)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert time.monotonic() - t0 < 10


def test_limit_holds_off_the_main_thread(fast_limit) -> None:
    """No timer signal outside the main thread: the sandbox's own checks stop the loop."""
    out: list[BaseException] = []

    def run() -> None:
        try:
            ChatTemplate(HUNGRY["nested loops"][0]).render(MSGS)
        except BaseException as e:  # noqa: BLE001
            out.append(e)

    th = threading.Thread(target=run)
    th.start()
    th.join(20)
    assert not th.is_alive() and isinstance(out[0], GgufMtpError) and "longer than" in str(out[0])


def test_not_a_template() -> None:
    with pytest.raises(GgufMtpError, match="chat template: tokenizer.chat_template is int, not text"):
        ChatTemplate(123)  # type: ignore[arg-type]
    with pytest.raises(GgufMtpError, match="more than"):
        ChatTemplate("x" * (chat.MAX_SOURCE + 1))


def test_broken_template_in_a_model(converted, tmp_path: Path, capsys, monkeypatch) -> None:
    g = RawGGUF.read(converted("qwen35", "bundled"))
    bad = g.set(KV.string("tokenizer.chat_template", "{% for %}")).write(tmp_path / "m.gguf")
    assert main(["run", str(bad), "-p", "hello", "-n", "2"]) == 0  # completion needs no template
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("hi\n"))
    assert main(["run", str(bad), "-n", "2"]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "chat template does not compile" in err[0], err
