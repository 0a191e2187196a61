"""bench/same_call.py: the per-round ratios and intervals the README's same-call tables state, from the JSON lines
the calls wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import same_call

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

REF = Path(__file__).resolve().parents[1] / "bench" / "reference" / "same-call-h200-9b-s32"


def test_session_32s_numbers_come_back() -> None:
    """The README's and the reference's figures (k=2 1.581x, 1.571-1.595x; over llama.cpp's MTP 1.306x; the narrow
    concat +2.4%; k=6 with a perfect head 2.707x, 2.644-2.728x), to the printed rounding."""
    call2 = same_call.read_processes(REF / "ab-call2.jsonl")
    rs = same_call.rounds(call2)
    assert len(rs) == 25 and all("lc" in r for r in rs)

    def show(p: same_call.Paired | None) -> tuple[str, str, str, int]:
        assert p is not None
        return f"{p.median:.3f}", f"{p.low:.3f}", f"{p.high:.3f}", p.above_one

    assert show(same_call.paired(rs, "k2-mmvq", "lc")) == ("1.581", "1.571", "1.595", 25)
    assert show(same_call.paired(rs, "k2-mmvq", "spec2")) == ("1.306", "1.281", "1.355", 7)
    assert show(same_call.paired(rs, "k2-mmvq", "k2-concat")) == ("1.024", "1.013", "1.036", 22)
    call3 = same_call.read_processes(REF / "ab-call3.jsonl")
    rows = {e["row"]: e for e in same_call.summary([call3])}
    assert f"{rows['p-k6']['median']:.2f}" == "590.48" and f"{rows['p-k6']['ratio']:.3f}" == "2.702"
    assert show(rows["p-k6"]["paired"]) == ("2.707", "2.644", "2.728", 25)  # type: ignore[arg-type]
    assert rows["lc"]["paired"] is None


def test_rounds_start_at_the_first_recurring_row(tmp_path: Path) -> None:
    lines = [("spec3", 3.0), ("a", 2.0), ("lc", 1.0), ("b", 4.0), ("a", 2.2), ("lc", 1.1), ("a", 2.4), ("b", 4.4)]
    f = tmp_path / "ab.jsonl"
    f.write_text("".join(json.dumps({"row": r, "tps": t}) + "\n" for r, t in lines)
                 + json.dumps({"row": "b", "tps": None}) + "\n")  # a process that printed no speed: left out
    procs = same_call.read_processes(f)
    assert len(procs) == len(lines)
    assert same_call.rounds(procs) == [{"spec3": 3.0, "a": 2.0, "lc": 1.0, "b": 4.0}, {"a": 2.2, "lc": 1.1},
                                       {"a": 2.4, "b": 4.4}]
    p = same_call.paired(same_call.rounds(procs), "b", "lc")
    assert p is not None and (p.n, p.median) == (1, 4.0)  # the last round has no baseline
    assert same_call.paired(same_call.rounds(procs), "spec3", "b") is not None
    assert same_call.paired(same_call.rounds(procs), "spec3", "nothing") is None


@pytest.mark.parametrize("text,why", [("not json\n", "not a same-call JSON line"),
                                      ('{"tps": 1}\n', "not a same-call JSON line"),
                                      ('{"row": "a", "tps": 1}\n', "no 'lc' process")])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, why: str) -> None:
    f = tmp_path / "ab.jsonl"
    f.write_text(text)
    assert same_call.main([str(f)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and why in err and err.count("\n") == 1


def test_the_answers_token_hashes_are_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rows that recorded run --stats-json's tokens hash ("sha"): one line saying all printed the same tokens, or
    which rows printed which; llama.cpp's rows (no hash) and files without hashes say nothing."""
    rows = [{"row": "lc", "tps": 1.0}, {"row": "k2", "tps": 2.0, "sha": "aa"}, {"row": "plain", "tps": 1.1, "sha": "aa"},
            {"row": "lc", "tps": 1.0}, {"row": "k2", "tps": 2.1, "sha": "aa"}]
    f = tmp_path / "ab.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert same_call.main([str(f)]) == 0
    assert "tokens: the same in every row that recorded them (k2, plain)" in capsys.readouterr().out
    g = tmp_path / "ab2.jsonl"
    g.write_text(json.dumps({"row": "lc", "tps": 1.0}) + "\n" + json.dumps({"row": "auto", "tps": 2, "sha": "bb"}))
    assert same_call.main([str(f), str(g)]) == 0
    assert "tokens: 2 different answers (aa: k2, plain; bb: auto)" in capsys.readouterr().out
    assert same_call.main([str(REF / "ab-call2.jsonl")]) == 0
    assert "tokens:" not in capsys.readouterr().out
