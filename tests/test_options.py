"""Runtime options are checked before llama.cpp is reached: each bad value ends `gguf-mtp run` with exit 2 and
one `error:` line naming the option (llama.cpp never loads a model), values llama.cpp gives a meaning keep it
(`--seed -1`, `-c 0`), and a thread count beyond the CPUs is clamped with a note. The same checks guard the
library (SessionConfig, SamplerConfig) and `quantize -t`. The batch rule is shown to be llama.cpp's own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gguf_mtp.errors import GgufMtpError
from gguf_mtp.quantize import quantize_model
from gguf_mtp.runtime import MTPSession, SamplerConfig, SessionConfig
from gguf_mtp.runtime.options import MAX_THREADS, check_sampling, check_session, check_threads, cpu_count
from gguf_mtp.runtime.sampling import Sampler
from gguf_mtp_cli.main import main

BAD = [
    (["-b", "0"], "--batch-size 0"),
    (["-b", "3"], "--batch-size 3: must be at least --spec-draft-n-max + 2 = 4"),  # the default draft length: 2
    (["-b", "4", "--spec-draft-n-max", "3"], "--batch-size 4: must be at least --spec-draft-n-max + 2 = 5"),
    (["-b", "3", "--spec-draft-n-max", "2"], "--batch-size 3"),
    (["-t", "0"], "--threads 0"),
    (["-t", "-3"], "--threads -3"),
    (["-t", "513"], "--threads 513: must be at most 512"),
    (["-t", "100000"], "--threads 100000: must be at most 512"),
    (["-c", "4294967360"], "--ctx-size 4294967360"),
    (["-c", "-1"], "--ctx-size -1"),
    (["--temp", "nan"], "--temp nan"),
    (["--temp", "inf"], "--temp inf"),
    (["--top-p", "1.5"], "--top-p 1.5"),
    (["--top-p", "nan"], "--top-p nan"),
    (["--top-k", "-1"], "--top-k -1"),
    (["--seed", "-2"], "--seed -2"),
    (["--seed", "4294967296"], "--seed 4294967296"),
    (["--spec-draft-p-min", "2"], "--spec-draft-p-min 2.0"),
    (["--spec-draft-p-min", "nan"], "--spec-draft-p-min nan"),
    (["-ngl", "-2"], "--n-gpu-layers -2"),
    (["-ngld", "-5"], "--n-gpu-layers-draft -5"),
    (["--spec-draft-n-max", "auto:0"], "--spec-draft-n-max must be between 1 and 16 (auto:0)"),
    (["--spec-draft-n-max", "auto:17"], "between 1 and 16 (auto:17)"),
    (["--spec-draft-n-max", "auto:"], "'auto:': a number (1-16), 'auto' or 'auto:N'"),
    (["--spec-draft-n-max", "auto:six"], "'auto:six'"),
    (["--spec-draft-n-max", "autox"], "'autox'"),
]


@pytest.fixture
def no_llama(monkeypatch):
    """Fail the test if anything reaches llama.cpp or opens the model."""
    import gguf_mtp.runtime.session as session

    def boom(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("llama.cpp (or the model file) was reached")

    for name in ("Model", "Context", "resolve"):
        monkeypatch.setattr(session, name, boom)


@pytest.mark.parametrize("args,words", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_option_is_one_line_before_llama(converted, no_llama, capsys, args: list[str], words: str) -> None:
    model = converted("qwen35", "bundled")
    assert main(["run", str(model), "-p", "hi", "-n", "1", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err


def test_draft_limit_is_the_runtimes(converted, no_llama, capsys, monkeypatch) -> None:
    """--spec-draft-n-max is bounded by the runtime's MAX_DRAFT (the CLI had its own 16 beside it)."""
    import gguf_mtp.runtime.options as runtime_options

    model = str(converted("qwen35", "bundled"))
    assert main(["run", model, "-p", "hi", "--spec-draft-n-max", "17"]) == 2
    assert "--spec-draft-n-max must be between 1 and 16" in capsys.readouterr().err
    monkeypatch.setattr(runtime_options, "MAX_DRAFT", 8)
    for value, words in (("9", "between 1 and 8"), ("x", "'x': a number (1-8), 'auto' or 'auto:N'"),
                         ("auto:9", "between 1 and 8 (auto:9)")):
        assert main(["run", model, "-p", "hi", "--spec-draft-n-max", value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err


def test_the_cli_default_draft_length_is_the_librarys() -> None:
    """The CLI spells the default out (importing the runtime would load llama.cpp): it must be the library's."""
    from gguf_mtp.runtime.config import DEFAULT_DRAFT
    from gguf_mtp_cli import options

    assert options.DRAFT_N_MAX.default == str(DEFAULT_DRAFT) and SessionConfig().n_draft == DEFAULT_DRAFT


def test_library_refuses_the_same(converted, no_llama) -> None:
    model = converted("qwen35", "bundled")
    for kw in ({"n_batch": 0}, {"n_threads": 0}, {"n_ctx": 1 << 32}, {"p_min": float("nan")}, {"n_draft": 0},
               {"n_draft": 17}, {"n_batch": "8"}):
        with pytest.raises(GgufMtpError):
            MTPSession(model, **kw)
    for cfg in (SamplerConfig(temp=float("nan")), SamplerConfig(top_p=-0.1), SamplerConfig(seed=-7)):
        with pytest.raises(GgufMtpError):
            Sampler(cfg)


def test_llama_cpp_meanings_are_kept(converted, capsys) -> None:
    """--seed -1 is a random seed (said in a note), -c 0 the model's own context, -t above the CPUs (up to ggml's
    limit) is clamped."""
    model = converted("qwen35", "bundled")
    assert main(["run", str(model), "-p", "hi", "-n", "4", "--seed", "-1", "--temp", "0.8", "-c", "0",
                 "-t", str(MAX_THREADS)]) == 0
    err = capsys.readouterr().err
    assert "note: --seed -1: random seed" in err
    if cpu_count() < MAX_THREADS:
        assert f"note: --threads {MAX_THREADS} is more than the {cpu_count()} CPUs" in err
    cfg, _ = check_sampling(SamplerConfig(seed=-1))
    assert 0 <= cfg.seed < 1 << 32
    with MTPSession(model, n_ctx=0) as s:  # llama.cpp's 0: the model's context length
        assert s.engine.tgt.n_ctx > 0
        s.generate("hello", max_tokens=2)
    cfg, notes = check_session(SessionConfig(n_batch=1), speculative=False)  # plain decoding needs no verify room
    assert cfg.n_batch == 1 and not notes


def test_threads_rule() -> None:
    assert check_threads(None) == (None, [])
    assert check_threads(1) == (1, [])
    n, notes = check_threads(MAX_THREADS)
    assert n == min(cpu_count(), MAX_THREADS) and len(notes) == (cpu_count() < MAX_THREADS)
    for n in (MAX_THREADS + 1, 10**6):  # ggml aborts the process above its limit
        with pytest.raises(GgufMtpError, match=f"--threads {n}: must be at most {MAX_THREADS} "):
            check_threads(n)
    assert check_threads(0, zero_means_all=True) == (0, [])
    with pytest.raises(GgufMtpError, match="--threads 0: must be at least 1"):
        check_threads(0)


def test_quantize_threads(converted, tmp_path: Path, capsys) -> None:
    model = converted("qwen35", "bundled", outtype="f16")
    assert main(["quantize", str(model), str(tmp_path / "q.gguf"), "Q8_0", "-t", "-1"]) == 2
    assert "--threads -1" in capsys.readouterr().err
    assert not (tmp_path / "q.gguf").exists()
    assert main(["quantize", str(model), str(tmp_path / "q.gguf"), "Q8_0", "-t", "100000"]) == 2
    assert "--threads 100000: must be at most 512" in capsys.readouterr().err
    assert not (tmp_path / "q.gguf").exists()
    r = quantize_model(model, tmp_path / "q.gguf", "Q8_0", threads=MAX_THREADS)
    assert cpu_count() >= MAX_THREADS or any(f"--threads {MAX_THREADS}" in n for n in r.notes)


BATCH = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})  # the repo root: tests.helpers
    from gguf_mtp.runtime.llama import Context, Model
    from tests import helpers
    k = 3
    m = Model(sys.argv[1], load_mtp=True)
    ctx = Context(m, n_ctx=64, n_batch=int(sys.argv[2]), n_rs_seq=k, embeddings_nextn=True)
    helpers.decode(ctx, m.tokenize("hello world, hello there")[:k + 1], 0)  # a verify step: the last token + k drafts
    print("survived")
""")


@pytest.mark.parametrize("n_batch,dies", [(4, True), (5, False)])
def test_batch_rule_is_llama_cpps(converted, n_batch: int, dies: bool) -> None:
    """A hybrid target with n_rs_seq = draft = 3 aborts with a batch of draft + 1 and runs with draft + 2."""
    r = subprocess.run([sys.executable, "-c", BATCH, str(converted("qwen35", "bundled")), str(n_batch)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "GGML_NO_BACKTRACE": "1"})
    assert (r.returncode < 0) == dies, (r.returncode, r.stderr[-500:])


@pytest.mark.parametrize("host", ["a" * 5000, "a..b", "x" * 64 + ".example"])
def test_rpc_hosts_no_resolver_takes_are_one_line(converted, no_llama, capsys, host: str) -> None:
    """Issue 23: a 5000-character --rpc host was an `internal error: UnicodeError` (the resolver's label limit)."""
    model = converted("qwen35", "bundled")
    assert main(["run", str(model), "-p", "hi", "-n", "1", "--rpc", f"{host}:50052"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --rpc ") and "not a valid host name" in err[0], err
    assert len(err[0]) < 300
