"""Every shell command the docs show is run here (issue 26): each command line of a bash/sh/console block in
README.md and docs/*.md has a row in COMMANDS saying how it is checked, and a command the table does not cover
fails the suite.

The commands run as written, in a scratch folder that holds the files they name, made from the shipped tiny model
(``Qwen3.5-9B/`` and ``Qwen3.5-27B/`` are copies of examples/tiny-qwen35-mtp; ``Qwen3.5-9B-Q4_K_M.gguf`` is its
trunk quantized, and so on), with a local Hub stand-in serving the same checkpoint under the repo ids the docs use.
What needs hardware or a network this machine may lack (several GPUs, Vulkan and CUDA builds, RPC servers, Docker)
runs as far as it can: when the build lacks a named device the command must end in one line naming it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .hub_server import HubStandIn
from .reliability import ROOT, check_contract

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: runs the docs' `run` and `serve` commands

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TINY = ROOT / "examples" / "tiny-qwen35-mtp"
BIN = Path(sys.executable).parent  # the venv's gguf-mtp

# -- the commands the docs show -------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
SHELL_BLOCKS = {"bash", "sh", "shell", "console"}


def _unquoted(text: str) -> Iterator[tuple[int, str, bool]]:
    """(index, character, outside quotes) for each character of a shell line."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
            yield i, ch, False
        elif ch in "'\"":
            quote = ch
            yield i, ch, False
        else:
            yield i, ch, True


def _split_comment(line: str) -> tuple[str, str]:
    """(the code, the comment after its #) of a shell line."""
    for i, ch, free in _unquoted(line):
        if free and ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _open_quote(text: str) -> bool:
    quote = None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
    return quote is not None


def commented_commands(markdown: str) -> list[tuple[str, str]]:
    """(command, the comment on its last line) for each command line of a page's shell blocks: comments dropped,
    continued lines (``\\``, open quotes) joined; in a console block only the ``$ `` lines."""
    out: list[tuple[str, str]] = []
    lang: str | None = None
    indent = pending = ""
    for raw in markdown.splitlines():
        m = _FENCE.match(raw)
        if m:
            lang, indent = (None, "") if lang is not None else (m[2], m[1])
            continue
        if lang not in SHELL_BLOCKS:
            continue
        line = raw[len(indent):] if raw.startswith(indent) else raw.lstrip()
        if lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        code, comment = (line.rstrip(), "") if pending and _open_quote(pending) else _split_comment(line)
        cmd = pending + "\n" + code if pending else code
        if cmd.endswith("\\") or _open_quote(cmd):
            pending = cmd
            continue
        pending = ""
        if cmd.strip():
            out.append((cmd.strip(), comment))
    return out


def shell_commands(markdown: str) -> list[str]:
    return [cmd for cmd, _ in commented_commands(markdown)]


def doc_commands() -> dict[str, str]:
    """Every command of README.md and docs/*.md -> the first page that shows it."""
    found: dict[str, str] = {}
    for page in DOCS:
        for cmd in shell_commands(page.read_text()):
            found.setdefault(cmd, str(page.relative_to(ROOT)))
    return found


def python_blocks() -> dict[str, str]:
    """Every python block of README.md and docs/*.md, by its first line that is not an import -> its code."""
    found: dict[str, str] = {}
    for page in DOCS:
        lang, indent, lines = None, "", []
        for raw in page.read_text().splitlines():
            m = _FENCE.match(raw)
            if m and lang is None:
                lang, indent, lines = m[2], m[1], []
            elif m:
                if lang == "python":
                    key = next(ln for ln in lines if ln.strip() and not ln.startswith(("import ", "from ")))
                    found[key] = "\n".join(lines) + "\n"
                lang = None
            elif lang is not None:
                lines.append(raw[len(indent):] if raw.startswith(indent) else raw)
    return found


# -- how each is checked --------------------------------------------------------------------------------------------

RUN = "run"  # runs in the scratch folder (chat commands get one message on stdin); exit 0, its outputs written
AFTER = "after"  # the same, right after the command whose output it reads (FOLLOWERS), in that command's folder
DEVICES = "devices"  # runs when the build has the devices it names, else ends in one `error:` line naming one
SERVE = "serve"  # a server started as written (on a free port) answers; the curl lines run against it
CURL = "curl"
DOCKER = "docker"  # not run: its URL and key must be those of the serve line before it
SETUP = "setup"  # setup.sh with CMAKE_ARGS: the back-end it asks for, and the prerequisite check on this machine
MAKE = "make"
PIP = "pip"  # installs this folder with extras pyproject has (no network here)
SCRIPT = "script"  # builds llama.cpp from source: the script parses and writes the binary the line then runs

