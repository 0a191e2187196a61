"""The docs' examples that can go stale (issue 27): the `inspect` example (docs/tools.md) is what the shipped model
gives, and every `pip install` in README.md and docs/*.md installs something that exists (gguf-mtp is not on PyPI;
extras are pyproject's). tests/test_docs_commands.py runs every other command the docs show."""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .reliability import ROOT, sub

if TYPE_CHECKING:
    from bench.same_call import Paired

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

README = (ROOT / "README.md").read_text()
TOOLS = (ROOT / "docs" / "tools.md").read_text()
ALL_DOCS = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _inspect_block() -> list[str]:
    section = TOOLS[TOOLS.index("\n## Inspect\n"):]
    block = section[section.index("```console\n") + len("```console\n"):]
    return block[:block.index("```")].splitlines()


def test_the_inspect_example_is_what_the_shipped_model_gives(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "tiny-qwen35-mtp", tmp_path / "examples" / "tiny-qwen35-mtp")
    lines = _inspect_block()
    commands = [i for i, ln in enumerate(lines) if ln.startswith("$ ")]
    assert len(commands) == 2 and commands[-1] == 1, lines
    for i in commands:
        argv = shlex.split(lines[i][2:])
        if ">" in argv:  # the shown redirect only hides the output
            argv = argv[:argv.index(">")]
        assert argv[0] == "gguf-mtp", argv
        r = sub(argv[1:], cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    shown = lines[commands[-1] + 1:]
    assert shown[-1] == "..." and len(shown) > 10
    got = r.stdout.splitlines()
    assert [ln.rstrip() for ln in got[:len(shown) - 1]] == [ln.rstrip() for ln in shown[:-1]], r.stdout


def test_every_pip_install_line_installs_what_exists() -> None:
    toml = (ROOT / "pyproject.toml").read_text()  # tomllib is 3.11+; the section is one key per line
    section = toml[toml.index("[project.optional-dependencies]"):].split("\n[", 1)[0]
    extras = set(re.findall(r"^([\w-]+)\s*=", section, re.M))
    assert {"serve", "plot"} <= extras, extras
    found = re.findall(r"pip install ([^`\n#]+)", ALL_DOCS)
    assert len(found) >= 6 and re.search(r"pip install", README), found
    for args in found:
        for target in shlex.split(args):
            if target.startswith("-"):
                continue
            name, _, extra = target.partition("[")
            # not the name on PyPI: a path to this repository (".", "./", a folder), with extras pyproject has
            assert name in (".", "./") or name.startswith(("/", "./", "git+")) or name in {"matplotlib"}, target
            for e in extra.rstrip("]").split(",") if extra else ():
                assert e.strip() in extras, (target, extras)


def _speed_section() -> str:
    return README[README.index("\n## Speed\n") + 1:].split("\n## ", 1)[0]


def _speed_tables() -> tuple[str, list[list[str]]]:
    """README's speed section and its tables, each as its rows (separator rows left out), in order."""
    section = _speed_section()
    return section, [rows for _, rows in _speed_blocks(section)]


def _speed_blocks(section: str) -> list[tuple[str, list[str]]]:
    """Each table of ``section`` with the text between it and the table before it."""
    blocks: list[tuple[str, list[str]]] = []
    prev, text = "", []
    for ln in section.splitlines():
        if ln.startswith("| ") and "---" not in ln:
            if not prev.startswith("|"):
                blocks.append(("\n".join(text), []))
                text = []
            blocks[-1][1].append(ln)
        elif not ln.startswith("|"):
            text.append(ln)
        prev = ln
    return blocks


def _table_of(ref: Path) -> list[str]:
    """The speed table whose lead-in names ``ref`` (a bench/reference folder): tables move as sessions add theirs."""
    name = str(ref.relative_to(ROOT))
    found = [rows for text, rows in _speed_blocks(_speed_section()) if name in text]
    assert len(found) == 1, (name, len(found))
    return found[0]


def _by_row(ref: Path, names: tuple[str, ...]) -> dict[str, list[float]]:
    """Every process's t/s in ``ref``'s JSON-lines files (bench/same_call.py reads them), by row label."""
    from bench.same_call import read_processes

    runs: dict[str, list[float]] = {}
    for name in names:
        for label, tps in read_processes(ref / name):
            runs.setdefault(label, []).append(tps)
    return runs


def _check_rows(body: list[str], names: dict[str, str], runs: dict[str, list[float]], base: float,
                skip: int = 0) -> None:
    """Each row's process count, median t/s and ratio to ``base``, to the printed rounding; ``names`` maps the
    driver cell's start to the row label. ``skip``: leading cells (as the head) left out."""
    import statistics

    assert len(body) == len(names)
    for line in body:
        driver, count, tps, ratio = (c.strip().replace("**", "") for c in line.strip("|").split("|")[skip:])
        key = next(v for k, v in names.items() if driver.startswith(k))
        v = statistics.median(runs[key])
        assert (count, tps, ratio) == (str(len(runs[key])), f"{v:.1f}", f"{v / base:.2f}x"), line


def test_the_speed_section_leads_with_the_release_shapes() -> None:
    """README's first speed table is bench/reference/same-call-h200-s33 (call 2: the 27B shape, call 1: the 35B-A3B
    shape): each cell's median t/s and its per-round ratio to llama-completion (bench/same_call.py), llama.cpp's
    best MTP row the fastest of its k, and `run`'s per-round ratio to that row, to the printed rounding."""
    import re
    import statistics

    from bench.same_call import paired, read_processes, rounds

    ref = ROOT / "bench" / "reference" / "same-call-h200-s33"
    section, _ = _speed_tables()
    assert str(ref.relative_to(ROOT)) in section
    header, *body = _table_of(ref)
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "model", "`llama-completion`", "llama.cpp's MTP, best k", "`gguf-mtp run --no-mtp`",
        "`gguf-mtp run` (k=2, the default)"]
    files = {"27B shape": "ab-call2.jsonl", "35B-A3B shape": "ab-call1.jsonl"}
    assert [ln.strip("|").split("|")[0].strip() for ln in body] == list(files)

    def ratio(cell: str, value: float) -> None:  # the cell's last "N.NNx" before any "; ", to its decimals
        printed = re.findall(r"([0-9.]+)x", cell.split(";")[0])[-1]
        assert printed == f"{value:.{len(printed.split('.')[1])}f}", (cell, value)

    for line in body:
        model, *cells = (c.strip().replace("**", "") for c in line.strip("|").split("|"))
        procs = read_processes(ref / files[model])
        runs = _by_row(ref, (files[model],))
        rs = rounds(procs)
        spec = max((k for k in runs if k.startswith("spec")), key=lambda k: statistics.median(runs[k]))
        for cell, label in zip(cells, ["lc", spec, "plain", "k2"], strict=True):
            assert cell.split(" ")[0] == f"{statistics.median(runs[label]):.2f}", (model, cell)
            if label == "lc":
                assert cell.endswith("(1.00x)")
                continue
            p = paired(rs, label, "lc")
            assert p is not None
            ratio(cell, p.median)
        assert f"k={spec[len('spec'):]}," in cells[1]
        over = paired(rs, "k2", spec)
        assert over is not None and f"; {over.median:.2f}x llama.cpp's MTP" in cells[3], (cells[3], over)


