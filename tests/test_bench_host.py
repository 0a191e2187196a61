"""The host-time tools of the benchmarks, on the CPU with the tiny model: ``bench.host_time`` (the step's calls timed
by wrappers), ``bench.native_stacks`` (py-spy's raw stacks summed under frames) and ``bench.virtual_load`` (a model
loaded through the virtual FILE* against the same file mmapped, with the same draft vocabulary)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gguf_mtp.runtime.llama  # noqa: F401  (first: the runtime, which needs llama.cpp)
from bench.native_stacks import below, read_stacks
from gguf_mtp import convert
from gguf_mtp.runtime import patches, virtual

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny-qwen35-mtp"


def bench(*args: str) -> list[str]:
    p = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.splitlines()


def test_native_stacks_sums_each_level_under_a_frame(tmp_path: Path) -> None:
    raw = tmp_path / "stacks.txt"
    raw.write_text("main (a.py:1);batch_step (s.py:2);llama_context::decode (libllama.so);graph_compute (x) 7\n"
                   "main (a.py:1);batch_step (s.py:2);llama_context::decode (libllama.so) 2\n"
                   "main (a.py:1);batch_step (s.py:2);sync (libllama.so);wait (x) 5\n"
                   "thread;llama_context::decode;graph_compute 100\n")  # not a step: another thread's, left out
    stacks = [(f, n) for f, n in read_stacks(raw) if "batch_step" in f]
    assert sum(n for _, n in stacks) == 14
    assert below(stacks, "llama_context::decode", 1) == {"graph_compute": 7, " (self)": 2}
    assert below(stacks, "batch_step", 2) == {"llama_context::decode > graph_compute": 7,
                                              "llama_context::decode (self)": 2, "sync > wait": 5}


def test_native_stacks_keeps_the_stacks_through_the_frame_it_is_given(tmp_path: Path) -> None:
    """--within: an answer's work outside its steps (a CLI's printing) is summed too, other threads still left out."""
    raw = tmp_path / "stacks.txt"
    raw.write_text("main;_run;generate;batch_step;llama_context::decode 6\n"
                   "main;_run;on_text;write 3\n"
                   "thread;_ignored;decode 50\n")
    steps = bench("bench.native_stacks", str(raw), "batch_step")
    assert steps[0] == "6 samples under batch_step"
    answer = bench("bench.native_stacks", str(raw), "_run", "--within", "_run")
    assert answer[0] == "9 samples under _run"
    assert any("66.7%  generate" in line for line in answer) and any("33.3%  on_text" in line for line in answer)
    # the option between the stacks and the frames (session 36's call 1 passed it so, and argparse alone refused)
    between = bench("bench.native_stacks", str(raw), "--within", "_run", "generate", "on_text")
    assert between[0] == "9 samples under _run"
    assert any(line.startswith("== generate: 6 samples") for line in between)
    assert any(line.startswith("== on_text: 3 samples") for line in between)


def test_step_python_leaves_llama_cpps_time_out(tmp_path: Path) -> None:
    """bench.step_python: on the CPU a step's decodes run inside llama.cpp, so the Python it reports is a part of
    the step, not nearly all of it (as it would be were llama_decode not timed); how large a part depends on the
    CPU's speed, so only that bound is checked."""
    model = convert(TINY, outfile=tmp_path / "tiny.gguf", progress=False).path
    out = bench("bench.step_python", str(model), "-k", "2", "-n", "24", "--answers", "2")
    line = next(ln for ln in out if ln.startswith("k=2: Python "))
    python, step = float(line.split()[2]), float(line.split(") of ")[1].split(",")[0])
    assert 0 < python < 0.9 * step, line


def test_host_time_lists_the_steps_calls(tmp_path: Path) -> None:
    model = convert(TINY, outfile=tmp_path / "tiny.gguf", progress=False).path
    out = bench("bench.host_time", str(model), "-k", "2", "-n", "24", "-ngl", "0")
    head = next(line for line in out if line.startswith("k=2"))
    steps = int(head.split(" tokens in ")[1].split()[0])
    assert 0 < steps <= 24
    rows = {line.split()[0] for line in out if line.startswith("  ")}
    assert {"decode[tgt]", "decode[mtp]", "sample", "seq_rm[mtp]", "sync[tgt]"} <= rows, rows
    plain = bench("bench.host_time", str(model), "-k", "0", "-n", "8", "-ngl", "0")
    assert not any("decode[mtp]" in line for line in plain)


@pytest.mark.skipif(virtual.unavailable() is not None or "draft-vocab" not in patches.names(),
                    reason="no glibc fopencookie, or a library without the draft-vocab patch: nothing served")
def test_virtual_load_rows_draft_as_the_mapped_file(tmp_path: Path) -> None:
    model = convert(TINY, outfile=tmp_path / "map.gguf", outtype="q8_0", draft_vocab=512, progress=False).path
    rows = [json.loads(line) for line in bench("bench.virtual_load", str(model), "-ngl", "0", "-n", "16",
                                                "--repeat", "1") if line.startswith("{")]
    assert [r["row"] for r in rows] == ["mmap", "virtual"], rows
    mapped, served = rows
    assert served["acceptance"] == mapped["acceptance"]  # the same map, the same drafts
    assert served["served_gb"] >= served["size_gb"] > 0 and "served_gb" not in mapped


