"""`run --draft-vocab` loads the file through a virtual ``FILE *`` (gguf_mtp/runtime/virtual.py), read whole, where
the file as written is mmapped. One process a row, alternating: the same file with a draft vocabulary (its own map,
handed to the session as its ``--draft-vocab`` so both rows draft from the same tokens) loaded as it is (mmap) and
through the virtual file. Each row: the session's load (llama.cpp's load, the upload, the warm-up), peak host
memory, the bytes the virtual file served, and one answer's t/s and acceptance.

    python -m bench.virtual_load MODEL-WITH-A-DRAFT-VOCAB.gguf [-ngl 99] [--rows mmap,virtual] [--repeat 2]

``--old-virtual FILE``: also rows through another copy of virtual.py (``virtual-old``), e.g. the one before a change.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import time

import gguf_mtp.runtime  # noqa: F401  (loads llama.cpp before numpy)
from bench.oneshot import PROMPT


def one_row(model: str, mode: str, ngl: int, n: int, old: str | None) -> dict:
    """In this process: load ``model`` as ``mode`` says, answer once."""
    import numpy as np

    from gguf_mtp import draft_vocab
    from gguf_mtp.ggufio.model import GGUFModel
    from gguf_mtp.runtime import session, virtual

    vmod = virtual
    if mode == "virtual-old":
        assert old is not None
        spec = importlib.util.spec_from_file_location("gguf_mtp.runtime.virtual_old", old)
        assert spec is not None and spec.loader is not None
        vmod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = vmod
        spec.loader.exec_module(vmod)
        session.VirtualFile, session.VirtualGGUF = vmod.VirtualFile, vmod.VirtualGGUF  # type: ignore[misc]
    served: dict[str, float] = {}
    close = vmod.VirtualGGUF.close

    def counting_close(vg: virtual.VirtualGGUF) -> None:
        served["served_gb"], served["size_gb"] = round(vg.bytes_served / 1e9, 3), round(vg.size / 1e9, 3)
        close(vg)

    vmod.VirtualGGUF.close = counting_close  # type: ignore[method-assign,assignment]
    ids = np.asarray(GGUFModel(model).get(draft_vocab.KEY))
    draft_vocab.choose = lambda *a, **kw: ids  # the file's own map
    kw = {"draft_vocab": len(ids)} if mode != "mmap" else {}
    t = time.perf_counter()
    with session.MTPSession(model, n_draft=2, n_gpu_layers=ngl, n_ctx=4096, **kw) as s:  # type: ignore[arg-type]
        load = time.perf_counter() - t
        if mode != "mmap" and s.draft_vocab is None:  # a stock library or an arch without the map: no virtual file
            raise SystemExit(f"{mode}: the session did not serve its draft vocabulary ({'; '.join(s.notices)})")
        st = s.generate(PROMPT, max_tokens=n).stats
    return {"row": mode, "load_s": round(load, 2),
            "maxrss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
            "t/s": round(st.decode_tps, 2), "acceptance": round(st.acceptance, 4), **served}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("-ngl", type=int, default=99)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--rows", default="mmap,virtual")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--old-virtual", help="another virtual.py: rows 'virtual-old' through it")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # a child process: one row, JSON out
    a = ap.parse_args()
    if a.row:
        print(json.dumps(one_row(a.model, a.row, a.ngl, a.n, a.old_virtual)))
        return
    rows = a.rows.split(",") + (["virtual-old"] if a.old_virtual else [])
    for _ in range(a.repeat):
        for mode in rows:
            cmd = [sys.executable, "-m", "bench.virtual_load", a.model, "-ngl", str(a.ngl), "-n", str(a.n),
                   "--row", mode, *(["--old-virtual", a.old_virtual] if a.old_virtual else [])]
            p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            last = p.stdout.strip().splitlines()[-1:] or [f"exit {p.returncode}: {p.stderr[-300:]}"]
            print(last[0], flush=True)


if __name__ == "__main__":
    main()