def _check_machine_table(ref: Path, rows: dict[str, str], files: dict[str, tuple[str, ...]],
                         rename: Callable[[str, str], str] = lambda machine, label: label) -> list[tuple[str, str]]:
    """A "machine | row | processes | t/s | x llama-completion, per round" table of ``ref``: each row's process
    count, median t/s and per-round ratio to llama-completion (bench/same_call.py), to the printed rounding, every
    machine's rows (``files``: its JSON-lines files) against the llama-completion of its own calls; gguf-mtp's rows
    above it in every round. ``rows`` maps the row cell to its label (``rename(machine, label)`` where a machine's
    label differs). Returns the (machine, label) of every row."""
    import statistics

    from bench.same_call import paired, read_processes, rounds

    header, *body = _table_of(ref)
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "machine", "row", "processes", "t/s", "x llama-completion, per round"]
    machine, seen = "", []
    for line in body:
        cells = [c.strip() for c in line.strip("|").split("|")]
        machine = cells[0] or machine
        label = rename(machine, rows[cells[1]])
        seen.append((machine, label))
        runs = _by_row(ref, files[machine])
        rs = [r for name in files[machine] for r in rounds(read_processes(ref / name))]
        assert cells[2] == str(len(runs[label])) and cells[3] == f"{statistics.median(runs[label]):.2f}", cells
        cell = cells[4].strip("*")
        if label == "lc":
            assert cell == "1.00x", cells
            continue
        p = paired(rs, label, "lc")
        assert p is not None and cell == f"{p.median:.3f}x", (machine, cells, p)
        assert p.above_one == p.n or label == "spec2"  # gguf-mtp above llama-completion in every round
    return seen


def _ab(ref: Path, names: tuple[str, ...], a: str, b: str) -> Paired:
    """Row ``a`` over row ``b`` per round in ``ref``'s files ``names`` (bench/same_call.py's Paired)."""
    from bench.same_call import paired, read_processes, rounds

    p = paired([r for n in names for r in rounds(read_processes(ref / n))], a, b)
    assert p is not None, (a, b, names)
    return p


