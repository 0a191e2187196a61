"""`gguf-mtp quantize` as a llama-quantize user meets it: --allow-requantize, an honest --help, and a progress
line on a terminal (none in a log)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from gguf_mtp.layout import Layout
from gguf_mtp.quantize import quantize_model

from .reliability import ROOT, sub
from .test_quantize import FALLBACK, K_SCHEME, WIDE, trunk_matrices


def test_a_q8_0_model_requantizes_only_with_allow_requantize(converted, tmp_path: Path) -> None:
    src = converted("qwen35", "bundled", "q8_0", **WIDE)
    r = sub(["quantize", src, tmp_path / "a.gguf", "Q4_K_M"])
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "already Q8_0" in last and "--allow-requantize" in last, r.stderr
    assert not list(tmp_path.iterdir())  # refused before anything was written
    q = quantize_model(src, tmp_path / "b.gguf", "Q4_K_M", allow_requantize=True, progress=False)
    assert q.report.layout == Layout.BUNDLED and q.report.file_type == "Q4_K_M"
    assert {t.type for t in q.report.mtp_tensors if len(t.shape) > 1} == {"Q8_0"}
    types = trunk_matrices(q.path)
    assert {t for t, ne0 in types.values() if ne0 % 256 == 0} <= K_SCHEME["Q4_K_M"]
    assert {t for t, ne0 in types.values() if ne0 % 256} <= FALLBACK
    r = sub(["quantize", src, tmp_path / "c.gguf", "Q4_K_M", "--allow-requantize"])
    assert r.returncode == 0 and "wrote" in r.stdout, r.stderr


def test_help_says_which_inputs_need_allow_requantize() -> None:
    r = sub(["quantize", "--help"], env={"COLUMNS": "200"})
    text = " ".join(r.stdout.split())
    assert "--allow-requantize" in text
    assert "f32/f16/bf16/q8_0" not in text.lower()  # q8_0 is refused without the option


def _on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; return its status and what the terminal showed."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "gguf_mtp_cli.main", *map(str, argv)], stdout=subprocess.PIPE,
                         stderr=slave, stdin=subprocess.DEVNULL, cwd=ROOT)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    p.communicate(timeout=300)
    return p.returncode, shown.decode("utf-8", "replace")


def test_progress_on_a_terminal_and_none_in_a_log(converted, tmp_path: Path) -> None:
    src = converted("qwen35", "bundled", "bf16", mtp_type="bf16", **WIDE)
    n = len(__import__("gguf_mtp.ggufio.model", fromlist=["GGUFModel"]).GGUFModel(src).tensors)
    rc, shown = _on_a_terminal(["quantize", src, tmp_path / "a.gguf", "Q4_K_M"])
    assert rc == 0, shown
    last = shown.replace("\r", "\n").strip().splitlines()[-1]
    assert last.lstrip("\x1b[2K").startswith("quantize a.gguf ") and f"{n}/{n} tensors" in last and "ETA" in last, shown
    assert "100.0%" in last, shown
    rc, shown = _on_a_terminal(["quantize", src, tmp_path / "b.gguf", "Q4_K_M", "--quiet"])
    assert rc == 0 and "tensors" not in shown, shown
    q8_head = converted("qwen35", "bundled", "bf16", **WIDE)
    for model, qtype in ((src, "Q4_K_M"), (q8_head, "F16")):  # F16: a second pass puts the Q8_0 head back
        r = sub(["quantize", model, tmp_path / f"c-{qtype}.gguf", qtype])
        assert r.returncode == 0 and "tensors" not in r.stderr and "ETA" not in r.stderr, r.stderr