def test_llama_cpp_tools_run_without_the_switches_a_session_turned_on() -> None:
    """A benchmark that runs a session in-process before it starts llama.cpp's own tools: the patch switches the
    runtime set for itself (patches.enable_switches) stay out of the tools' environment, so a baseline runs as
    stock llama.cpp; a switch the user set, and an A/B's own variables, reach them."""
    import os

    root = Path(__file__).resolve().parents[1]
    switches = {p.switch: p.name for p in patches.KNOWN if p.switch}
    mine = "GGML_CUDA_ARGMAX_SPLIT"  # one the user sets in the second run
    assert mine in switches
    code = ("import json\nfrom gguf_mtp.runtime import llama, patches\nfrom bench import llamacpp\nllama.registry()\n"
            "print(json.dumps([sorted(patches.switched_on_here()), patches.names(), llamacpp.tool_env(),\n"
            "                  llamacpp.tool_env({'GGML_SCHED_ASYNC_INPUTS': '1', 'X_AB': 'b'})]))")
    base = {k: v for k, v in os.environ.items() if k not in switches}
    for user in (None, "0"):
        env = base if user is None else dict(base, **{mine: user})
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, timeout=120)
        assert r.returncode == 0, r.stderr
        here, loaded, plain, ab = json.loads(r.stdout)
        assert here == sorted(s for s, name in switches.items() if name in loaded and s not in env)
        assert not set(here) & set(plain)  # set by the runtime here: left out
        assert plain.get(mine) == user  # set by the user: kept
        assert ab["GGML_SCHED_ASYNC_INPUTS"] == "1" and ab["X_AB"] == "b"


def test_gpu_kernels_verify_keeps_the_snapshots_a_run_keeps(tmp_path: Path) -> None:
    """bench.gpu_kernels: a verify of N rows keeps N - 1 snapshots, as `run` at k = N - 1 does (a verify of 3 rows
    with 3 would write a fourth conv-state copy in every DeltaNet layer that no run writes); ``verify-N:R`` keeps R,
    as auto keeps its bound's. On the CPU, without ncu: the phase's wall time and the context's ``n_rs_seq``."""
    model = convert(TINY, outfile=tmp_path / "tiny.gguf", progress=False).path
    for phase, want in (("verify-3", 2), ("verify-3:6", 6)):
        bench("bench.gpu_kernels", str(model), "--phase", phase, "-ngl", "0", "--out", str(tmp_path))
        got = json.loads((tmp_path / f"{phase}.json").read_text())
        assert got["n_rs_seq"] == want and got["wall_ms"] > 0
    bad = subprocess.run([sys.executable, "-m", "bench.gpu_kernels", str(model), "--phase", "verify-3:x", "-ngl", "0",
                          "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode != 0 and "error: --phase verify-3:x" in bad.stderr


def test_mmvq_src1_counts_the_mat_vecs_that_repeat_a_quantization(tmp_path: Path) -> None:
    """bench.mmvq_src1 (what patch 0014 saves): the rule on made-up nodes (a repeat, a write over the src1
    that ends it, a float weight and a 9-column product that are no mat-vecs), then the tiny model's graph: every
    layer's up projection repeats its gate's activation, every attention layer's K and V its Q's."""
    from bench.mmvq_src1 import Node, count

    x = (1000, (64, 3, 1, 1), (4, 256, 768, 768), 0)
    mm = lambda name, s1=x, t=8: Node("MUL_MAT", name, 5000, 64, s1, t)  # noqa: E731
    n, hits, names = count([mm("q-0"), mm("k-0"), Node("ADD", "w", 1200, 16, None, None), mm("v-0"),
                            mm("f16", t=1), mm("wide", s1=(1000, (64, 9, 1, 1), (4, 256, 2304, 2304), 0)), mm("u-1")])
    assert (n, hits, dict(names)) == (4, 2, {"k": 1, "u": 1})
    q8 = convert(TINY, outfile=tmp_path / "q8.gguf", outtype="q8_0", progress=False).path
    out = bench("bench.mmvq_src1", str(q8), "--rows", "3")
    n, hits = (int(v) for v in re.findall(r"(\d+) quantized mat-vecs, (\d+) of them", out[0])[0])
    by = {ln.split()[1]: int(ln.split()[0]) for ln in out[1:]}
    layers = json.loads((TINY / "config.json").read_text())["text_config"]["num_hidden_layers"]
    assert by["ffn_up"] == layers and by["Kcur"] == by["Vcur"] > 0 and 0 < hits < n
    f16 = convert(TINY, outfile=tmp_path / "f16.gguf", outtype="f16", progress=False).path
    assert "0 quantized mat-vecs, 0 of them" in bench("bench.mmvq_src1", str(f16), "--rows", "1")[0]


def test_logits_digest_is_the_same_for_the_same_floats_only(tmp_path: Path) -> None:
    """bench.logits_digest (how 0014's switch is checked on a GPU: equal files, equal logits): two processes on one
    model write identical JSON with every verify row counted; another weight type or -n changes the digests."""
    q8 = convert(TINY, outfile=tmp_path / "q8.gguf", outtype="q8_0", progress=False).path
    f16 = convert(TINY, outfile=tmp_path / "f16.gguf", outtype="f16", progress=False).path
    runs = {}
    for name, model, n in (("a", q8, 20), ("b", q8, 20), ("f16", f16, 20), ("n", q8, 21)):
        bench("bench.logits_digest", str(model), "-n", str(n), "--out", str(tmp_path / f"{name}.json"))
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    a = runs["a"]
    assert len(a["tokens"]) == 20 and a["verify_rows"] == 3 * 9 and 0 <= a["verify_argmax_agree"] <= 1
    assert a["plain_sha256"] != runs["f16"]["plain_sha256"] and a["verify_sha256"] != runs["f16"]["verify_sha256"]
    assert a["plain_sha256"] != runs["n"]["plain_sha256"]
