"""`run --stats-json -` (issue 27): the statistics are stdout's last line, one JSON object after the generated text,
so a script splits the two without guessing (`| tail -n 1`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .reliability import sub

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: runs `run`


def test_stats_on_stdout_are_its_last_line_after_the_text(converted, tmp_path: Path) -> None:
    model = converted("qwen35", "bundled")
    args = ["run", model, "-p", "The quick brown fox", "-n", "24", "--temp", "0", "--spec-draft-n-max", "2"]
    plain = sub(args)
    assert plain.returncode == 0, plain.stderr
    r = sub([*args, "--stats-json", "-"])
    assert r.returncode == 0, r.stderr
    *text, last = r.stdout.splitlines()
    stats = json.loads(last)
    assert stats["emitted"] > 0 and len(stats["acceptance_at"]) == 2
    assert "\n".join(text) == plain.stdout.rstrip("\n")  # the text as without the option
    assert last not in r.stderr
