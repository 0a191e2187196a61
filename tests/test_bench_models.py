"""The benchmark scripts' own reliability (issue 23): bench/models.py never reuses a checkpoint a killed run left
half written, and bench processes leave through common.exit_after (results flushed, the interpreter's teardown of
llama.cpp objects skipped: it crashed CUDA processes at exit after their results were written)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def _bench(name: str):  # type: ignore[no-untyped-def]
    """A benchmark script as a module of the ``bench`` package (how ``python -m bench.<name>`` loads it)."""
    return importlib.import_module(f"bench.{name}")


def _shards(ck: Path) -> list[Path]:
    return sorted(ck.glob("*.safetensors"))


def test_a_half_written_checkpoint_is_made_again(tmp_path: Path, monkeypatch) -> None:
    models = _bench("models")
    args = dict(widths="tiny", layers=2, vocab=4096)
    ck = models.checkpoint(tmp_path, **args)
    sizes = {p.name: p.stat().st_size for p in _shards(ck)}
    assert len(sizes) == 4 and all(sizes.values())
    _shards(ck)[2].write_bytes(b"")  # what a killed run left: config.json there, a shard still empty
    (tmp_path / f".{ck.name}.{_dead_pid()}.partial").mkdir()  # and the temp folder of another killed run
    assert models.checkpoint(tmp_path, **args) == ck
    assert {p.name: p.stat().st_size for p in _shards(ck)} == sizes
    assert [p.name for p in tmp_path.iterdir()] == [ck.name]


def test_an_interrupted_checkpoint_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    models = _bench("models")
    import tests.synthetic as synthetic

    real = synthetic.write_checkpoint

    def killed(root, spec):  # type: ignore[no-untyped-def]
        real(root, spec)
        raise KeyboardInterrupt  # after every file is written, before the folder is put in place

    monkeypatch.setattr(synthetic, "write_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        models.checkpoint(tmp_path, widths="tiny", layers=2, vocab=4096)
    assert not list(tmp_path.iterdir())


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


EXIT = """
import atexit, sys
from bench.common import exit_after
atexit.register(lambda: print("teardown ran"))
def main():
    print("results", end="")  # buffered (stdout is a pipe) until exit_after flushes it
    {body}
