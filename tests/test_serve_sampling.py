"""``gguf-mtp serve`` applies llama-server's sampling fields (min_p, repeat_penalty, presence_penalty,
frequency_penalty, repeat_last_n) and the serve command's defaults for them: each answer equals MTPSession's plain
decoding with the same SamplerConfig (issue 27: they were accepted and silently ignored)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from gguf_mtp import convert
from gguf_mtp.runtime import MTPSession, SamplerConfig
from tests.test_serve import TINY, Server

PROMPT = "def __init__(self, name):\n"
N = 40


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(TINY, outfile=tmp_path_factory.mktemp("serve-sampling") / "tiny.gguf", progress=False).path


def _complete(s: Server, **extra: object) -> str:
    status, body = s.http("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": N, "temperature": 0,
                                                      **extra})
    assert status == 200, body
    assert isinstance(body, dict)
    return body["choices"][0]["text"]


def _plain_text(model: Path, cfg: SamplerConfig) -> str:
    # one thread, as the server's (-t 1): ggml's CPU attention splits a long cache across threads, so a thread
    # count of its own could round apart once a prompt outgrows that split's threshold
    with MTPSession(model, mtp=False, n_ctx=1024, n_threads=1) as s:
        return s.generate(PROMPT, max_tokens=N, sampling=cfg).text


def test_request_fields_are_applied(model: Path) -> None:
    s = Server(model, "-c", "1024", "--no-mtp")  # the same answer as MTPSession plain: no tie to judge
    try:
        base = _complete(s)
        pen = _complete(s, repeat_penalty=1.8)
        assert pen != base
        assert pen == _plain_text(model, SamplerConfig(repeat_penalty=1.8))
        both = _complete(s, presence_penalty=1.0, frequency_penalty=0.5, repeat_last_n=16)
        assert both == _plain_text(model, SamplerConfig(presence_penalty=1.0, frequency_penalty=0.5,
                                                        repeat_last_n=16))
        hot = dict(temperature=1.5, top_k=0, top_p=1.0, seed=7)
        typ = _complete(s, typical_p=0.3, **hot)
        assert typ != _complete(s, **hot)
        assert typ == _plain_text(model, SamplerConfig(temp=1.5, top_k=0, top_p=1.0, seed=7, typical_p=0.3))
        # llama-server reads repeat_penalty 0 as off, like 1
        assert _complete(s, repeat_penalty=0) == base
    finally:
        assert s.stop(signal.SIGINT) == 0, "".join(s.log)


def test_serve_defaults_are_applied(model: Path) -> None:
    s = Server(model, "-c", "1024", "--no-mtp", "--repeat-penalty", "1.8", "--temp", "0", "--ignore-eos")
    try:
        assert _complete(s) == _plain_text(model, SamplerConfig(repeat_penalty=1.8))
        assert _complete(s, repeat_penalty=1.0) == _plain_text(model, SamplerConfig())
        status, body = s.http("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": N, "ignore_eos": True})
        assert status == 200 and isinstance(body, dict) and body["usage"]["completion_tokens"] == N, body
    finally:
        assert s.stop(signal.SIGINT) == 0, "".join(s.log)