Q8 = "Qwen3.5-9B-Q8_0.gguf"
PROFILE_OUT = ("gguf-mtp run model.gguf -ngl 99 --spec-draft-n-max auto -f warmup.txt -n 256 "
               "--spec-draft-profile-out h100.json")
PROFILE_IN = 'gguf-mtp run model.gguf -ngl 99 --spec-draft-n-max auto -p "..." --spec-draft-profile h100.json'
STATS = 'for k in 1 2 3 4; do gguf-mtp run model.gguf -p "..." --spec-draft-n-max $k --stats-json k$k.json; done'
TINY_Q8 = "gguf-mtp convert examples/tiny-qwen35-mtp --outtype q8_0 > /dev/null"

#: command -> (how, files it writes into the scratch folder: removed before, required after)
COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    # install
    "make demo": (MAKE, ()),
    "make test": (MAKE, ()),
    'pip install ".[serve]"': (PIP, ()),
    'pip install -e ".[serve]"': (PIP, ()),
    'pip install ".[plot]"': (PIP, ()),
    # convert
    "gguf-mtp convert ./Qwen3.5-9B --outtype q8_0": (RUN, (Q8,)),
    "gguf-mtp convert ./Qwen3.5-9B --outtype q8_0 --no-mtp": (RUN, ("Qwen3.5-9B-Q8_0-trunk.gguf",)),
    "gguf-mtp convert ./Qwen3.5-9B --outtype q8_0 --mtp": (RUN, ("Qwen3.5-9B-Q8_0-MTP.gguf",)),
    "gguf-mtp convert ./Qwen3.5-9B --mtp --head-only": (RUN, ("Qwen3.5-9B-BF16-MTP-head-Q8_0.gguf",)),
    "gguf-mtp convert Qwen/Qwen3.5-9B --revision main": (RUN, ("Qwen3.5-9B-BF16.gguf",)),
    "gguf-mtp convert ./Qwen3.5-9B --outtype q8_0 --draft-head-type q4_0": (RUN, (Q8,)),
    "gguf-mtp convert ./Qwen3.5-9B --outtype bf16 -o Qwen3.5-9B-BF16.gguf": (RUN, ("Qwen3.5-9B-BF16.gguf",)),
    TINY_Q8: (RUN, ("tiny-qwen35-mtp-Q8_0.gguf",)),
    "gguf-mtp convert Qwen/Qwen3.5-27B --outtype q8_0": (RUN, ("Qwen3.5-27B-Q8_0.gguf",)),
    # surgery
    "gguf-mtp extract Qwen3.5-9B-Q8_0.gguf --head-only --draft-head-type q4_0":
        (RUN, ("Qwen3.5-9B-Q8_0-MTP-head.gguf",)),
    "gguf-mtp extract Qwen3.5-9B-MTP.gguf --onto Qwen3.5-9B-UD-Q4_K_XL.gguf --draft-head-type q4_0 -o out.gguf":
        (RUN, ("out.gguf",)),
    "gguf-mtp extract Qwen3.5-27B-Q8_0.gguf": (RUN, ("Qwen3.5-27B-Q8_0-MTP.gguf",)),
    "gguf-mtp extract Qwen3.5-27B-Q8_0.gguf --head-only": (RUN, ("Qwen3.5-27B-Q8_0-MTP-head.gguf",)),
    "gguf-mtp extract Qwen3.5-27B-Q8_0.gguf --strip": (RUN, ("Qwen3.5-27B-Q8_0-trunk.gguf",)),
    "gguf-mtp extract Qwen3.5-27B-Q8_0.gguf --head-only -o Qwen3.5-27B-MTP.gguf": (RUN, ("Qwen3.5-27B-MTP.gguf",)),
    "gguf-mtp extract Qwen3.5-27B-Q8_0-MTP.gguf --onto Qwen3.5-27B-UD-Q4_K_XL.gguf -o Qwen3.5-27B-UD-Q4_K_XL-MTP.gguf":
        (RUN, ("Qwen3.5-27B-UD-Q4_K_XL-MTP.gguf",)),
    "gguf-mtp extract Qwen3.5-27B-MTP.gguf --onto Qwen3.5-27B-UD-Q4_K_XL.gguf -o Qwen3.5-27B-UD-Q4_K_XL-MTP.gguf":
        (RUN, ("Qwen3.5-27B-UD-Q4_K_XL-MTP.gguf",)),
    "gguf-mtp extract Qwen3.5-27B-MTP.gguf --onto Qwen3.5-27B-UD-Q4_K_XL.gguf -o "
    "Qwen3.5-27B-UD-Q4_K_XL-MTP-bundled.gguf": (RUN, ("Qwen3.5-27B-UD-Q4_K_XL-MTP-bundled.gguf",)),
    "gguf-mtp extract Qwen/Qwen3.5-27B --head-only -o Qwen3.5-27B-MTP.gguf": (RUN, ("Qwen3.5-27B-MTP.gguf",)),
    "gguf-mtp extract Qwen/Qwen3.5-27B -o Qwen3.5-27B-Q8_0-MTP.gguf": (RUN, ("Qwen3.5-27B-Q8_0-MTP.gguf",)),
    "gguf-mtp extract Qwen/Qwen3.5-27B --onto Qwen3.5-27B-UD-Q4_K_XL.gguf -o Qwen3.5-27B-UD-Q4_K_XL-MTP.gguf":
        (RUN, ("Qwen3.5-27B-UD-Q4_K_XL-MTP.gguf",)),
    # quantize
    "gguf-mtp quantize Qwen3.5-9B-BF16.gguf Qwen3.5-9B-Q4_K_M.gguf Q4_K_M": (RUN, ("Qwen3.5-9B-Q4_K_M.gguf",)),
    "gguf-mtp quantize Qwen3.5-9B-BF16.gguf Qwen3.5-9B-Q4_K_M.gguf Q4_K_M --draft-head-type q4_0":
        (RUN, ("Qwen3.5-9B-Q4_K_M.gguf",)),
    "gguf-mtp quantize Qwen3.5-9B-BF16.gguf Qwen3.5-9B-IQ4_XS.gguf IQ4_XS --imatrix imatrix.gguf":
        (RUN, ("Qwen3.5-9B-IQ4_XS.gguf",)),
    # run
    'gguf-mtp run Qwen3.5-9B-Q8_0.gguf -p "def quicksort(xs):" -n 128': (RUN, ()),
    "gguf-mtp run Qwen3.5-27B-UD-Q4_K_XL.gguf --mtp Qwen3.5-27B-MTP.gguf": (RUN, ()),
    "gguf-mtp run Qwen3.5-9B-UD-Q4_K_XL.gguf": (RUN, ()),
    "gguf-mtp run Qwen3.5-9B-Q4_K_M.gguf --mtp Qwen3.5-9B-Q8_0-MTP.gguf -ngl 99 --spec-draft-n-max 3": (RUN, ()),
    "gguf-mtp run Qwen3.5-9B-Q4_K_M.gguf --spec-draft-n-max auto --stats-json stats.json": (RUN, ("stats.json",)),
    "gguf-mtp run Qwen3.5-9B-Q4_K_M.gguf --no-mtp": (RUN, ()),
    PROFILE_OUT: (RUN, ("h100.json",)),
    PROFILE_IN: (AFTER, ()),
    # tools
    "gguf-mtp inspect tiny-qwen35-mtp-Q8_0.gguf": (AFTER, ()),
    STATS: (RUN, ("k1.json", "k2.json", "k3.json", "k4.json")),
    "gguf-mtp plot k1.json k2.json k3.json k4.json -o speed.png": (AFTER, ("speed.png",)),
    "gguf-mtp plot bench/reference/side-by-side-h100-noisy-host/side-by-side.json":
        (RUN, ("bench/reference/side-by-side-h100-noisy-host/side-by-side.png",)),
    # devices
    'CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" bash scripts/setup.sh': (SETUP, ()),
    'CMAKE_ARGS="-DGGML_VULKAN=on" VENV=.venv-vk bash scripts/setup.sh': (SETUP, ()),
    "gguf-mtp run --list-devices": (RUN, ()),
    "gguf-mtp run M.gguf -ngl 99 --device CUDA0,CUDA1 --tensor-split 1,1": (DEVICES, ()),
    "gguf-mtp run M.gguf -ngl 99 --device CUDA0 --device-draft CUDA1": (DEVICES, ()),
    "gguf-mtp run M.gguf -ngl 99 --split-mode none --main-gpu 1": (DEVICES, ()),
    "gguf-mtp run M.gguf -ngl 99 --rpc 10.0.0.2:50052,10.0.0.3:50052": (DEVICES, ()),
    "gguf-mtp run M.gguf -ngl 99 --rpc 10.0.0.2:50052 --device RPC0,CUDA0 --device-draft CUDA0": (DEVICES, ()),
    "gguf-mtp rpc-server --host 10.0.0.2 --port 50052": (DEVICES, ()),
    "bash scripts/build-rpc-server.sh && build/rpc-server/rpc-server --host 10.0.0.2 --port 50052": (SCRIPT, ()),
    # serve
    "gguf-mtp serve Qwen3.5-9B-Q4_K_M.gguf --mtp Qwen3.5-9B-MTP.gguf -ngl 99 -np 4 -c 32768 --port 8080": (SERVE, ()),
    "gguf-mtp serve Qwen3.5-9B-Q4_K_M.gguf -ngl 99 --host 0.0.0.0 --api-key s3cret --alias qwen3.5-9b": (SERVE, ()),
    'curl http://127.0.0.1:8080/v1/chat/completions -H "Content-Type: application/json" -d \'{\n'
    '  "messages": [{"role": "user", "content": "Write a quicksort in Python."}], "max_tokens": 256}\'': (CURL, ()),
    'curl -N http://127.0.0.1:8080/v1/completions -H "Content-Type: application/json" -d \'{\n'
    '  "prompt": "def fib(n):", "max_tokens": 64, "temperature": 0, "stream": true}\'': (CURL, ()),
    "docker run -d -p 3000:8080 --add-host=host.docker.internal:host-gateway -v open-webui:/app/backend/data \\\n"
    "  -e OPENAI_API_BASE_URL=http://host.docker.internal:8080/v1 -e OPENAI_API_KEY=s3cret \\\n"
    "  --name open-webui ghcr.io/open-webui/open-webui:main": (DOCKER, ()),
}