exit_after(main)
"""


@pytest.mark.parametrize("body,rc", [("pass", 0), ("raise SystemExit(3)", 3), ("raise KeyboardInterrupt", 130),
                                     ("raise SystemExit('why')", 1), ("1 / 0", 1)])
def test_bench_processes_exit_after_their_results_without_teardown(body: str, rc: int) -> None:
    r = subprocess.run([sys.executable, "-c", EXIT.format(body=body)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ), cwd=ROOT)
    assert r.returncode == rc, r.stderr
    assert r.stdout == "results"  # flushed, and no teardown ran after it
    assert ("why" in r.stderr) == ("why" in body) and ("ZeroDivisionError" in r.stderr) == ("1 / 0" in body)


def test_bench_scripts_that_write_results_leave_through_exit_after() -> None:
    for name in ("run", "side_by_side", "qwen3next", "acceptance_vs_llamacpp", "multi_gpu", "acceptance_by_length",
                 "prompt_agreement"):
        assert "exit_after(main)" in (BENCH / f"{name}.py").read_text(), name


def test_release_shapes_are_inflated_templates_with_the_head_and_router_of_a_real_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/models.py --shape (issue 24): a 4-layer template at the shape's widths, inflated to full depth with
    the trunk's matrices as sparse holes; the MTP block (noised or not) and the LM head are the template's bytes,
    and oneshot.weight_bytes counts what a plain token and a draft read (routed experts at their used share)."""
    models = _bench("models")
    oneshot = _bench("oneshot")
    family, widths, _, _, used, noise = models.SHAPES["35b-a3b"]
    # the real widths, fewer layers and experts: small files even where a filesystem has no sparse holes
    monkeypatch.setitem(models.SHAPES, "35b-a3b", (family, widths, 6, 32, used, noise))
    made = models.shaped(tmp_path, "35b-a3b", vocab=4096, noises=(0.06, 0.0), trunks=("q8_0",), threads=2)
    from gguf import GGMLQuantizationType

    from gguf_mtp.ggufio.model import GGUFModel

    assert sorted(made) == ["35b-a3b Q8_0, noisy head (0.06)", "35b-a3b Q8_0, perfect head"]
    noisy, perfect = (GGUFModel(made[k]) for k in sorted(made))
    _, widths, layers, experts, used, _ = models.SHAPES["35b-a3b"]
    for m in (noisy, perfect):
        assert int(m.arch_get("{arch}.block_count")) == layers + 1
        assert int(m.arch_get("{arch}.expert_count")) == experts and int(m.arch_get("{arch}.expert_used_count")) == used
        assert int(m.arch_get("{arch}.embedding_length")) == widths["hidden"]
        assert m.tensors["blk.0.ffn_gate_inp.weight"].info.shape[-1] == experts
    dense = [n for n in noisy.tensors if not n.startswith("blk.") or n.startswith(f"blk.{layers}.")]
    differ = sorted(n for n in dense if noisy.tensors[n].file.read_tensor_bytes(n)
                    != perfect.tensors[n].file.read_tensor_bytes(n))
    assert differ == [f"blk.{layers}.attn_output.weight", f"blk.{layers}.ffn_down_shexp.weight"], differ
    wb = oneshot.weight_bytes(made[sorted(made)[1]])
    exps = sum(t.info.nbytes for n, t in perfect.tensors.items() if "_exps." in n and int(n.split(".")[1]) < layers)
    assert exps * used / experts < wb["plain"] < perfect.path.stat().st_size - exps * (1 - used / experts) + 1
    assert 0 < wb["draft"] < wb["plain"]
    # --draft-vocab-only without --draft-vocab: the templates only, no full-depth copy made or listed
    before = sorted(p.name for p in tmp_path.iterdir())
    assert models.shaped(tmp_path, "35b-a3b", vocab=4096, noises=(0.06,), trunks=("q4_k_m",), threads=2,
                         draft_vocab_only=True) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    # --draft-head: the same model with a lower-bit draft LM head in its MTP block, the trunk and LM head unchanged
    dh = models.shaped(tmp_path, "35b-a3b", vocab=4096, noises=(0.06,), trunks=("q8_0",), threads=2, draft="q5_0")
    assert list(dh) == ["35b-a3b Q8_0, noisy head (0.06), Q5_0 draft head"]
    d = GGUFModel(dh[list(dh)[0]])
    assert d.tensors[f"blk.{layers}.nextn.shared_head_head.weight"].info.ggml_type == GGMLQuantizationType.Q5_0
    assert f"blk.{layers}.nextn.shared_head_head.weight" not in noisy.tensors
    assert all(d.tensors[n].file.read_tensor_bytes(n) == noisy.tensors[n].file.read_tensor_bytes(n)
               for n in ("output.weight", "blk.0.ffn_gate_inp.weight", f"blk.{layers}.attn_output.weight"))
    # --mtp-type: the MTP block's matrices at that type, its norms and router F32, the trunk unchanged
    mt = models.shaped(tmp_path, "35b-a3b", vocab=4096, noises=(0.06,), trunks=("q8_0",), threads=2, mtp_type="q4_0")
    assert list(mt) == ["35b-a3b Q8_0, noisy head (0.06), Q4_0 MTP block"]
    q = GGUFModel(mt[list(mt)[0]])
    head = {n: t.info.ggml_type for n, t in q.tensors.items() if n.startswith(f"blk.{layers}.")}
    assert head[f"blk.{layers}.ffn_gate_exps.weight"] == head[f"blk.{layers}.attn_output.weight"] \
        == GGMLQuantizationType.Q4_0
    assert head[f"blk.{layers}.attn_norm.weight"] == GGMLQuantizationType.F32
    assert all(q.tensors[n].file.read_tensor_bytes(n) == noisy.tensors[n].file.read_tensor_bytes(n)
               for n in ("output.weight", "blk.0.ffn_gate_inp.weight", "token_embd.weight"))