def test_the_session_42_table() -> None:
    """README's session 42 table is bench/reference/same-call-h200-s42 (machines T, U, V: calls 1-3), and the ratios
    over llama.cpp's tools with patch 0019's switch on, 0019's A/B at k=4 and the drafts' times the text below it
    quotes."""
    import json

    from bench.same_call import token_hashes

    ref = ROOT / "bench" / "reference" / "same-call-h200-s42"
    rows = {"`llama-completion`": "lc", "`llama-completion`, patch 0019's switch on": "lc-a",
            "llama.cpp's MTP, k=2, patch 0019's switch on": "spec2-a", "`gguf-mtp run` (k=2)": "k2",
            "`gguf-mtp run` (k=4)": "k4", "`gguf-mtp run` (k=4), patch 0019 switched off": "k4-n",
            "`gguf-mtp run` (k=2), head at Q4_0 (`hq4b`)": "k2-hq4b"}
    files = {"T, 2 rounds": ("ab-call1.jsonl",), "U, 3 rounds": ("ab-call2.jsonl",), "V, 7 rounds": ("ab-call3.jsonl",)}
    seen = _check_machine_table(ref, rows, files)
    assert len(seen) == 17 and ("T, 2 rounds", "k4-n") in seen and ("V, 7 rounds", "k2-hq4b") in seen
    text = " ".join(_speed_section().split("**Session 42**", 1)[1].split("**Session 41**", 1)[0].split())
    quotes = [(("ab-call1.jsonl",), "k2", "lc-a", "`run` k=2 ran {:.3f}x llama-completion on T ({} of {})"),
              (("ab-call2.jsonl",), "k2", "lc-a", "{:.3f}x on U ({} of {})"),
              (("ab-call3.jsonl",), "k2", "lc-a", "and {:.3f}x on V ({} of {})"),
              (("ab-call1.jsonl",), "k2", "spec2-a", "and {:.3f}x,"),
              (("ab-call2.jsonl",), "k2", "spec2-a", "{:.3f}x and"),
              (("ab-call3.jsonl",), "k2", "spec2-a", "{:.3f}x llama.cpp's MTP k=2"),
              (("ab-call2.jsonl",), "k2-hq4b", "lc-a", "{:.3f}x (U, {} of {})"),
              (("ab-call3.jsonl",), "k2-hq4b", "lc-a", "{:.3f}x (V, {} of {}) llama-completion"),
              (("ab-call1.jsonl",), "k4", "k4-n", "`run` k=4 {:.3f}x ({} of {}) over its switch off")]
    for names, a, b, says in quotes:
        p = _ab(ref, names, a, b)
        assert says.format(p.median, p.above_one, p.n) in text, (a, b, says.format(p.median, p.above_one, p.n))
    perf = {(name, json.loads(ln)["row"]): json.loads(ln)["draft_ms"]
            for name in ("perf-call1.jsonl", "perf-call2.jsonl", "perf-call3.jsonl")
            for ln in (ref / name).read_text().splitlines()}
    for (name, row), says in {("perf-call1.jsonl", "perf-ship"): "{} / {} ms (T)",
                              ("perf-call3.jsonl", "perf-ship-1"): "{} / {} ms (V) for the first / second draft",
                              ("perf-call2.jsonl", "perf-hq4b"): "{} / {} ms (U)",
                              ("perf-call3.jsonl", "perf-hq4b-1"): "and {} / {} ms (V) with the head at Q4_0"}.items():
        first, second = perf[name, row]
        assert says.format(f"{first:.3f}", f"{second:.3f}") in text, (name, row, first, second)
    for names in files.values():  # every process of a machine: the same tokens
        assert len(token_hashes([ref / n for n in names])) == 1, names


