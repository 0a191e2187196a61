"""The benchmark scripts' own reliability (issue 23): bench/models.py never reuses a checkpoint a killed run left
half written, and bench processes leave through common.exit_after (results flushed, the interpreter's teardown of
llama.cpp objects skipped: it crashed CUDA processes at exit after their results were written)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
sys.path.insert(0, {bench!r})
from common import exit_after
atexit.register(lambda: print("teardown ran"))
def main():
    print("results", end="")  # buffered (stdout is a pipe) until exit_after flushes it
    {body}
exit_after(main)
"""


@pytest.mark.parametrize("body,rc", [("pass", 0), ("raise SystemExit(3)", 3), ("raise KeyboardInterrupt", 130),
                                     ("raise SystemExit('why')", 1), ("1 / 0", 1)])
def test_bench_processes_exit_after_their_results_without_teardown(body: str, rc: int) -> None:
    r = subprocess.run([sys.executable, "-c", EXIT.format(bench=str(BENCH), body=body)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ))
    assert r.returncode == rc, r.stderr
    assert r.stdout == "results"  # flushed, and no teardown ran after it
    assert ("why" in r.stderr) == ("why" in body) and ("ZeroDivisionError" in r.stderr) == ("1 / 0" in body)


def test_bench_scripts_that_write_results_leave_through_exit_after() -> None:
    for name in ("run", "side_by_side", "qwen3next", "acceptance_vs_llamacpp", "multi_gpu"):
        assert "exit_after(main)" in (BENCH / f"{name}.py").read_text(), name
