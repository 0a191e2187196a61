"""llama.cpp's option spellings in ``gguf-mtp run`` and ``serve`` (issue 27): the ones that mean what ours do work,
the ones we do not have are refused in one line that says so and what to use instead."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from gguf_mtp_cli import options as O
from gguf_mtp_cli.main import main

from gguf_mtp import convert

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: runs `run` and `serve`

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tiny")
    return {"bundled": convert(TINY, outfile=d / "tiny.gguf", progress=False).path,
            "trunk": convert(TINY, outfile=d / "trunk.gguf", layout="trunk-only", progress=False).path,
            "sidecar": convert(TINY, outfile=d / "side.gguf", layout="mtp-only", progress=False).path}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["run", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _stats(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    sj = tmp_path / "stats.json"
    rc, _, err = _run(capsys, *args, "--stats-json", str(sj), "--force")
    assert rc == 0, err
    return json.loads(sj.read_text())


def test_model_as_an_option(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = _stats(tmp_path, capsys, "-m", str(files["bundled"]), "-p", "def f(x):", "-n", "4")
    assert st["mtp"] == "bundled"
    st = _stats(tmp_path, capsys, "--model", str(files["bundled"]), "-p", "def f(x):", "-n", "4")
    assert st["mtp"] == "bundled"


def test_model_twice_is_one_clear_error(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, str(files["bundled"]), "-m", str(files["bundled"]), "-p", "x")
    assert rc == 2 and "given twice" in err and len(err.strip().splitlines()) == 1


def test_model_draft_is_the_sidecar(files: dict[str, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    for opt in ("-md", "--model-draft"):
        st = _stats(tmp_path, capsys, "-m", str(files["trunk"]), opt, str(files["sidecar"]), "-p", "def f(x):",
                    "-n", "4")
        assert st["mtp"] == "self-contained sidecar"
    rc, _, err = _run(capsys, "-m", str(files["trunk"]), "-md", str(files["sidecar"]), "--mtp",
                      str(files["sidecar"]), "-p", "x")
    assert rc == 2 and "-md" in err


def test_spec_type(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = str(files["bundled"])
    assert _stats(tmp_path, capsys, m, "--spec-type", "draft-mtp", "-p", "def f(x):", "-n", "4")["mtp"] == "bundled"
    assert _stats(tmp_path, capsys, m, "--spec-type", "none", "-p", "def f(x):", "-n", "4")["mtp"] == "none"
    for other in ("ngram-mod", "draft-eagle3", "bogus"):
        rc, _, err = _run(capsys, m, "--spec-type", other, "-p", "x")
        assert rc == 2 and "draft-mtp" in err and "none" in err and len(err.strip().splitlines()) == 1


def test_help_short_option(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in ("run", "serve"):
        assert main([cmd, "-h"]) == 0
        out = capsys.readouterr().out
        assert "--min-p" in out and "--model" in out and "--mlock" not in out


def test_flash_attn(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                    monkeypatch: pytest.MonkeyPatch) -> None:
    from gguf_mtp.runtime import llama

    said: list[str] = []  # llama.cpp's own line for each context it made
    init = llama.Context.__init__

    def record(self, *a, **kw):  # type: ignore[no-untyped-def]
        init(self, *a, **kw)
        said.extend(" ".join(x.split()) for x in llama._log if "flash_attn" in x)

    monkeypatch.setattr(llama.Context, "__init__", record)
    m = str(files["bundled"])
    for v, mode in (("on", "enabled"), ("off", "disabled"), ("auto", "auto"), ("1", "enabled")):
        said.clear()
        rc, _, err = _run(capsys, m, "-fa", v, "-p", "def f(x):", "-n", "4")
        assert rc == 0, err
        assert said and set(said) == {f"llama_context: flash_attn = {mode}"}, said  # the target's and the head's
    rc, _, err = _run(capsys, m, "--flash-attn", "sometimes", "-p", "x")
    assert rc == 2 and "on, off or auto" in err
    assert O.flash_attn("enabled") is True and O.flash_attn("0") is False and O.flash_attn("-1") is None


def test_sampling_options_are_accepted_and_checked(files: dict[str, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    m = str(files["bundled"])
    rc, out, err = _run(capsys, m, "-p", "def f(x):", "-n", "8", "--temp", "0.8", "--min-p", "0.1",
                        "--repeat-penalty", "1.1", "--repeat-last-n", "32", "--presence-penalty", "0.1",
                        "--frequency-penalty", "0.1", "--ignore-eos", "--typical", "0.9")
    assert rc == 0, err
    rc, _, err = _run(capsys, m, "-p", "x", "--min-p", "2")
    assert rc == 2 and "--min-p" in err
    rc, _, err = _run(capsys, m, "-p", "x", "--repeat-penalty", "0")
    assert rc == 2 and "--repeat-penalty" in err


def test_repeat_penalty_changes_the_output(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    m, p = str(files["bundled"]), "def __init__(self, name):\n"
    rc, plain, err = _run(capsys, m, "-p", p, "-n", "40")
    assert rc == 0, err
    rc, pen, err = _run(capsys, m, "-p", p, "-n", "40", "--repeat-penalty", "1.8")
    assert rc == 0, err
    assert pen != plain


@pytest.mark.parametrize("n", ["-1", "-2"])
def test_n_minus_one_runs_to_a_full_context(files: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str], n: str) -> None:
    """llama.cpp's -1 (no limit) and -2 (until the context is full): a small context ends full, exit 0, a note.
    --ignore-eos keeps the tiny model from ending the text first."""
    st = _stats(tmp_path, capsys, str(files["bundled"]), "-p", "def f(x):", "-n", n, "-c", "256", "--ignore-eos")
    assert st["emitted"] > 200
    rc, _, err = _run(capsys, str(files["bundled"]), "-p", "def f(x):", "-n", n, "-c", "256", "--ignore-eos")
    assert rc == 0 and "the context is full" in err


def test_n_below_minus_two_is_refused(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, str(files["bundled"]), "-p", "x", "-n", "-3")
    assert rc == 2 and "-n" in err and len(err.strip().splitlines()) == 1


def test_reverse_prompt_stops_at_the_text(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    m, p = str(files["bundled"]), "def __init__(self, name):\n"
    rc, full, _ = _run(capsys, m, "-p", p, "-n", "40")
    assert rc == 0 and full.count("self") >= 2
    rc, out, err = _run(capsys, m, "-p", p, "-n", "40", "-r", "self")
    assert rc == 0, err
    assert out.rstrip("\n").endswith("self") and out.count("self") == 1
    rc, out2, _ = _run(capsys, m, "-p", p, "-n", "40", "--reverse-prompt", "nothing-like-this", "-r", "self")
    assert out2 == out
    rc, _, err = _run(capsys, m, "-p", p, "-r", "")
    assert rc == 2


#: llama.cpp options users commonly pass that gguf-mtp does not have (whether they take a value)
COMMON_UNSUPPORTED = [("--mlock", False), ("-cnv", False), ("--grammar", True), ("--mirostat", True),
                      ("-ctk", True), ("-ctv", True), ("--lora", True), ("-ub", True), ("--mmproj", True),
                      ("--keep", True), ("--dry-multiplier", True), ("-ot", True)]


def _refused(capsys: pytest.CaptureFixture[str], model: Path, name: str, takes: bool) -> None:
    rc, _, err = _run(capsys, str(model), "-p", "x", name, *(["1"] if takes else []))
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert "not supported" in lines[0] and "No such option" not in lines[0] and name in lines[0], lines[0]


@pytest.mark.parametrize("name,takes", COMMON_UNSUPPORTED)
def test_common_llamacpp_options_are_refused_in_one_line(files: dict[str, Path], name: str, takes: bool,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _refused(capsys, files["bundled"], name, takes)


def test_every_spelling_of_the_table_is_refused(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    for names, takes, where, _ in O.UNSUPPORTED:
        if "run" in where:
            for name in names:
                _refused(capsys, files["bundled"], name, takes)


def test_unsupported_in_serve_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "x.gguf", "--mlock"]) == 2
    err = capsys.readouterr().err
    assert "--mlock" in err and "not supported by gguf-mtp serve" in err


def test_jinja_is_accepted(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, str(files["bundled"]), "--jinja", "-p", "def f(x):", "-n", "2")
    assert rc == 0, err


def test_chat_help_and_reset(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """/help is not sent to the model (no answer, no statistics line), /reset says what it did."""
    monkeypatch.setattr("sys.stdin", io.StringIO("/help\n"))
    rc, out, err = _run(capsys, str(files["bundled"]), "-n", "4")
    assert rc == 0 and "/reset" in err and "session: 0 tok" in err
    assert out.strip() == ""
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n/reset\n"))
    rc, out, err = _run(capsys, str(files["bundled"]), "-n", "4", "-sys", "be brief")
    assert rc == 0 and "reset: the conversation is cleared (1 turn forgotten; the system message stays)" in err


def test_serve_spellings(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """serve reads -m, -md and --spec-type as run does (the errors come before anything loads or listens)."""
    m = str(files["bundled"])
    assert main(["serve", m, "-m", m]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main(["serve", "-m", m, "--spec-type", "ngram-cache"]) == 2
    assert "draft-mtp" in capsys.readouterr().err
    assert main(["serve", "-m", m, "-md", m, "--spec-type", "none"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert main(["serve", "-m", m, "-fa", "sometimes"]) == 2
    assert "on, off or auto" in capsys.readouterr().err
    assert main(["serve", "-m", m, "-n", "-3"]) == 2
    assert "-n" in capsys.readouterr().err


def test_llamacpp_long_aliases(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    m = str(files["bundled"])
    rc, _, err = _run(capsys, m, "--temperature", "0", "--gpu-layers", "0", "--predict", "2", "-p", "def f(x):")
    assert rc == 0, err
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\n"))
    rc, _, err = _run(capsys, m, "--system-prompt", "be brief", "-n", "2")
    assert rc == 0, err