def test_the_session_41_table() -> None:
    """README's session 41 table is bench/reference/same-call-h200-s41 (machines Q, R, S: calls 1, 3, 4), and the
    A/Bs of patch 0019 and of the self-fed drafts, and the ratios over llama.cpp's tools, the text below it quotes."""
    from bench.same_call import token_hashes

    ref = ROOT / "bench" / "reference" / "same-call-h200-s41"
    rows = {"`llama-completion`": "lc", "llama.cpp's MTP, k=2": "spec2", "`gguf-mtp run` (k=2)": "k2",
            "`gguf-mtp run` (k=2), before patch 0019": "k2",
            "`gguf-mtp run` (k=2), drafts self-fed (proposed 0018)": "k2-sf",
            "`llama-completion`, patch 0019's switch on": "lc-a",
            "llama.cpp's MTP, k=2, patch 0019's switch on": "spec2-a",
            "`gguf-mtp run` (k=2), patch 0019 switched off": "k2-n"}
    files = {"Q, 8 rounds": ("ab-call1.jsonl",), "R, 7 rounds": ("ab-call3.jsonl",), "S, 2 rounds": ("ab-call4.jsonl",)}
    seen = _check_machine_table(ref, rows, files,
                                rename=lambda m, label: "lc-w" if (m, label) == ("R, 7 rounds", "lc-a") else label)
    assert len(seen) == 15 and ("R, 7 rounds", "lc-w") in seen and ("S, 2 rounds", "spec2-a") in seen
    text = " ".join(_speed_section().split("**Session 41**", 1)[1].split("**Session 40**", 1)[0].split())
    quotes = [(("ab-call3.jsonl",), "k2", "k2-n", "ran `run` k=2 {:.3f}x per round over its switch off ({} of {}"),
              (("ab-call1.jsonl",), "k2", "spec2", "was {:.3f}x on Q"),
              (("ab-call3.jsonl",), "k2", "spec2", "{:.3f}x on R"),
              (("ab-call4.jsonl",), "k2", "spec2", "and {:.3f}x on S."),
              (("ab-call3.jsonl",), "lc-w", "lc", "llama-completion ran {:.3f}x (R)"),
              (("ab-call4.jsonl",), "lc-a", "lc", "and {:.3f}x (S)"),
              (("ab-call4.jsonl",), "spec2-a", "spec2", "llama.cpp's MTP {:.3f}x (S)"),
              (("ab-call3.jsonl",), "k2", "lc-w", "`run` k=2 {:.3f}x llama-completion on R ({} of {})"),
              (("ab-call4.jsonl",), "k2", "lc-a", "{:.3f}x on S, and"),
              (("ab-call4.jsonl",), "k2", "spec2-a", "{:.3f}x llama.cpp's MTP on S ({} of {})"),
              (("ab-call1.jsonl",), "k2-sf", "k2", "ran {:.3f}x on Q ({} of {})"),
              (("ab-call3.jsonl",), "k2-sf", "k2", "and {:.3f}x on R ({} of {})")]
    for names, a, b, says in quotes:
        p = _ab(ref, names, a, b)
        assert says.format(p.median, p.above_one, p.n) in text, (a, b, says.format(p.median, p.above_one, p.n))
    for names in files.values():  # every process of a machine: the same tokens
        assert len(token_hashes([ref / n for n in names])) == 1, names


def test_the_session_40_table() -> None:
    """README's session 40 table is bench/reference/same-call-h200-s40 (machines N, O, P: calls 1, 2, 3), and the
    ratios over llama.cpp's MTP and the A/B of patch 0008's wait after the launch the text below it quotes."""
    from bench.same_call import token_hashes

    ref = ROOT / "bench" / "reference" / "same-call-h200-s40"
    rows = {"`llama-completion`": "lc", "llama.cpp's MTP, k=2": "spec2", "`gguf-mtp run` (k=2)": "k2",
            "`gguf-mtp run` (k=2), copies waited for before the launch": "k2",
            "`gguf-mtp run` (k=2), after the launch": "k2-a2"}
    files = {"N, 3 rounds": ("ab-call1.jsonl",), "O, 16 rounds": ("ab-call2.jsonl",),
             "P, 7 rounds": ("ab-call3.jsonl",)}
    seen = _check_machine_table(ref, rows, files)
    assert len(seen) == 10 and ("P, 7 rounds", "k2-a2") in seen
    text = _speed_section().split("**Session 40**", 1)[1].split("**Session 39**", 1)[0]
    for machine, says in (("N, 3 rounds", "x on N"), ("O, 16 rounds", "x on O (16 of 16 rounds)"),
                          ("P, 7 rounds", "x on P")):
        assert f"{_ab(ref, files[machine], 'k2', 'spec2').median:.3f}{says}" in text, machine
    p = _ab(ref, tuple(f for names in files.values() for f in names), "k2", "spec2")
    assert p.n == 26 and p.above_one == 26 and f"{p.median:.3f}x over\nall 26 rounds, every one above 1" in text
    a2 = _ab(ref, files["P, 7 rounds"], "k2-a2", "k2")
    assert f"ran {a2.median:.3f}x per round ({a2.above_one} of {a2.n}\nrounds)" in text
    for names in files.values():  # every process of a machine: the same tokens
        assert len(token_hashes([ref / n for n in names])) == 1, names


