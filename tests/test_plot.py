"""`gguf-mtp plot` (issue 27): a valid PNG, written atomically, from what `run --stats-json` and the benchmarks
write; a hostile statistics file is one line; without matplotlib, `plot` and `bench/plot.py` say so in one line."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from .reliability import ROOT, sub

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: plots what `run --stats-json` writes

REFERENCE = ROOT / "bench" / "reference"
#: runs the CLI (or a script) with matplotlib unimportable, as on a machine without the plot extra
NO_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # import matplotlib raises ImportError
argv = sys.argv[1:]
if argv[0] == "--script":
    import runpy
    sys.argv = argv[1:]
    runpy.run_path(argv[1], run_name="__main__")
else:
    from gguf_mtp_cli.main import main
    sys.exit(main(argv))
"""


def _png_size(path: Path) -> tuple[int, int]:
    """Check the PNG's signature and every chunk's CRC; return its width and height."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    pos, kinds = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + body), kind
        kinds.append(kind)
        pos += 12 + n
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def _no_matplotlib(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_MATPLOTLIB, *map(str, argv)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_plot_of_real_runs_is_a_valid_png_written_atomically(converted, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    model = converted("qwen35", "bundled")
    stats = []
    for k in (1, 3):
        s = tmp_path / f"k{k}.json"
        r = sub(["run", model, "-p", "The quick brown fox", "-n", "24", "--spec-draft-n-max", k, "--stats-json", s])
        assert r.returncode == 0, r.stderr
        stats.append(s)
    out = tmp_path / "out" / "speed.png"
    out.parent.mkdir()
    r = sub(["plot", *stats, "-o", out])
    assert r.returncode == 0 and r.stdout.strip() == f"wrote {out}", r.stderr
    w, h = _png_size(out)
    assert w > 800 and h > 400
    assert [p.name for p in out.parent.iterdir()] == ["speed.png"]  # nothing else left beside it
    before = out.read_bytes()
    r = sub(["plot", stats[0], "-o", out])
    assert r.returncode == 2 and "--force" in r.stderr and out.read_bytes() == before, r.stderr
    r = sub(["plot", stats[0]])  # default: beside the first file
    assert r.returncode == 0 and _png_size(stats[0].with_suffix(".png"))
    r = sub(["plot", stats[0], "-o", stats[0], "--force"])  # never over an input
    assert r.returncode == 2 and json.loads(stats[0].read_text())["acceptance_at"], r.stderr


@pytest.mark.parametrize("name", ["side-by-side-h100-noisy-host/side-by-side.json", "oneshot-h100-32L/oneshot.json"])
def test_plot_of_benchmark_files(tmp_path: Path, name: str) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "b.png"
    r = sub(["plot", REFERENCE / name, "-o", out])
    assert r.returncode == 0, r.stderr
    assert _png_size(out)[0] > 800


@pytest.mark.parametrize(("content", "said"), [
    (b"not json", "not valid JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b"{}", "neither run statistics"),
    (b'{"acceptance_at": [0.5, 7], "n_draft_max": 2}', "acceptance_at\"[1] is '7'"),
    (b'{"acceptance_at": "x"}', "must be a list"),
    (b'{"decode_tps": NaN, "n_draft_max": 1}', "decode_tps"),
    (b'{"decode_tps": 5, "n_draft_max": 100000}', "n_draft_max"),
    (b'{"decode_tps": 5, "draft_lengths": {"1e9": 3}}', "draft_lengths"),
    (b'{"rows": [{"row": "x k=2", "t/s": "fast"}]}', "t/s"),
    (b'{"models": [{"rows": 3}]}', "\"rows\" must be a list"),
    (b'{"acceptance_at": [], "decode_tps": null}', "nothing to draw"),
    (b"[" * 100000, "not valid JSON"),
])
def test_a_hostile_statistics_file_is_one_line(tmp_path: Path, content: bytes, said: str) -> None:
    pytest.importorskip("matplotlib")
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    r = sub(["plot", bad, "-o", tmp_path / "o.png"])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and said in r.stderr, r.stderr
    assert not (tmp_path / "o.png").exists()


def test_without_matplotlib_plot_says_how_to_install_it_in_one_line(tmp_path: Path) -> None:
    stats = tmp_path / "s.json"
    stats.write_text(json.dumps({"acceptance_at": [0.8, 0.5], "n_draft_max": 2, "decode_tps": 30.0}))
    r = _no_matplotlib(["plot", stats], tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "pip install matplotlib" in r.stderr, r.stderr
    assert r.stderr.startswith("error: ") and not list(tmp_path.glob("*.png"))


def test_bench_plot_without_matplotlib_is_one_line(tmp_path: Path) -> None:
    r = _no_matplotlib(["--script", ROOT / "bench" / "plot.py",
                        REFERENCE / "side-by-side-h100-noisy-host" / "side-by-side.json"], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "pip install matplotlib" in r.stderr, r.stderr