#: the python blocks, by their first line that is not an import -> where they run
API, SESSION, CLIENT = "api", "session", "client"  # a folder of bf16 files / the scratch folder / against serve
SERVE_LIB = "serve-lib"  # gguf_mtp.server.serve() on a loaded session
PYTHON: dict[str, str] = {
    'r = gguf_mtp.convert("Qwen3.5-9B", outtype="q8_0", layout="mtp-only")   # -> ConvertResult': API,
    'with MTPSession("Qwen3.5-9B-Q4_K_M.gguf", mtp="Qwen3.5-9B-Q8_0-MTP.gguf", n_draft=3, n_gpu_layers=99) as s:':
        SESSION,
    'client = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="none")   # any key unless --api-key is set': CLIENT,
    'with MTPSession("Qwen3.5-9B-Q8_0.gguf", n_parallel=4, n_ctx=16384) as s:': SERVE_LIB,
}


def of_kind(kind: str) -> list[str]:
    return [c for c, (k, _) in COMMANDS.items() if k == kind]


def test_every_command_in_the_docs_has_a_row() -> None:
    shown = doc_commands()
    assert len(shown) >= 50, shown
    missing = {c: page for c, page in shown.items() if c not in COMMANDS}
    assert not missing, f"commands in the docs that no row of COMMANDS checks: {missing}"
    stale = [c for c in COMMANDS if c not in shown]
    assert not stale, f"rows of COMMANDS for commands the docs no longer show: {stale}"