def test_the_session_39_table() -> None:
    """README's session 39 table is bench/reference/same-call-h200-s39 (machines K, L, M: calls 1, 2, 3), and the
    A/Bs, the ranges over sessions 38 and 39 and the GPU work the text below it quotes."""
    from bench.same_call import token_hashes

    ref = ROOT / "bench" / "reference" / "same-call-h200-s39"
    rows = {"`llama-completion`": "lc", "llama.cpp's MTP, k=2": "spec2", "`gguf-mtp run` (k=2)": "k2",
            "`gguf-mtp run` (k=2), patch 0017 switched off": "k2-i0"}
    files = {"K, 22 rounds": ("ab-call1.jsonl",), "L, 17 rounds": ("ab-call2.jsonl",),
             "M, 8 rounds": ("ab-call3.jsonl",)}
    seen = _check_machine_table(ref, rows, files)
    assert len(seen) == 10 and ("M, 8 rounds", "k2-i0") in seen
    text = _speed_section().split("**Session 39**", 1)[1].split("**Session 38**", 1)[0]
    every = tuple(f for names in files.values() for f in names)
    assert f"{_ab(ref, files['K, 22 rounds'], 'k2', 'spec2').median:.3f}x on machine K (22 rounds)" in text
    assert f"{_ab(ref, files['L, 17 rounds'], 'k2', 'spec2').median:.3f}x on L (17 rounds)" in text
    assert f"{_ab(ref, files['M, 8 rounds'], 'k2', 'spec2').median:.3f}x on M\n(8 rounds" in text
    p = _ab(ref, every, "k2", "spec2")
    assert p.n == 47 and f"{p.median:.3f}x over all 47 rounds" in text
    ids = _ab(ref, files["M, 8 rounds"], "k2", "k2-i0")
    assert f"ran {ids.median:.3f}x per round ({ids.above_one} of {ids.n} rounds)" in text
    # the 9B-shape machines of sessions 38 (H, I) and 39 (K, L, M): run's and llama.cpp's MTP's range over lc
    s38 = ROOT / "bench" / "reference" / "same-call-h200-s38"
    per = [(s38, ("ab-call1.jsonl",)), (s38, ("ab-call2.jsonl",)), *((ref, f) for f in files.values())]
    run = [_ab(r, f, "k2", "lc").median for r, f in per]
    mtp = [_ab(r, f, "spec2", "lc").median for r, f in per]
    assert f"{min(run):.3f}-{max(run):.3f}x of llama-completion on the five 9B-shape machines" in text
    assert f"between\n{min(mtp):.2f}x and {max(mtp):.2f}x" in text
    timelines = {sw: (ref / f"timeline-call3-k2-ids{sw}.txt").read_text() for sw in (0, 1)}
    for sw, (draft, verify) in {0: ("263.9", "5158"), 1: ("242.4", "5096")}.items():
        lines = timelines[sw].splitlines()
        assert any(x.startswith("decode[mtp] n=3 ") and x.split()[4] == draft for x in lines), sw
        assert any(x.startswith("decode[tgt] n=3 ") and x.split()[4].startswith(verify) for x in lines), sw
    assert "993280 B" in timelines[0] and "993280 B" not in timelines[1]  # the logits rows' copies, gone
    assert "263.9 -> 242.4 us, the verify's 5158 ->\n5096 us" in text
    for names in files.values():  # every process of a machine: the same tokens
        assert len(token_hashes([ref / n for n in names])) == 1, names


