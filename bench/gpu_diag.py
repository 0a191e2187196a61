"""Which load paths work on this build (each in its own process): prints one line per case."""

import subprocess
import sys
import tempfile
from pathlib import Path

from gguf_mtp.convert import convert
from tests.synthetic import SyntheticSpec, write_checkpoint

d = Path(tempfile.mkdtemp())
write_checkpoint(d / "ck", SyntheticSpec("qwen35", oracle_head=True, trunk_scale=0.0))
files = {lay: convert(d / "ck", outfile=d / f"{lay}.gguf", outtype="q8_0", layout=lay, progress=False).path
         for lay in ("bundled", "trunk-only", "mtp-only", "head-only")}
cases = [
    ("trunk-only ngl=99", f"Model({str(files['trunk-only'])!r}, n_gpu_layers=99)"),
    ("bundled load_mtp=0 ngl=0", f"Model({str(files['bundled'])!r}, n_gpu_layers=0)"),
    ("bundled load_mtp=0 ngl=99", f"Model({str(files['bundled'])!r}, n_gpu_layers=99)"),
    ("bundled load_mtp=1 ngl=99", f"Model({str(files['bundled'])!r}, load_mtp=True, n_gpu_layers=99)"),
]
for log in ("", "raw"):
    for name, expr in cases:
        code = ("from gguf_mtp.runtime.llama import Model, Context\nfrom tests.helpers import greedy\n"
                f"m = {expr}\nc = Context(m)\nprint(greedy(c, m.tokenize('hello world'), 4))")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**__import__("os").environ, "GGUF_MTP_LLAMA_LOG": log})
        tail = (r.stdout.strip() or r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")[-200:]
        print(f"{'raw-log' if log else 'py-log':8} {name:28} rc={r.returncode} {tail}")
for name, mtp in (("bundled MTP", "auto"), ("head-only", str(files["head-only"])),
                  ("self-contained", str(files["mtp-only"]))):
    model = files["bundled"] if mtp == "auto" else files["trunk-only"]
    code = ("from gguf_mtp.runtime import MTPSession\n"
            f"s = MTPSession({str(model)!r}, mtp={mtp!r}, n_gpu_layers=99, n_draft=3)\n"
            "g = s.generate('The quick brown fox', max_tokens=24); print(g.stats.compact())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**__import__("os").environ, "GGUF_MTP_LLAMA_LOG": "raw"})
    print(f"session {name:16} rc={r.returncode} {(r.stdout.strip() or r.stderr.strip()[-300:])}")