def test_an_env_row_sets_every_variable_it_names_and_a_malformed_one_stops_in_a_line() -> None:
    """bench/oneshot.py --env-row NAME=VALUE[,NAME=VALUE...]: several of a build's switches in one row (session 18
    turned two ggml-cuda patches off together this way), and a typo is an error, not a row measured with nothing
    changed."""
    oneshot = _bench("oneshot")
    assert oneshot.env_vars("GGML_CUDA_MMVQ_FUSION_COLS=1") == {"GGML_CUDA_MMVQ_FUSION_COLS": "1"}
    assert oneshot.env_vars("A=1,B=0") == {"A": "1", "B": "0"}
    for bad in ("A", "A=1,B", "=1"):
        with pytest.raises(SystemExit, match="error: --env-row"):
            oneshot.env_vars(bad)


def test_an_ab_row_names_what_it_runs_and_refuses_a_row_it_cannot_run_in_a_line() -> None:
    """bench/oneshot.py --ab A B --ab-rows ...: a row it does not know, or llama.cpp's driver without its tool or its
    rows, stops with one line naming the option before any process runs; a malformed environment likewise."""
    import argparse

    oneshot = _bench("oneshot")
    a = argparse.Namespace(ab_n=1)
    pair = ["-", "GGML_CUDA_GRAPH_MAX_SHAPES=1"]
    for item, spec_tps, spec in (("bogus", {}, None), ("spec", {}, None), ("spec", {2: 1.0}, None)):
        with pytest.raises(SystemExit, match="error: --ab-rows"):
            oneshot.ab_row(item, pair, 2, spec_tps, spec, Path("m.gguf"), Path("p.txt"), "m", a, Path("."))
    with pytest.raises(SystemExit, match="error: --ab-rows 'lc'"):  # llama-completion not found
        oneshot.ab_row("lc", pair, 2, {}, None, Path("m.gguf"), Path("p.txt"), "m", a, Path("."))
    with pytest.raises(SystemExit, match="error: --ab 'NOVALUE'"):
        oneshot.ab_row("best", ["-", "NOVALUE"], 2, {}, None, Path("m.gguf"), Path("p.txt"), "m", a, Path("."))