def test_the_session_38_table() -> None:
    """README's session 38 table is bench/reference/same-call-h200-s38 (machines H, I, J: calls 1, 2, 3), and the
    A/Bs and the step counts the text below it quotes."""
    import json
    import statistics

    from bench.same_call import read_processes, rounds, token_hashes

    ref = ROOT / "bench" / "reference" / "same-call-h200-s38"
    rows = {"`llama-completion`": "lc", "llama.cpp's MTP, k=2": "spec2", "`gguf-mtp run` (k=2)": "k2",
            "`gguf-mtp run --spec-draft-n-max auto`": "auto",
            "`gguf-mtp run` (k=2), patch 0015 switched off": "k2-r0",
            "`gguf-mtp run` (k=2), the head's block and draft LM head re-encoded at Q4_0": "k2-h44"}
    files = {"H, 13 rounds": ("ab-call1.jsonl",), "I, 8 rounds": ("ab-call2.jsonl",),
             "J (35B-A3B shape), 12 rounds": ("ab-call3.jsonl",)}
    seen = _check_machine_table(ref, rows, files)
    assert len(seen) == 14 and ("J (35B-A3B shape), 12 rounds", "k2-r0") in seen
    text = _speed_section().split("**Session 38**", 1)[1].split("**Session 37**", 1)[0]
    dense = files["H, 13 rounds"] + files["I, 8 rounds"]
    assert f"{_ab(ref, files['H, 13 rounds'], 'k2', 'spec2').median:.3f}x on machine H (13 rounds)" in text
    assert f"{_ab(ref, files['I, 8 rounds'], 'k2', 'spec2').median:.3f}x on I (8 rounds)" in text
    p = _ab(ref, dense, "k2", "spec2")
    worst = min(r["k2"] / r["spec2"] for n in dense for r in rounds(read_processes(ref / n)) if "spec2" in r)
    assert p.n == 21 and f"{p.median:.3f}x over the\n21 rounds of the 9B shape (every one above 1.25x)" in text
    assert worst > 1.25
    assert f"{_ab(ref, files['J (35B-A3B shape), 12 rounds'], 'k2', 'spec2').median:.3f}x on the 35B-A3B shape" in text
    moe, dense_r = _ab(ref, files["J (35B-A3B shape), 12 rounds"], "k2", "k2-r0"), _ab(ref, files["I, 8 rounds"], "k2",
                                                                                      "k2-r0")
    assert f"{100 * (moe.median - 1):.1f}% per\nround ({moe.above_one} of {moe.n} rounds" in text
    assert f"level on the dense one ({100 * (dense_r.median - 1):.1f}%, {dense_r.above_one} of {dense_r.n})" in text
    steps = {(r["row"], r["steps"]) for n in dense for r in map(json.loads, (ref / n).read_text().splitlines())
             if r["row"] in ("k2", "k2-h44")}
    assert steps == {("k2", 117), ("k2-h44", 109)} and "accepted in 109 steps against 117" in text

    def step(name: str) -> float:  # steps a second, the re-encoded head's over k=2's, median against median
        runs = _by_row(ref, (name,))
        return (statistics.median(runs["k2-h44"]) * 109) / (statistics.median(runs["k2"]) * 117)

    assert f"{step('ab-call1.jsonl'):.3f}x as fast as k=2's on H and\n{step('ab-call2.jsonl'):.3f}x on I" in text
    for n in (*dense, *files["J (35B-A3B shape), 12 rounds"]):  # every process of a machine: the same tokens
        assert len(token_hashes([ref / n])) == 1, n


def test_the_session_37_table() -> None:
    """README's session 37 table is bench/reference/same-call-h200-s37 (machines E, F, G: calls 1, 2, 3), and the
    A/Bs the text below it quotes."""
    ref = ROOT / "bench" / "reference" / "same-call-h200-s37"
    rows = {"`llama-completion`": "lc", "llama.cpp's MTP, k=2": "spec2", "`gguf-mtp run` (k=2)": "k2",
            "`gguf-mtp run` (k=2), patch 0014 switched off": "k2-s0"}
    files = {"E, 10 rounds": ("ab-call1.jsonl",), "F, 8 rounds": ("ab-call2.jsonl",),
             "G, 7 rounds": ("ab-call3.jsonl",)}
    seen = _check_machine_table(ref, rows, files)
    assert len(seen) == 11 and ("G, 7 rounds", "k2-s0") in seen
    text = _speed_section().split("**Session 37**", 1)[1].split("**Session 36**", 1)[0]
    every = tuple(f for names in files.values() for f in names)
    assert f"{_ab(ref, files['E, 10 rounds'], 'k2', 'spec2').median:.3f}x on machine E" in text
    assert f"{_ab(ref, files['F, 8 rounds'], 'k2', 'spec2').median:.3f}x on F" in text
    assert f"{_ab(ref, every, 'k2', 'spec2').median:.3f}x over all 7" in text
    p = _ab(ref, every, "k2", "k2-s0")
    assert f"{100 * (p.median - 1):.1f}% per round ({p.above_one} of {p.n}" in text