def test_every_python_block_in_the_docs_has_a_row() -> None:
    assert sorted(python_blocks()) == sorted(PYTHON)


def _python(code: str, cwd: Path, env: dict[str, str]) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (code, r.stdout[-2000:], r.stderr[-3000:])
    return r.stdout


def test_the_api_block_runs(base: Path, hub: dict[str, str], tmp_path: Path) -> None:
    """docs/python-api.md as written, where model.gguf is a bf16 bundled model (what `quantize` takes) and
    someone-elses-Q4_K_M.gguf a Q4_K_M without a head."""
    (code,) = [c for k, c in python_blocks().items() if PYTHON[k] == API]
    d = tmp_path / "api"
    d.mkdir()
    shutil.copytree(TINY, d / "Qwen3.5-9B")
    shutil.copyfile(base / "Qwen3.5-9B-BF16.gguf", d / "model.gguf")
    shutil.copyfile(base / "Qwen3.5-9B-UD-Q4_K_XL.gguf", d / "someone-elses-Q4_K_M.gguf")
    out = _python(code, d, hub)
    for name in ("Qwen3.5-9B-Q8_0-MTP.gguf", "model-MTP.gguf", "model-trunk.gguf", "grafted.gguf",
                 "model-Q4_K_M.gguf", "model-Q4_K_M-dh.gguf"):
        assert (d / name).is_file(), (name, sorted(os.listdir(d)))
    assert "Layout.MTP_ONLY" in out or "mtp-only" in out, out


