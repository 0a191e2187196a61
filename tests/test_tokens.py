"""Bounded work before llama.cpp (issue 23): tokenizing in pieces gives exactly the tokens of one llama.cpp call,
each call sees a bounded piece (llama.cpp's special-token split is quadratic in what one call sees), tokenizing
stops at the context, and a text that cannot fit is refused unread. The cut rule is also checked against an
emulation of llama.cpp's special-token split on vocabularies whose special tokens overlap (the shipped model's
do not). And the same bounds in ``run`` and the Python API: a huge prompt file, sampling options at and beyond
their limits (a top-k above the vocabulary used to abort the process, so those run in a subprocess)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gguf_mtp_cli.main import main

from gguf_mtp import convert
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import MTPSession
from gguf_mtp.runtime import tokens as T

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
N_VOCAB = 4096  # the shipped model's vocabulary


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(TINY, outfile=tmp_path_factory.mktemp("tok") / "tiny.gguf", progress=False).path


@pytest.fixture(scope="module")
def session(model: Path):
    with MTPSession(model, n_ctx=512, n_threads=1) as s:
        yield s


def _texts(seed: int, specials: list[str]) -> list[str]:
    rng = random.Random(seed)
    words = ["hi", " ", "\n", "  ", "héllo", "<", "|", ">", "im_", "def", "\t", "日本", "<|", "|>", "\U0001F600",
             "\r\n", "user\n", "</", "think"] + specials
    return ["".join(rng.choice(words) for _ in range(rng.randint(4000, 16000))) for _ in range(6)]


def test_pieces_give_the_tokens_of_one_call(session: MTPSession) -> None:
    m = session.model
    f = T.facts(m)
    assert f.longest_piece >= 4 and f.specials[True].pattern is not None
    specials = [t.decode() for t in f.specials[True].texts]
    assert "<|im_end|>" in specials
    chat = session.template.render([{"role": "user", "content": "hi"}] * 3000, add_generation_prompt=True)
    cut = 0
    for text in [chat, *_texts(1, specials)]:
        data = text.encode()
        cut += len(list(T._pieces(data, f.specials[True]))) > 1
        for add_special in (True, False):
            for parse_special in (True, False):
                want = m.tokenize(text, add_special=add_special, parse_special=parse_special)
                assert T.tokenize(m, text, add_special=add_special, parse_special=parse_special) == want
    assert cut >= 5  # the texts were really cut


def test_each_llama_call_sees_a_bounded_piece(session: MTPSession) -> None:
    """Linear time: however many messages, no call gets more than a piece (plus up to the next message's end)."""
    f = T.facts(session.model)
    text = session.template.render([{"role": "user", "content": "hi"}] * 40000, add_generation_prompt=True)
    pieces = list(T._pieces(text.encode(), f.specials[True]))
    assert len(pieces) > 40 and max(len(p) for p in pieces) <= T.PIECE + 64
    assert b"".join(pieces) == text.encode()


def test_tokenizing_stops_at_the_limit(session: MTPSession, monkeypatch: pytest.MonkeyPatch) -> None:
    m = session.model
    text = "hello world " * 200_000  # 2.4 MB, ~400k tokens
    t0 = time.process_time()
    with pytest.raises(T.PromptTooLong) as e:
        T.tokenize(m, text, limit=100_000)
    assert not e.value.exact and e.value.n_tokens > 100_000 and "context is full" in str(e.value)
    assert time.process_time() - t0 < 30  # generous: it tokenized about a quarter of the text
    short = "hello world " * 50
    n = len(m.tokenize(short))
    assert T.tokenize(m, short, limit=n) == m.tokenize(short)
    with pytest.raises(T.PromptTooLong) as e:
        T.tokenize(m, short, limit=n - 1, n_ctx=n + 2)
    assert e.value.exact and e.value.n_tokens == n and f"holds {n + 2}" in str(e.value)
    # longer than the limit times the longest token: refused before llama.cpp sees any of it

    def unreachable(*a, **k):
        raise AssertionError("tokenized")

    monkeypatch.setattr(T, "_call", unreachable)
    with pytest.raises(T.PromptTooLong) as e:
        T.tokenize(m, "x" * (1000 * T.facts(m).longest_piece + T.PIECE + 1), limit=1000)
    assert not e.value.exact


def test_preparation_can_be_cancelled(session: MTPSession) -> None:
    text = session.template.render([{"role": "user", "content": "hi"}] * 5000, add_generation_prompt=True)
    with pytest.raises(T.Cancelled):
        T.tokenize(session.model, text, cancelled=lambda: True)
    with pytest.raises(GgufMtpError, match="cancelled"):
        session.template.render([{"role": "user", "content": "hi"}] * 10, cancelled=lambda: True)


# -- the cut rule, against llama.cpp's special-token split (llama_vocab::impl::tokenizer_st_partition) -------------

def _partition(text: bytes, order: list[bytes], lstrip: set[bytes], rstrip: set[bytes]) -> list[tuple[str, bytes]]:
    """llama.cpp's split, step by step: each special token in ``order``, over each raw fragment, left to right."""
    frags: list[tuple[str, int, int] | tuple[str, bytes]] = [("raw", 0, len(text))] if text else []
    for s in order:
        out: list = []
        for f in frags:
            if f[0] != "raw":
                out.append(f)
                continue
            a, e = f[1], f[2]  # type: ignore[misc]
            while True:
                m = text.find(s, a, e)
                if m < 0:
                    out.append(("raw", a, e))
                    break
                left = m
                if s in lstrip:
                    while left > a and text[left - 1:left].isspace():
                        left -= 1
                if left > a:
                    out.append(("raw", a, left))
                out.append(("tok", s))
                r = m + len(s)
                if s in rstrip:
                    while r < e and text[r:r + 1].isspace():
                        r += 1
                if r >= e:
                    break
                a = r
        frags = out
    return [("tok", f[1]) if f[0] == "tok" else ("raw", text[f[1]:f[2]]) for f in frags]  # type: ignore[misc]


@pytest.mark.parametrize("seed", range(6))
def test_cuts_keep_llama_cpps_split_with_overlapping_specials(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    specials = [b"ab", b"ba", b"aba", b"bab", b"aa", b"<x>", b"x>", b"<x", b"abab", b"c"]
    rstrip, lstrip = {b"c"}, {b"x>"}
    monkeypatch.setattr(T, "PIECE", 6)
    monkeypatch.setattr(T, "MAX_TRIES", 3)
    sp = T._make_specials(specials, rstrip)
    by_len = sorted(specials, key=len, reverse=True)
    # llama.cpp sorts by length only (std::sort, not stable): try both orders of every tie
    orders = [by_len, sorted(specials, key=lambda t: (-len(t), t)), sorted(specials, key=lambda t: (-len(t), t[::-1]))]
    for _ in range(300):
        text = bytes(rng.choice(b"ab<x> c") for _ in range(rng.randint(0, 80)))
        pieces = list(T._pieces(text, sp))
        assert b"".join(pieces) == text
        for order in orders:
            whole = _partition(text, order, lstrip, rstrip)
            parts = [f for p in pieces for f in _partition(p, order, lstrip, rstrip)]
            assert parts == whole, (text, pieces)


# -- run and the Python API ----------------------------------------------------------------------------------------

def test_run_refuses_a_huge_prompt_file_unread(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(64 << 20)  # sparse: 64 MiB of NUL characters, valid UTF-8
    t0 = time.monotonic()
    assert main(["run", str(model), "-f", str(big), "-c", "512", "-n", "1", "-t", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "big.txt" in err[-1] and f"{64 << 20} bytes" in err[-1], err
    assert time.monotonic() - t0 < 60
    small = tmp_path / "small.txt"
    small.write_text("def f(x):\n" * 400)  # fits the byte bound, not the context: refused when tokenized
    assert main(["run", str(model), "-f", str(small), "-c", "512", "-n", "1", "-t", "1"]) == 2
    assert "context is full: the prompt has" in capsys.readouterr().err


def _py(code: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def test_api_sampling_is_checked_against_the_vocabulary(model: Path) -> None:
    """top_k above the vocabulary keeps every token (as llama.cpp's host sampler does with k > n_vocab), on the
    device sampler too, where llama.cpp aborted; a temperature too small for single precision is greedy."""
    code = f"""
import json
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import MTPSession, SamplerConfig
out = {{}}
with MTPSession({str(model)!r}, n_ctx=256, n_threads=1) as s:
    run = lambda cfg: s.generate("def f(x):", max_tokens=8, sampling=cfg).tokens
    out["greedy"] = run(SamplerConfig(temp=0))
    for k in ({N_VOCAB}, {N_VOCAB + 1}, 2**31 - 1, 10**30):
        out[f"k{{k}}"] = run(SamplerConfig(temp=1.0, top_k=k, seed=3))
    out["tiny"] = run(SamplerConfig(temp=1e-40, top_k=40, seed=3))
    try:
        run(SamplerConfig(temp=1e39))
    except GgufMtpError as e:
        out["huge"] = str(e)
print(json.dumps(out))
"""
    r = _py(code)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out[f"k{N_VOCAB + 1}"] == out[f"k{2**31 - 1}"] == out[f"k{10**30}"] == out[f"k{N_VOCAB}"]
    assert out["tiny"] == out["greedy"]
    assert "--temp" in out["huge"] and "single precision" in out["huge"]


def test_run_sampling_limits(model: Path) -> None:
    cmd = [sys.executable, "-m", "gguf_mtp_cli.main", "run", str(model), "-p", "x", "-n", "4", "-t", "1", "-c", "256"]
    r = subprocess.run([*cmd, "--temp", "1", "--top-k", str(N_VOCAB + 1)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"note: --top-k {N_VOCAB + 1} is more than the model's {N_VOCAB} tokens; using {N_VOCAB}" in r.stderr
    r = subprocess.run([*cmd, "--temp", "1e-40"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and "is below 1e-30: greedy" in r.stderr, r.stderr[-3000:]
    r = subprocess.run([*cmd, "--temp", "1e39"], capture_output=True, text=True, timeout=240)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --temp"), r.stderr[-3000:]


def test_serve_checks_its_sampling_defaults(model: Path) -> None:
    cmd = [sys.executable, "-m", "gguf_mtp_cli.main", "serve", str(model), "--port", "0", "-t", "1"]
    for bad in (["--temp", "nan"], ["--top-p", "2"], ["--top-k", "-3"], ["--seed", "-5"]):
        r = subprocess.run([*cmd, *bad], capture_output=True, text=True, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {bad[0]}"), (bad, r.stderr)


def test_session_refuses_a_long_prompt_before_tokenizing_it_all(session: MTPSession) -> None:
    with pytest.raises(T.PromptTooLong, match="context is full: the prompt has at least"):
        session.generate("hello " * 2_000_000, max_tokens=1)
    with pytest.raises(T.PromptTooLong):
        session.chat([{"role": "user", "content": "hi"}] * 100_000, max_tokens=1)
    with pytest.raises(T.PromptTooLong, match="the prompt has 600 tokens"):
        session.generate([1] * 600, max_tokens=1)
    assert session.generate("def f(x):", max_tokens=2).tokens  # and the session still works
