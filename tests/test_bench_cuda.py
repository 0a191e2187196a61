"""bench/cuda/q8_0_matvec.cu times patch 0019's aligned Q8_0 reads outside ggml: its LOAD_ALIGNED branch must be
the patch's get_ints_q8_0_aligned, statement for statement (names aside), or its numbers describe another kernel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench/cuda/q8_0_matvec.cu"
PATCH = ROOT / "patches/llama.cpp/0019-cuda-mmvq-q8-0-aligned.patch"

pytestmark = pytest.mark.fast


def statements(lines: list[str]) -> list[str]:
    """Code lines without comments and blank space, the benchmark's names mapped to the patch's."""
    out = []
    for ln in lines:
        ln = re.sub(r"//.*", "", ln)
        ln = re.sub(r"\s+", "", ln)
        ln = ln.replace("b->qs", "qs").replace("4*kq", "4*iqs").replace("VDR", "vdr")
        if ln and ln not in ("{", "}"):
            out.append(ln)
    return out


def between(lines: list[str], start: str, end: str) -> list[str]:
    i = next(i for i, ln in enumerate(lines) if start in ln)
    j = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(end))
    return lines[i + 1:j]


def test_the_benchmark_reads_q8_0_as_the_patch_does() -> None:
    patch_added = [ln[1:] for ln in PATCH.read_text().splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    ours = statements(between(patch_added, "void get_ints_q8_0_aligned(", "}"))
    bench = statements(between(BENCH.read_text().splitlines(), "if constexpr (LOAD == LOAD_ALIGNED) {", "    } else {"))
    assert len(ours) >= 8 and ours == bench, (ours, bench)