def test_the_session_block_runs(base: Path, hub: dict[str, str], tmp_path: Path) -> None:
    (code,) = [c for k, c in python_blocks().items() if PYTHON[k] == SESSION]
    out = _python(code, scratch(base, tmp_path, ()), hub)
    assert "tok" in out and "t/s" in out, out


def test_the_extraction_reads_blocks_as_a_shell_would() -> None:
    page = ("text\n```bash\ngguf-mtp a 'x # y'   # comment\n# only a comment\ncmd one \\\n  two\n"
            "curl -d '{\n  \"a\": 1}'\n```\n```python\nprint(1)\n```\n  ```console\n  $ gguf-mtp b\n  output\n  ```\n")
    assert shell_commands(page) == ["gguf-mtp a 'x # y'", "cmd one \\\n  two", "curl -d '{\n  \"a\": 1}'",
                                    "gguf-mtp b"]


def test_the_file_a_comment_names_is_what_the_command_writes() -> None:
    """`gguf-mtp convert ./Qwen3.5-9B --outtype q8_0  # Qwen3.5-9B-Q8_0.gguf ...`: a comment that starts with a file
    name (or `-> name`) names the output, so the row lists it and the run checks it is written."""
    named = 0
    for page in DOCS:
        for cmd, comment in commented_commands(page.read_text()):
            first = comment.removeprefix("->").split()[0] if comment.removeprefix("->").split() else ""
            if first.endswith((".gguf", ".png", ".json")):
                named += 1
                assert first in {Path(o).name for o in COMMANDS[cmd][1]}, (page.name, cmd, first, COMMANDS[cmd])
    assert named >= 8


# -- the scratch folder ---------------------------------------------------------------------------------------------


