"""--spec-draft-profile / --spec-draft-profile-out (runtime/draft_profile.py) with the real llama.cpp: what auto
measured in one run is saved, and a later run on the same model starts from it instead of exploring; a profile
for another model is not used; a file that is not a profile is refused with one line; inputs are never
overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf_mtp_cli.main import main

from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime import draft_profile
from gguf_mtp.runtime.config import AUTO_DRAFT_MAX

from .test_runtime import LONG, check_cli_completion, pairings, run_cli  # noqa: F401 - pairings is a fixture

ARGS = ["-p", LONG, "-n", "40", "--spec-draft-n-max", "auto", "-c", "512", "-t", "1"]


def _run(model: Path, *extra: str) -> int:
    return main(["run", str(model), *ARGS, *extra])


def _lengths(stats: dict) -> set[int]:
    """Draft lengths a run gave its steps (0: plain steps)."""
    return {int(k) for k in stats["draft_lengths"]} | ({0} if stats["plain_steps"] else set())


def test_a_profile_is_saved_and_a_later_run_starts_from_it(pairings, tmp_path: Path, capsys) -> None:  # noqa: F811
    model, _ = pairings["qwen35"]["bundled"]
    prof, s1, s2 = tmp_path / "p.json", tmp_path / "s1.json", tmp_path / "s2.json"
    rc, made = run_cli(["run", str(model), *ARGS, "--spec-draft-profile-out", str(prof), "--stats-json", str(s1)])
    assert rc == 0
    out, _ = capsys.readouterr()
    check_cli_completion(model, out, made, 40, "run auto --spec-draft-profile-out")
    p = json.loads(prof.read_text())
    assert p["format"] == draft_profile.FORMAT and p["key"]["model"] == model.name and p["key"]["n_draft_max"] == AUTO_DRAFT_MAX
    assert len(p["step_ms"]) >= 3 and all(t > 0 for t in p["step_ms"].values())  # k_max, 1 and 0 explored at least
    assert len(p["acceptance_at"]) == len(p["drafted_at"]) == AUTO_DRAFT_MAX
    cold = json.loads(s1.read_text())
    assert len(_lengths(cold)) >= 3  # the first answer explores

    rc, made = run_cli(["run", str(model), *ARGS, "--spec-draft-profile", str(prof), "--stats-json", str(s2)])
    assert rc == 0
    out, err = capsys.readouterr()
    check_cli_completion(model, out, made, 40, "run auto --spec-draft-profile")  # lossless as ever
    assert f"auto: starting from the draft profile {prof}" in err
    warm = json.loads(s2.read_text())
    # no exploration: the length the profile makes best (shadow drafts are not counted), or that and a neighbour
    # when the run's own times move the choice (a 2-core CI machine under load)
    assert len(_lengths(warm)) <= 2 < len(_lengths(cold)), (warm["draft_lengths"], cold["draft_lengths"])



def test_auto_n_bounds_the_lengths_auto_may_choose(pairings, tmp_path: Path, capsys) -> None:  # noqa: F811
    """``auto:N`` explores and may choose lengths up to N (8 here, above auto's bound), still lossless; the profile
    it saves is keyed by that bound."""
    assert AUTO_DRAFT_MAX < 8
    model, _ = pairings["qwen35"]["bundled"]
    prof, st = tmp_path / "p.json", tmp_path / "s.json"
    args = [a if a != "auto" else "auto:8" for a in ARGS]
    rc, made = run_cli(["run", str(model), *args, "--spec-draft-profile-out", str(prof), "--stats-json", str(st)])
    assert rc == 0
    out, _ = capsys.readouterr()
    check_cli_completion(model, out, made, 40, "run auto:8")
    p = json.loads(prof.read_text())
    assert p["key"]["n_draft_max"] == 8 and len(p["acceptance_at"]) == len(p["drafted_at"]) == 8
    assert {int(k) for k in p["step_ms"]} >= {8, 1, 0}  # an opening block at the bound, then 1 and 0 at least
    assert max(_lengths(json.loads(st.read_text()))) <= 8

def test_a_profile_for_another_model_is_not_used(pairings, tmp_path: Path, capsys) -> None:  # noqa: F811
    model, _ = pairings["qwen35"]["bundled"]
    prof, other, s = tmp_path / "p.json", tmp_path / "other.json", tmp_path / "s.json"
    assert _run(model, "--spec-draft-profile-out", str(prof)) == 0
    p = json.loads(prof.read_text())
    p["key"]["model_bytes"] += 1
    p["key"]["devices"] = ["CUDA0: NVIDIA H100 80GB HBM3", "CPU"]
    other.write_text(json.dumps(p))
    capsys.readouterr()
    assert _run(model, "--spec-draft-profile", str(other), "--stats-json", str(s)) == 0
    err = capsys.readouterr().err
    assert "was measured for another devices, model_bytes" in err and "not used" in err
    assert len(_lengths(json.loads(s.read_text()))) >= 3  # explored as without a profile


BAD = {
    "not JSON": b"{step_ms: 1",
    "not an object": b"[1, 2]",
    "no format": json.dumps({"version": 1}).encode(),
    "another version": json.dumps({"format": draft_profile.FORMAT, "version": 2}).encode(),
    "a length that is not one": None,  # filled in below from a real profile
    "a negative time": None,
    "an infinite time": None,
    "a time that is a bool": None,
    "an acceptance above 1": None,
    "counts that do not match": None,
    "a 5000-digit length": None,  # int() of it raised: an internal error (issue 23)
    "a 4000-digit count": None,
    "too large": b" " * (draft_profile.MAX_BYTES + 1) + b"{}",
}


def _mutate(base: dict, case: str) -> bytes:
    d = json.loads(json.dumps(base))
    if case == "a length that is not one":
        d["step_ms"]["x"] = 1.0
    elif case == "a negative time":
        d["step_ms"]["1"] = -3.0
    elif case == "an infinite time":
        return json.dumps(d).replace('"0": ', '"0": 1e999, "9": ', 1).encode()
    elif case == "a time that is a bool":
        d["step_ms"]["1"] = True
    elif case == "an acceptance above 1":
        d["acceptance_at"][0] = 1.5
    elif case == "counts that do not match":
        d["drafted_at"] = d["drafted_at"][:-1]
    elif case == "a 5000-digit length":
        d["step_ms"]["0" * 5000] = 1.0
    elif case == "a 4000-digit count":
        d["drafted_at"][0] = int("9" * 4000)
    return json.dumps(d).encode()


@pytest.mark.parametrize("case", list(BAD))
def test_a_file_that_is_not_a_profile_is_refused_with_one_line(pairings, tmp_path: Path, capsys,  # noqa: F811
                                                                case: str) -> None:
    model, _ = pairings["qwen35"]["bundled"]
    base = {"format": draft_profile.FORMAT, "version": 1, "key": {}, "step_ms": {"0": 2.0, "1": 3.0},
            "acceptance_at": [0.7], "drafted_at": [10]}
    bad = tmp_path / "bad.json"
    bad.write_bytes(BAD[case] if BAD[case] is not None else _mutate(base, case))
    before = bad.read_bytes()
    with pytest.raises(GgufMtpError) as e:
        draft_profile.read(bad)
    assert str(bad) in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 300
    assert _run(model, "--spec-draft-profile", str(bad)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and str(bad) in err[-1]
    assert bad.read_bytes() == before  # never modified


def test_profile_options_need_auto_and_never_overwrite_an_input(pairings, tmp_path: Path, capsys) -> None:  # noqa: F811
    model, _ = pairings["qwen35"]["bundled"]
    prof = tmp_path / "p.json"
    assert main(["run", str(model), "-p", "x", "-n", "2", "--spec-draft-n-max", "2",
                 "--spec-draft-profile-out", str(prof)]) == 2  # a fixed length: nothing to profile
    assert main(["run", str(model), "-p", "x", "-n", "2", "--no-mtp", "--spec-draft-n-max", "auto",
                 "--spec-draft-profile", str(prof)]) == 2
    assert _run(model, "--spec-draft-profile-out", str(prof)) == 0
    before = prof.read_bytes()
    capsys.readouterr()
    # the same file in and out: refused before anything runs, even with --force
    assert _run(model, "--spec-draft-profile", str(prof), "--spec-draft-profile-out", str(prof), "--force") == 2
    assert "overwrite an input" in capsys.readouterr().err
    assert _run(model, "--spec-draft-profile-out", str(prof)) == 2  # exists: only with --force
    assert prof.read_bytes() == before
    assert _run(model, "--spec-draft-profile-out", str(prof), "--force") == 0
    capsys.readouterr()
    empty = tmp_path / "empty.json"  # two tokens: no step timed yet, nothing to save
    assert main(["run", str(model), "-p", "x", "-n", "2", "--spec-draft-n-max", "auto",
                 "--spec-draft-profile-out", str(empty)]) == 2
    assert "has not timed a step yet" in capsys.readouterr().err and not empty.exists()
    assert not list(tmp_path.glob(".*tmp*")) and not list(tmp_path.glob("*.tmp"))  # nothing left behind
