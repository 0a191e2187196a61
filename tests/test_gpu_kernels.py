"""bench/gpu_kernels.py's reading of Nsight Compute's CSV log: kernel families and the per-phase table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.gpu_kernels import family, read_ncu, summarize

pytestmark = pytest.mark.fast  # reads text files: no llama.cpp needed to run

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i: int, name: str, value: str, unit: str = "nsecond", metric: str = "gpu__time_duration.sum") -> str:
    return (f'"{i}","4242","python3","host","{name}","1","7","(128, 1, 1)","(4096, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


MMVQ1 = "void mul_mat_vec_q<(ggml_type)8, 1, false>(const void *, const void *, float *, int)"
MMVQ3 = "void mul_mat_vec_q<(ggml_type)8, 3, false>(const void *, const void *, float *, int)"
NORM = "void rms_norm_f32<1024, true, false>(const float *, float *, int, long, long, long, float)"


def write_phase(folder: Path, phase: str, wall_ms: float, rows: list[str]) -> None:
    (folder / f"{phase}.json").write_text(json.dumps({"phase": phase, "wall_ms": wall_ms, "model": "m.gguf"}))
    # ncu's log starts with its own lines before the CSV
    (folder / f"{phase}.csv").write_text("==PROF== Connected to process 4242\n" + HEADER + "\n" + "\n".join(rows) + "\n")


def test_family_keeps_template_arguments_and_drops_parameters() -> None:
    assert family(MMVQ1) == "mul_mat_vec_q<(ggml_type)8, 1, false>"
    assert family(MMVQ3) != family(MMVQ1)
    assert family("k_bin_bcast<op_add>(const float *)") == "k_bin_bcast<op_add>"
    assert family("plain_kernel") == "plain_kernel"


def test_read_ncu_converts_units_and_skips_other_metrics(tmp_path: Path) -> None:
    write_phase(tmp_path, "plain", 1.0, [row(0, MMVQ1, "2,500"), row(1, NORM, "3", unit="usecond"),
                                         row(2, NORM, "77", metric="sm__cycles_elapsed.avg")])
    got = read_ncu(tmp_path / "plain.csv")
    assert got == [(MMVQ1, pytest.approx(0.0025)), (NORM, pytest.approx(0.003))]
    assert read_ncu(tmp_path / "missing.csv") == []


def test_summarize_adds_up_busy_time_and_ranks_families(tmp_path: Path) -> None:
    write_phase(tmp_path, "plain", 0.1, [row(0, MMVQ1, "40000"), row(1, MMVQ1, "20000"), row(2, NORM, "10000")])
    write_phase(tmp_path, "verify-3", 0.2, [row(0, MMVQ3, "90000"), row(1, NORM, "30000")])
    (tmp_path / "draft.json").write_text(json.dumps({"phase": "draft", "wall_ms": 0.05}))  # ncu wrote nothing
    text = summarize(tmp_path)
    lines = text.splitlines()
    plain = lines.index(next(line for line in lines if line.startswith("plain:")))
    assert "kernels 3, GPU busy 0.070 ms (70% of wall), gaps 0.030 ms (10.0 us a kernel)" in lines[plain]
    assert "x2" in lines[plain + 1] and "mul_mat_vec_q<(ggml_type)8, 1, false>" in lines[plain + 1]
    assert "0.060 ms" in lines[plain + 1] and "85.7%" in lines[plain + 1]
    assert "draft: no kernels profiled" in text
    assert "verify-3: wall 0.200 ms, kernels 2, GPU busy 0.120 ms" in text