def _cli(args: list[str], cwd: Path, env: dict[str, str]) -> None:
    r = subprocess.run([str(BIN / "gguf-mtp"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (args, r.stderr)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A local Hub serving the tiny checkpoint under the repo ids the docs use; the environment that reaches it."""
    cache = tmp_path_factory.mktemp("hub-cache")
    with HubStandIn() as h:
        for repo in ("Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-27B"):
            h.add(repo, TINY)
        yield dict(os.environ, HF_ENDPOINT=h.url, GGUF_MTP_CACHE=str(cache / "gm"), HF_HUB_CACHE=str(cache / "hf"),
                   HF_HUB_DISABLE_XET="1", HF_HUB_OFFLINE="0", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, hub: dict[str, str]) -> Path:
    """Every file the docs' commands read, under the names they use, made from the tiny model."""
    from .test_quantize import write_imatrix

    d = tmp_path_factory.mktemp("docs-base")
    for name in ("Qwen3.5-9B", "Qwen3.5-27B", "examples/tiny-qwen35-mtp"):
        shutil.copytree(TINY, d / name)
    ck = str(d / "Qwen3.5-9B")
    made = {"bf16": ["--outtype", "bf16"], "q8": ["--outtype", "q8_0"], "sc": ["--outtype", "q8_0", "--mtp"],
            "head": ["--mtp", "--head-only"], "trunk": ["--outtype", "bf16", "--no-mtp"]}
    for key, opts in made.items():
        _cli(["convert", ck, *opts, "-o", str(d / f"_{key}.gguf"), "-q"], d, hub)
    _cli(["quantize", str(d / "_trunk.gguf"), str(d / "_q4.gguf"), "Q4_K_M", "-q"], d, hub)
    write_imatrix(d / "imatrix.gguf", d / "_bf16.gguf")
    copies = {"_bf16": ["Qwen3.5-9B-BF16"], "_q8": [Q8[:-5], "Qwen3.5-27B-Q8_0", "model", "M"],
              "_sc": ["Qwen3.5-9B-Q8_0-MTP", "Qwen3.5-27B-Q8_0-MTP"],
              "_head": ["Qwen3.5-9B-MTP", "Qwen3.5-9B-UD-Q4_K_XL-MTP", "Qwen3.5-27B-MTP"],
              "_q4": ["Qwen3.5-9B-Q4_K_M", "Qwen3.5-9B-UD-Q4_K_XL", "Qwen3.5-27B-UD-Q4_K_XL"]}
    for src, names in copies.items():
        for name in names:  # copies, not links: an output is never an input by any name
            shutil.copyfile(d / f"{src}.gguf", d / f"{name}.gguf")
        (d / f"{src}.gguf").unlink()
    (d / "warmup.txt").write_text((TINY.parent / "prompt.txt").read_text())
    bench = "bench/reference/side-by-side-h100-noisy-host/side-by-side.json"
    (d / bench).parent.mkdir(parents=True)
    shutil.copyfile(ROOT / bench, d / bench)
    return d


def scratch(base: Path, tmp_path: Path, outputs: tuple[str, ...]) -> Path:
    """A folder like ``base`` (hard links: the commands never write their inputs) without the command's outputs."""
    d = tmp_path / "w"
    subprocess.run(["cp", "-al", str(base), str(d)], check=True)
    for name in outputs:
        (d / name).unlink(missing_ok=True)
    return d


def shell(cmd: str, cwd: Path, env: dict[str, str], stdin: str = "",
          timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode >= 0, f"{cmd}: died by signal {-r.returncode}: {r.stderr}"
    if cmd.startswith("gguf-mtp"):
        check_contract(r.returncode, r.stderr)
    return r

#: a command -> those (rows of kind AFTER) that read what it writes: they run next, in its folder
FOLLOWERS = {PROFILE_OUT: [PROFILE_IN], STATS: ["gguf-mtp plot k1.json k2.json k3.json k4.json -o speed.png"],
             TINY_Q8: ["gguf-mtp inspect tiny-qwen35-mtp-Q8_0.gguf"]}


def _chats(cmd: str) -> bool:
    argv = shlex.split(cmd)
    return argv[:2] == ["gguf-mtp", "run"] and not {"-p", "-f", "--list-devices"} & set(argv)


@pytest.mark.parametrize("cmd", of_kind(RUN))
def test_command_runs(cmd: str, base: Path, hub: dict[str, str], tmp_path: Path) -> None:
    d = scratch(base, tmp_path, tuple(o for line in [cmd, *FOLLOWERS.get(cmd, [])] for o in COMMANDS[line][1]))
    for line in [cmd, *FOLLOWERS.get(cmd, [])]:
        r = shell(line, d, hub, stdin="Write a function.\n" if _chats(line) else "")
        assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
        for name in COMMANDS[line][1]:
            assert (d / name).is_file() and (d / name).stat().st_size > 0, (line, name, sorted(os.listdir(d)))
        if _chats(line) or " -p " in line or " -f " in line:  # an answer came, with the statistics line after it
            assert re.search(r"\d+ tok [\d.]+ t/s", r.stdout + r.stderr), r.stderr[-2000:]


def test_every_after_row_follows_a_command() -> None:
    assert sorted(c for f in FOLLOWERS.values() for c in f) == sorted(of_kind(AFTER))
    assert all(COMMANDS[c][0] == RUN for c in FOLLOWERS)


# -- devices, RPC ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def build_devices(hub: dict[str, str]) -> list[str]:
    r = subprocess.run([str(BIN / "gguf-mtp"), "run", "--list-devices"], capture_output=True, text=True, env=hub,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return re.findall(r"^\s+(\w+):", r.stdout, re.M)


@pytest.mark.parametrize("cmd", of_kind(DEVICES))
def test_device_command_runs_or_names_what_is_missing(cmd: str, base: Path, hub: dict[str, str], tmp_path: Path,
                                                       build_devices: list[str]) -> None:
    argv = shlex.split(cmd)
    gpus = [n for n in build_devices if n != "CPU"]
    if argv[1] == "rpc-server":  # binds an address this machine may not have: refused, or serving (then stopped)
        p = subprocess.Popen(argv, cwd=tmp_path, env=hub, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=20)
            return
        check_contract(p.returncode, err)
        assert p.returncode == 2 and "10.0.0.2:50052" in err.splitlines()[-1], err
        return
    d = scratch(base, tmp_path, ())
    r = shell(cmd + ' -p "def f():" -n 8', d, hub, timeout=120)
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    named = [v for a, v in zip(argv, argv[1:]) if a in ("--device", "--device-draft")]
    wanted = [n for v in named for n in v.split(",")]
    rpc = [v for a, v in zip(argv, argv[1:]) if a == "--rpc"]
    if rpc:  # no such server here: the probe names it before ggml sees it
        assert r.returncode == 2 and last.startswith(f"error: --rpc {rpc[0].split(',')[0]}"), r.stderr
    elif any(n not in build_devices for n in wanted):
        absent = [n for n in wanted if n not in build_devices]
        assert r.returncode == 2 and last.startswith("error: ") and absent[0] in last, r.stderr
    elif "--main-gpu" in argv and len(gpus) == 1:
        assert r.returncode == 2 and "--main-gpu" in last, r.stderr
    else:
        assert r.returncode == 0, r.stderr
        if not gpus:
            assert "has no GPU backend, running on the CPU" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", of_kind(SETUP))
def test_setup_command_asks_for_its_backend(cmd: str) -> None:
    argv = shlex.split(cmd)
    env = dict(a.split("=", 1) for a in argv if re.match(r"^[A-Z_]+=", a))
    assert argv[len(env):] == ["bash", "scripts/setup.sh"], argv
    script = (ROOT / "scripts" / "setup.sh").read_text()
    for var in env:
        assert f'{var}="${{{var}:-' in script, var  # setup.sh reads it
    backends = [sys.executable, str(ROOT / "gguf_mtp" / "backends.py")]
    r = subprocess.run([*backends, "requested", f"--cmake-args={env['CMAKE_ARGS']}"], capture_output=True, text=True,
                       timeout=60)
    want = "CUDA" if "CUDA" in env["CMAKE_ARGS"] else "Vulkan"
    assert r.returncode == 0 and want in r.stdout.split(), (r.stdout, r.stderr)
    r = subprocess.run([*backends, "prereqs", f"--cmake-args={env['CMAKE_ARGS']}"], capture_output=True, text=True,
                       timeout=60)
    # what this machine has installed decides the verdict; either way each finding is one setup: line
    assert r.returncode in (0, 1), r.stderr
    assert all(ln.startswith(("setup: error: ", "setup: warning: ")) for ln in r.stderr.splitlines()), r.stderr
    assert r.returncode == 0 or "setup: error: " in r.stderr


def test_rpc_server_build_line() -> None:
    (cmd,) = of_kind(SCRIPT)
    build, run = cmd.split(" && ")
    script = ROOT / shlex.split(build)[1]
    assert subprocess.run(["bash", "-n", str(script)], timeout=30).returncode == 0
    text = script.read_text()
    out = re.search(r'OUT="\$\{1:-([^}]+)\}"', text)
    assert out and shlex.split(run)[0] == f"{out[1]}/rpc-server", (out, run)
    assert 'mv "$OUT/rpc-server.partial" "$OUT/rpc-server"' in text
    # the options are llama.cpp rpc-server's and ours alike: the same line works with `gguf-mtp rpc-server`
    r = subprocess.run([str(BIN / "gguf-mtp"), "rpc-server", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and all(o in r.stdout for o in ("--host", "--port")), r.stdout


# -- make, pip ------------------------------------------------------------------------------------------------------


def test_make_demo_runs(tmp_path: Path) -> None:
    """`make demo` as written, in a copy of what it reads (its out/ folder stays out of the repository), with this
    venv standing in for the one `make setup` makes."""
    assert "make demo" in COMMANDS
    for name in ("Makefile", "pyproject.toml", "scripts/setup.sh", "examples/prompt.txt", "examples/quickstart.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    shutil.copytree(TINY, tmp_path / "examples" / "tiny-qwen35-mtp")
    venv = BIN.parent
    r = subprocess.run(["make", "-o", str(venv / ".gguf-mtp-installed"), "demo", f"VENV={venv}"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert (tmp_path / "out" / "tiny-qwen35-mtp-BF16.gguf").is_file()
    assert "accepted" in r.stdout + r.stderr


def test_make_test_runs_the_suite() -> None:
    assert "make test" in COMMANDS
    r = subprocess.run(["make", "-n", "-o", ".venv/.gguf-mtp-installed", "test"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and re.search(r"python -m pytest", r.stdout), r.stdout + r.stderr


def _extras() -> set[str]:
    toml = (ROOT / "pyproject.toml").read_text()  # tomllib is 3.11+; the section is one key per line
    section = toml[toml.index("[project.optional-dependencies]"):].split("\n[", 1)[0]
    return set(re.findall(r"^([\w-]+)\s*=", section, re.M))


@pytest.mark.parametrize("cmd", of_kind(PIP))
def test_pip_line_installs_this_folder_with_extras_it_has(cmd: str) -> None:
    argv = shlex.split(cmd)
    assert argv[:2] == ["pip", "install"], argv
    (target,) = [a for a in argv[2:] if not a.startswith("-")]
    name, _, extra = target.partition("[")
    assert name == "." and extra.endswith("]"), target  # gguf-mtp is not on PyPI: this folder
    assert set(extra[:-1].split(",")) <= _extras(), (target, _extras())


# -- serve, curl, Open WebUI ----------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, key: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _serving(cmd: str, d: Path, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """The serve line as written, on a free port (the same option, moved), once it answers /health."""
    port = _free_port()
    line = re.sub(r"--port \d+", f"--port {port}", cmd) if "--port" in cmd else f"{cmd} --port {port}"
    p = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=d, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        try:
            if _get(f"http://127.0.0.1:{port}/health")[0] == 200:
                return p, port
        except OSError:
            pass
        time.sleep(0.2)
    p.kill()
    raise AssertionError(f"{cmd}: not serving after 120 s: {p.communicate()}")


def _stop(p: subprocess.Popen) -> str:
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return err


def test_serve_answers_the_curl_lines(base: Path, hub: dict[str, str], tmp_path: Path) -> None:
    (cmd, _) = of_kind(SERVE)
    assert "--port 8080" in cmd
    # the openai block's requests set no max_tokens: -n (llama-server's default for them) keeps those answers short
    # on the tiny model, which seldom ends one before its 8192-token slot is full; the curl lines set their own
    p, port = _serving(cmd + " -n 48", scratch(base, tmp_path, ()), hub)
    try:
        for curl in of_kind(CURL):
            assert "127.0.0.1:8080/" in curl
            r = shell(curl.replace("127.0.0.1:8080/", f"127.0.0.1:{port}/"), tmp_path, hub, timeout=120)
            assert r.returncode == 0, r.stderr
            if '"stream": true' in curl:
                events = [ln[6:] for ln in r.stdout.splitlines() if ln.startswith("data: ")]
                assert events[-1] == "[DONE]" and json.loads(events[0])["choices"], r.stdout
            else:
                answer = json.loads(r.stdout)
                assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"], answer
        (code,) = [c for k, c in python_blocks().items() if PYTHON[k] == CLIENT]  # the openai client's block
        assert "127.0.0.1:8080/" in code and 'model="Qwen3.5-9B-Q4_K_M"' in code and "Qwen3.5-9B-Q4_K_M.gguf" in cmd
        out = _python(code.replace("127.0.0.1:8080/", f"127.0.0.1:{port}/"), tmp_path, hub)
        assert "predicted_per_second" in out and "completion_tokens" in out, out
    finally:
        err = _stop(p)
    assert "POST /v1/chat/completions 200" in err and "POST /v1/completions 200" in err, err


def test_serve_with_key_and_alias_and_the_open_webui_line(base: Path, hub: dict[str, str], tmp_path: Path) -> None:
    (_, cmd) = of_kind(SERVE)
    argv = shlex.split(cmd)
    key, alias = argv[argv.index("--api-key") + 1], argv[argv.index("--alias") + 1]
    (docker,) = of_kind(DOCKER)  # Open WebUI, told to reach that server: its default port, /v1, the same key
    dargv = shlex.split(docker)
    env = dict(dargv[i + 1].split("=", 1) for i, a in enumerate(dargv) if a == "-e")
    assert env["OPENAI_API_KEY"] == key and "--port" not in argv, (env, argv)
    assert env["OPENAI_API_BASE_URL"] == "http://host.docker.internal:8080/v1" and "0.0.0.0" in argv
    assert "-p" in dargv and dargv[dargv.index("-p") + 1].endswith(":8080")  # the container's own port
    p, port = _serving(cmd, scratch(base, tmp_path, ()), hub)
    try:
        status, body = _get(f"http://127.0.0.1:{port}/v1/models", key)
        assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == [alias], body
        assert _get(f"http://127.0.0.1:{port}/v1/models")[0] == 401
        assert _get(f"http://127.0.0.1:{port}/v1/models", "wrong")[0] == 401
    finally:
        _stop(p)


def test_the_serve_from_python_block_serves_until_sigterm(base: Path, hub: dict[str, str], tmp_path: Path) -> None:
    """docs/python-api.md's serve() block as written (on a free port): it answers with its name and key, and
    SIGTERM ends it with status 0."""
    (code,) = [c for k, c in python_blocks().items() if PYTHON[k] == SERVE_LIB]
    assert '"127.0.0.1", 8080' in code and 'api_key="sekrit"' in code and 'name="qwen"' in code
    port = _free_port()
    p = subprocess.Popen([sys.executable, "-c", code.replace('"127.0.0.1", 8080', f'"127.0.0.1", {port}')],
                         cwd=scratch(base, tmp_path, ()), env=hub, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "not serving after 120 s"
            try:
                if _get(f"http://127.0.0.1:{port}/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert _get(f"http://127.0.0.1:{port}/v1/models")[0] == 401
        code_, body = _get(f"http://127.0.0.1:{port}/v1/models", key="sekrit")
        assert code_ == 200 and json.loads(body)["data"][0]["id"] == "qwen", body
    finally:
        _stop(p)
