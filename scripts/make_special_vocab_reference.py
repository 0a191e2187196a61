#!/usr/bin/env python3
"""Regenerate tests/data/special_vocab_ref.json: what llama.cpp's converter writes as special-token ids and
``add_{bos,eos,sep}_token`` for each case of tests/special_vocab_cases.py, from the gguf-py in llama.cpp's source
tree (which its convert_hf_to_gguf.py imports ahead of an installed gguf; newer than the gguf package's release):

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/sdist && tar xf /tmp/sdist/*.tar.gz -C /tmp
    python3 scripts/make_special_vocab_reference.py --gguf-py /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py

Needs numpy and pyyaml (gguf-py's imports), nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf-py", type=Path, required=True, help="llama.cpp's gguf-py folder")
    a = ap.parse_args()
    sys.path[:0] = [str(ROOT), str(a.gguf_py)]  # ROOT first: gguf-py has a tests package of its own
    import gguf  # llama.cpp's copy (first on the path)
    from gguf import SpecialVocab

    from tests.special_vocab_cases import CASES, N_VOCAB, write_case

    assert Path(gguf.__file__).resolve().is_relative_to(a.gguf_py.resolve()), gguf.__file__
    vocab_py = a.gguf_py / "gguf" / "vocab.py"
    digest = hashlib.sha256(vocab_py.read_bytes()).hexdigest()
    out = {"source": f"llama.cpp's gguf-py, gguf/vocab.py sha256 {digest}", "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(CASES):
            folder = Path(tmp) / str(i)
            write_case(folder, name)
            sv = SpecialVocab(folder, load_merges=False, n_vocab=N_VOCAB)
            out["cases"][name] = {"add": sv.add_special_token, "ids": sv.special_token_ids}
    dst = ROOT / "tests" / "data" / "special_vocab_ref.json"
    dst.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {dst} ({len(CASES)} cases)")


if __name__ == "__main__":
    main()
