"""bench/cuda/q8_0_matvec.cu and q4_0_matvec.cu time patch 0019's aligned reads outside ggml: their aligned loads
must be the patch's get_ints_aligned, statement for statement (names aside), or their numbers describe another
kernel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench/cuda"
PATCH = ROOT / "patches/llama.cpp/0019-cuda-mmvq-aligned.patch"

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


def patch_reads() -> list[str]:
    patch_added = [ln[1:] for ln in PATCH.read_text().splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return statements(between(patch_added, "void get_ints_aligned(", "}"))


def test_the_q8_0_benchmark_reads_as_the_patch_does() -> None:
    ours = patch_reads()
    bench = statements(between((BENCH / "q8_0_matvec.cu").read_text().splitlines(),
                               "if constexpr (LOAD == LOAD_ALIGNED) {", "    } else {"))
    assert len(ours) >= 8 and ours == bench, (ours, bench)


def test_the_q4_0_benchmark_reads_as_the_patch_does() -> None:
    ours = patch_reads()
    bench = statements(between((BENCH / "q4_0_matvec.cu").read_text().splitlines(),
                               "void load_quants_aligned(", "}"))
    assert len(ours) >= 8 and ours == bench, (ours, bench)