def test_the_session_36_table() -> None:
    """README's session 36 table is bench/reference/same-call-h200-s36 (machine C: calls 1 and 2, machine D: call
    3), and the A/Bs the text below it quotes."""
    ref = ROOT / "bench" / "reference" / "same-call-h200-s36"
    rows = {"`llama-completion`": "lc", "llama.cpp's MTP, k=2": "spec2", "`gguf-mtp run` (k=2)": "k2",
            "`gguf-mtp run --spec-draft-n-max auto`": "auto",
            "`gguf-mtp run --spec-draft-n-max auto`, every conv snapshot written (as before patch 0007)": "auto-all"}
    files = {"C, 23 rounds": ("ab-call1.jsonl", "ab-call2.jsonl"), "D, 12 rounds": ("ab-call3.jsonl",)}
    seen = _check_machine_table(ref, rows, files)
    assert len(seen) == 8 and ("D, 12 rounds", "auto-all") in seen
    text = _speed_section().split("**Session 36**", 1)[1].split("**Session 35**", 1)[0]

    def ab(names: tuple[str, ...], a: str, b: str) -> float:
        return _ab(ref, names, a, b).median

    assert f"{ab(files['C, 23 rounds'], 'k2', 'spec2'):.3f}x on machine C" in text
    assert f"{ab(files['D, 12 rounds'], 'k2', 'spec2'):.3f}x on D" in text
    assert f"gained {100 * (ab(files['D, 12 rounds'], 'auto', 'auto-all') - 1):.1f}% per round" in text
    assert f"level on machine C ({ab(files['C, 23 rounds'], 'k2-cf', 'k2'):.3f}x of the shipped path" in text
    assert f"cost auto {100 * (1 - ab(files['C, 23 rounds'], 'auto-cf', 'auto')):.0f}%" in text


def test_the_session_35_table() -> None:
    """README's session 35 table is bench/reference/same-call-h200-s35 (machine A: calls 1 and 2, machine B: call
    3)."""
    ref = ROOT / "bench" / "reference" / "same-call-h200-s35"
    rows = {"`llama-completion`": "lc", "`gguf-mtp run` (k=2)": "k2-fp0",
            "`gguf-mtp run`, drafts chained in one decode (proposed patches 0004 and 0009)": "k2-chain",
            "llama.cpp's MTP, k=2": "spec2", "`gguf-mtp run --mtp HEAD-Q4_0.gguf` (MTP block Q4_0)": "k2-h4"}
    files = {"A, 31 rounds": ("ab-call1.jsonl", "ab-call2.jsonl"), "B, 13 rounds": ("ab-call3.jsonl",)}
    # machine B's shipped build: its k=2 row has no proposed patch to switch off
    seen = _check_machine_table(ref, rows, files,
                                lambda machine, label: "k2" if machine.startswith("B") and label == "k2-fp0" else label)
    assert len(seen) == 7 and ("B, 13 rounds", "spec2") in seen


def test_the_session_34_table() -> None:
    """README's session 34 table is bench/reference/same-call-h200-s34 (call 3: the 9B shape, call 2: the 35B-A3B
    shape): each row's median t/s, its per-round ratio to llama-completion and to `run` k=2 (bench/same_call.py),
    to the printed rounding; every model's rows in its own call."""
    import statistics

    from bench.same_call import paired, read_processes, rounds

    ref = ROOT / "bench" / "reference" / "same-call-h200-s34"
    section, _ = _speed_tables()
    assert str(ref.relative_to(ROOT)) in section
    header, *body = _table_of(ref)
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "model", "row", "t/s", "x llama-completion, per round", "over `run` k=2, per round"]
    rows = {"`llama-completion`": "lc", "`gguf-mtp run` (k=2)": "k2",
            "`gguf-mtp run --spec-draft-n-max auto`": "auto",
            "`gguf-mtp run --mtp HEAD-Q4_0.gguf` (MTP block Q4_0)": "k2-h4",
            "`gguf-mtp run --mtp HEAD-Q4_0.gguf` (block and draft LM head Q4_0)": "k2-h44"}
    files = {"9B shape, ~70% head": "ab-call3.jsonl", "35B-A3B shape": "ab-call2.jsonl"}
    model, seen = "", []
    for line in body:
        cells = [c.strip() for c in line.strip("|").split("|")]
        model = cells[0] or model
        label = rows[cells[1]]
        seen.append((model, label))
        runs = _by_row(ref, (files[model],))
        rs = rounds(read_processes(ref / files[model]))
        assert cells[2] == f"{statistics.median(runs[label]):.2f}", (model, cells)
        for cell, base in ((cells[3], "lc"), (cells[4], "k2")):
            if label == base or (base == "k2" and label == "lc"):
                assert cell in ("1.00x", ""), (model, cells)
                continue
            p = paired(rs, label, base)
            assert p is not None and cell == f"{p.median:.{len(cell.split('.')[1]) - 1}f}x", (model, cells, p)
    assert [m for m, _ in seen].count("35B-A3B shape") == 4 and ("9B shape, ~70% head", "k2-h4") in seen


