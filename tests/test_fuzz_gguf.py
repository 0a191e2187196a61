"""A structure-aware GGUF fuzzer through inspect, extract, strip, graft and pairing.

Mutants of small real files (a bundled model, a trunk, both sidecar flavours) get retyped, dropped and added
keys, odd values, other tensor types and shapes, dropped and renamed tensors; each is written as a well-formed
GGUF and given to every command that reads that kind of file. Property, asserted below:

- only :class:`GgufMtpError` escapes (a command either works or refuses in one line);
- inputs keep their bytes, and a refused command leaves no output behind;
- nothing we accept kills llama.cpp: every accepted mutant and every file written from one is loaded and run
  in a subprocess (``tests/load_each.py``), which must not die by a signal.

Seeded (``GGUF_MTP_FUZZ_SEED``, ``GGUF_MTP_FUZZ_N``, ``GGUF_MTP_FUZZ_FAMILY`` to explore further); the default run
takes well under a minute.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_mtp import inspect_file, surgery
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.runtime.pairing import resolve
from tests.gguf_mutate import RawGGUF, mutate

pytestmark = pytest.mark.llama  # needs llama.cpp to run, not to import: loads each mutated file with llama.cpp

SEED = int(os.environ.get("GGUF_MTP_FUZZ_SEED", "20261126"))
N = int(os.environ.get("GGUF_MTP_FUZZ_N", "160"))
FAMILY = os.environ.get("GGUF_MTP_FUZZ_FAMILY", "qwen35")  # deepseek2, mimo2, step35, ... to explore other archs
ROOT = Path(__file__).resolve().parents[1]


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def files(converted) -> dict[str, Path]:
    return {"bundled": converted(FAMILY, "bundled"), "trunk": converted(FAMILY, "trunk-only"),
            "sidecar": converted(FAMILY, "mtp-only"), "head": converted(FAMILY, "head-only")}


def _ops(kind: str, p: Path, files: dict[str, Path], out: Path):  # type: ignore[no-untyped-def]
    """(name, call, what to load from its result) for a mutant of ``kind``."""
    trunk, side = files["trunk"], files["sidecar"]
    if kind == "bundled":
        return [("inspect", lambda: inspect_file(p), None),
                ("extract", lambda: surgery.extract(p, out / "x.gguf", progress=False), lambda r: (str(trunk), str(r.paths[0]))),
                ("extract-head-only", lambda: surgery.extract(p, out / "h.gguf", head_only=True, progress=False),
                 lambda r: (str(trunk), str(r.paths[0]))),
                ("strip", lambda: surgery.strip(p, out / "s.gguf", progress=False), lambda r: (str(r.paths[0]), False)),
                ("graft-source", lambda: surgery.graft(p, trunk, out / "g.gguf", progress=False),
                 lambda r: (str(r.paths[0]), "auto")),
                ("pairing", lambda: resolve(p), lambda r: (str(p), "auto"))]
    if kind in ("sidecar", "head"):
        return [("inspect", lambda: inspect_file(p), None),
                ("graft", lambda: surgery.graft(p, trunk, out / "g.gguf", progress=False), lambda r: (str(r.paths[0]), "auto")),
                ("extract-head-only", lambda: surgery.extract(p, out / "h.gguf", head_only=True, progress=False),
                 lambda r: (str(trunk), str(r.paths[0]))),
                ("pairing", lambda: resolve(trunk, p), lambda r: (str(trunk), str(p)))]
    return [("inspect", lambda: inspect_file(p), None),
            ("graft-target", lambda: surgery.graft(side, p, out / "g.gguf", progress=False), lambda r: (str(r.paths[0]), "auto")),
            ("pairing", lambda: resolve(p, side), lambda r: (str(p), str(side)))]


def test_fuzz_gguf_commands(files, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    bases = {k: RawGGUF.read(p) for k, p in files.items()}
    fixed = {k: digest(p) for k, p in files.items()}
    loads: list[tuple[str, object]] = []
    escaped: list[str] = []
    stats = {"accepted": 0, "refused": 0}
    for i in range(N):
        kind = rng.choice(list(bases))
        mutant, desc = mutate(bases[kind], rng)
        case = tmp_path / f"case{i}"
        case.mkdir()
        p = mutant.write(case / f"{kind}.gguf")
        before = digest(p)
        for name, op, load in _ops(kind, p, files, case):
            try:
                r = op()
            except GgufMtpError as e:
                assert "\n" not in str(e), (desc, name, str(e))
                stats["refused"] += 1
                continue
            except Exception as e:  # noqa: BLE001 - the property under test
                escaped.append(f"case {i} ({kind}: {desc}) {name}: {type(e).__name__}: {e}")
                continue
            stats["accepted"] += 1
            if load is not None:
                loads.append(load(r))
        assert digest(p) == before, (i, desc)
        leftovers = [q.name for q in case.iterdir() if q.name.startswith(".")]
        assert not leftovers, (i, desc, leftovers)
    assert not escaped, "\n".join(escaped[:20])
    assert {k: digest(p) for k, p in files.items()} == fixed
    assert stats["refused"] > N // 4 and stats["accepted"] > N // 4, stats  # the mutations bite, and not all do

    # everything accepted, or written from an accepted mutant, runs in llama.cpp or is refused: never a crash
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps(loads))
    r = subprocess.run([sys.executable, "-m", "tests.load_each", str(pairs)], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "GGML_NO_BACKTRACE": "1"})
    started = [ln for ln in r.stdout.splitlines() if ln.startswith("start ")]
    last = loads[int(started[-1].split()[1])] if started else None
    assert r.returncode == 0, f"llama.cpp died (rc {r.returncode}) on {last}:\n{r.stderr[-2000:]}"
    assert sum(ln.startswith("ran ") for ln in r.stdout.splitlines()) > len(loads) // 4, r.stdout[-2000:]