def test_an_ab_row_of_llama_completion_runs_it_under_each_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/oneshot.py --ab A B --ab-rows lc: llama-completion alternates between the two environments (each on top
    of the process's own), so a library setting (GGML_CUDA_GRAPH_OPT=1) is measured on llama.cpp's tool as on run."""
    import argparse
    import os

    oneshot = _bench("oneshot")
    a = argparse.Namespace(ab_n=2, n_predict=8, ngl=99, ctx=512)
    seen: list[str | None] = []
    rates = iter([200.0, 210.0, 202.0, 212.0])

    def fake(tool, model, prompt_file, n, *, ngl, ctx, env):  # type: ignore[no-untyped-def]
        assert tool == Path("bin/llama-completion") and n == 8 and env["PATH"] == os.environ["PATH"]
        seen.append(env.get("X"))
        return type("Run", (), {"tps": next(rates)})()

    monkeypatch.setattr(oneshot.llamacpp, "completion", fake)
    row = oneshot.ab_row("lc", ["-", "X=1"], 2, {}, None, Path("m.gguf"), Path("p.txt"), "m", a, Path("."),
                         Path("bin/llama-completion"))
    assert seen == [None, "1", None, "1"]
    assert row["row"] == "A/B llama-completion: - | X=1" and row["t/s A"] == 201.0 and row["t/s"] == 211.0


def test_a_versus_row_alternates_its_two_rows_and_refuses_one_it_cannot_run_in_a_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/oneshot.py --versus A B: the two rows' processes alternate (A, B, A, B, ...), so drift over the call
    falls on both, and the row reports the medians and B over A; a row it does not know stops with one line before
    any process runs."""
    import argparse

    oneshot = _bench("oneshot")
    a = argparse.Namespace(ab_n=3)
    ran: list[tuple[str, ...]] = []
    rates = iter([300.0, 290.0, 310.0, 280.0, 305.0, 295.0])

    def fake(model, prompt_file, a, tmp, *extra, **kw):  # type: ignore[no-untyped-def]
        ran.append(extra)
        return {"decode_tps": next(rates), "text": "same", **({"auto": {"runs": [[2, 9]]}} if "auto" in extra else {})}

    monkeypatch.setattr(oneshot, "ours", fake)
    with pytest.raises(SystemExit, match="error: --versus best bogus"):
        oneshot.versus_row(["best", "bogus"], 2, Path("m.gguf"), Path("p.txt"), "m", a, Path("."))
    assert ran == []
    row = oneshot.versus_row(["best", "auto"], 2, Path("m.gguf"), Path("p.txt"), "m", a, Path("."))
    assert ran == [("--spec-draft-n-max", "2"), ("--spec-draft-n-max", "auto")] * 3
    assert row["t/s each A"] == [300.0, 310.0, 305.0] and row["t/s each B"] == [290.0, 280.0, 295.0]
    assert row["t/s A"] == 305.0 and row["t/s"] == 290.0 and row["x B/A (medians)"] == round(290 / 305, 3)
    assert row["auto each B"] == [{"runs": [[2, 9]]}] * 3 and row["_text"] == "same"


def test_an_ab_row_alternates_its_two_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/oneshot.py --ab A B: the row's processes alternate between the two environments (A, B, A, B, ...) and
    the row reports the medians, B over A and whether every process printed the same text."""
    import argparse

    oneshot = _bench("oneshot")
    a = argparse.Namespace(ab_n=2)
    ran: list[tuple[tuple[str, ...], dict | None]] = []
    rates = iter([300.0, 290.0, 310.0, 280.0])

    def fake(model, prompt_file, a, tmp, *extra, env_extra=None, **kw):  # type: ignore[no-untyped-def]
        ran.append((extra, env_extra))
        return {"decode_tps": next(rates), "text": "same" if env_extra is None else "other"}

    monkeypatch.setattr(oneshot, "ours", fake)
    row = oneshot.ab_row("2", ["-", "X=1"], 3, {}, None, Path("m.gguf"), Path("p.txt"), "m", a, Path("."))
    assert ran == [(("--spec-draft-n-max", "2"), None), (("--spec-draft-n-max", "2"), {"X": "1"})] * 2
    assert row["row"] == "A/B run --spec-draft-n-max 2: - | X=1" and row["t/s A"] == 305.0 and row["t/s"] == 285.0
    assert row["_text"] is None  # the two sides printed different texts: never "same text"


@pytest.mark.parametrize("how", ["package", "env"])
def test_a_process_of_another_package_imports_that_package_not_the_repository(tmp_path: Path, how: str) -> None:
    """bench/oneshot.py --before DIR and an --ab side with its own PYTHONPATH: `python -m` puts its working folder
    first on sys.path, so a process started in the repository ran the repository's gguf_mtp whatever PYTHONPATH said
    (session 20's A/B of two controllers ran one). Each side's process now imports its own."""
    oneshot = _bench("oneshot")
    pkg = tmp_path / "other"
    for name in ("gguf_mtp", "gguf_mtp_cli"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    work = tmp_path / "work"
    work.mkdir()
    package, extra = (pkg, None) if how == "package" else (None, {"PYTHONPATH": str(pkg)})
    env, cwd = oneshot.process_env(work, package, extra)
    probe = "import gguf_mtp, gguf_mtp_cli; print(gguf_mtp.__file__); print(gguf_mtp_cli.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=cwd, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(pkg / "gguf_mtp" / "__init__.py"), str(pkg / "gguf_mtp_cli" / "__init__.py")]
    # the repository's own copy where nothing else is named: the same code the process would import in the repo
    env, cwd = oneshot.process_env(work)
    out = subprocess.run([sys.executable, "-c", "import gguf_mtp; print(gguf_mtp.__file__)"], env=env, cwd=cwd,
                         capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()) == ROOT / "gguf_mtp" / "__init__.py"


def test_plain_pairs_compare_medians_pair_by_pair_and_split_decode_from_host_time() -> None:
    """bench/oneshot.py --plain-pairs: the plain target (issue 24, within 2% of llama-completion) is judged on
    medians of alternating processes, and the decode alone (llama-completion's eval span) apart from the host's time
    between two decodes, which llama-completion's figure leaves out."""
    oneshot = _bench("oneshot")
    lc = [200.0, 190.0, 210.0]
    ours = [(198.0, 5.10, 5.00), (185.0, 5.30, 5.21), (205.0, 4.95, 4.85)]  # (t/s, step ms, decode ms)
    s = oneshot.pairs_summary(lc, ours)
    assert s["t/s"] == 198.0 and s["llama-completion t/s"] == 200.0
    assert s["x llama-completion (medians)"] == 0.99
    assert s["x each pair"] == [0.99, round(185 / 190, 3), round(205 / 210, 3)]
    assert s["decode ms/token"] == 5.0 and s["llama-completion eval ms/token"] == 5.0
    assert s["host ms/token"] == 0.1


@pytest.mark.parametrize("args,why", [(["--rows", "plain,bogus"], "--rows 'bogus'"), (["--answers", "0"], "--answers")])
def test_first_answer_refuses_a_row_it_cannot_run_in_a_line(args: list[str], why: str) -> None:
    """bench/first_answer.py: a row it does not know or no answer to time stops with one line naming the option,
    before any session is loaded (here the model does not exist: a row that ran would fail otherwise)."""
    p = subprocess.run([sys.executable, "-m", "bench.first_answer", "missing.gguf", *args], capture_output=True,
                       text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert p.returncode != 0 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [p.stderr.strip().splitlines()[-1]] and f"error: {why}" in p.stderr


def _steps_over(right: list[bool], k: int) -> list[int]:
    """Greedy steps of length ``k`` over a text whose head draft at each position is right or not: a step at t
    accepts the drafts while they are right (at most k) and emits them and one token more."""
    steps, t = [], 0
    while t < len(right) - k - 1:
        j = 0
        while j < k and right[t + j]:
            j += 1
        steps.append(j)
        t += j + 1
    return steps


def test_acceptance_read_at_a_longer_length_predicts_a_shorter_one_low_where_misses_cluster() -> None:
    """bench/acceptance_by_length.py: at its own length the prefix shares give the tokens a step emits exactly; read
    at a longer length they predict a shorter one about right where the head's misses fall independently, and too
    low where they cluster (a longer length starts more of its steps right after a miss), which is what holds auto
    at the longer length."""
    import random

    abl = _bench("acceptance_by_length")
    rng = random.Random(0)
    independent = [rng.random() < 0.7 for _ in range(200_000)]
    clustered, hard = [], False
    for _ in range(200_000):  # a sticky easy / hard regime: right 85% of the time when easy, 35% when hard
        hard = (rng.random() < 0.9) if hard else (rng.random() < 0.05)
        clustered.append(rng.random() < (0.35 if hard else 0.85))
    for right, clusters in ((independent, False), (clustered, True)):
        runs = {k: [_steps_over(right, k)] for k in (1, 2, 3)}
        for k in runs:
            assert abl.predict(runs[k], k, k) == pytest.approx(abl.measured(runs[k]), rel=1e-9)
        low = abl.measured(runs[2]) - abl.predict(runs[3], 3, 2)
        if clusters:
            assert low > 0.01, low
        else:
            assert abs(low) < 0.01, low
    with pytest.raises(ValueError, match="k=3"):
        abl.predict([[0, 1]], 2, 3)