def test_the_session_32_table() -> None:
    """README's session 32 table is bench/reference/same-call-h200-9b-s32 (call 2: the ~70% head, call 3: a head
    always right; one process a row), each head's rows against the llama-completion of its own call."""
    import statistics

    ref = ROOT / "bench" / "reference" / "same-call-h200-9b-s32"
    section, _ = _speed_tables()
    assert str(ref.relative_to(ROOT)) in section
    header, *body = _table_of(ref)
    assert [c.strip() for c in header.strip("|").split("|")] == ["head", "driver", "processes", "t/s",
                                                                  "x llama-completion"]
    calls = {"~70%": ("ab-call2.jsonl", {"`llama-completion`": "lc", "llama.cpp's MTP, k=2": "spec2",
                                         "`gguf-mtp run` (k=2, the default)": "k2-mmvq"}),
             "always right": ("ab-call3.jsonl", {"`llama-completion`": "lc", "llama.cpp's MTP, k=3": "spec3",
                                                 "llama.cpp's MTP, k=4": "spec4",
                                                 "`gguf-mtp run --spec-draft-n-max 3`": "p-k3",
                                                 "`gguf-mtp run --spec-draft-n-max 4`": "p-k4",
                                                 "`gguf-mtp run --spec-draft-n-max 6`": "p-k6"})}
    heads = [line.strip("|").split("|")[0].strip() for line in body]
    assert sorted(set(heads)) == sorted(calls)
    for head, (name, names) in calls.items():
        runs = _by_row(ref, (name,))
        _check_rows([ln for ln, h in zip(body, heads, strict=True) if h == head], names, runs,
                    statistics.median(runs["lc"]), skip=1)


def test_the_previous_same_call_table() -> None:
    """README's session 31 table is bench/reference/same-call-h200-9b-s31 (calls 2 and 3): the plain and auto
    rows the newer calls did not repeat."""
    import statistics

    ref = ROOT / "bench" / "reference" / "same-call-h200-9b-s31"
    section, _ = _speed_tables()
    assert str(ref.relative_to(ROOT)) in section
    runs = _by_row(ref, ("ab-call2.jsonl", "ab-call3.jsonl"))
    header, *body = _table_of(ref)
    assert [c.strip() for c in header.strip("|").split("|")] == ["driver", "processes", "t/s", "x llama-completion"]
    names = {"`llama-completion`": "lc", "llama.cpp's MTP, k=2": "spec2", "`gguf-mtp run --no-mtp`": "plain",
             "`gguf-mtp run` (k=2, the default)": "k2", "`gguf-mtp run --spec-draft-n-max 3`": "k3",
             "`gguf-mtp run --spec-draft-n-max auto`": "auto"}
    _check_rows(body, names, runs, statistics.median(runs["lc"]))


def test_the_release_table_is_the_one_shot_reference() -> None:
    """README's release table (issue 24 item 6) is bench/reference/oneshot-h200-{9b,35b-a3b}-shipped/oneshot.txt:
    every tokens/s and ratio to llama-completion, llama.cpp's MTP rows beside ours, to the printed rounding."""
    refs = [ROOT / "bench" / "reference" / f"oneshot-h200-{shape}-shipped" / "oneshot.txt"
            for shape in ("9b", "35b-a3b")]
    section, tables = _speed_tables()
    header, *body = next(t for t in tables if "| plain |" in t[0])
    assert [c.strip() for c in header.strip("|").split("|")][2:] == ["plain", "k=1", "k=2", "k=3", "k=4", "auto"]
    lcpp = ["llama-completion", *(f"llama-speculative-simple k={k}" for k in range(1, 5)), None]
    ours = ["run --no-mtp", *(f"run k={k}" for k in range(1, 5)), "run auto"]
    assert len(body) == 2 * len(refs)
    for i, ref in enumerate(refs):
        assert str(ref.parent.relative_to(ROOT)) in section
        rows: dict[str, float] = {}
        for line in ref.read_text().splitlines():
            m = re.match(r"(?:\S.*?draft vocab 32768)\s{2,}(\S.*?)\s{2,}([\d.]+)\s", line)
            if m:
                rows[m[1]] = float(m[2])
        base = rows["llama-completion"]
        for line, names in zip(body[2 * i: 2 * i + 2], (lcpp, ours), strict=True):
            cells = [c.strip() for c in line.strip("|").split("|")][2:]
            for cell, name in zip(cells, names, strict=True):
                if name is None:
                    assert cell == "", line
                    continue
                v = rows[name]
                assert cell == f"{v:.1f} ({v / base:.2f}x)", (line, name, cell)


def _anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_pages_resolves() -> None:
    """Relative links in README.md, docs/ (the upstream write-ups too) and the patch set's README name files that
    exist, and #anchors headings of the page."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "patches/llama.cpp/README.md"]
    checked = 0
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), (page.name, target)
            if anchor:
                headings = re.findall(r"^#+ (.+)$", dest.read_text(), re.M)
                assert anchor in {_anchor(h) for h in headings}, (page.name, target)
            checked += 1
    assert checked >= 30, checked
