#!/usr/bin/env python3
"""Regenerate tests/data/ref/: small GGUFs written by llama.cpp's own converter (convert_hf_to_gguf.py) from
gguf-mtp's synthetic checkpoints, for tests/test_llamacpp_reference.py (ours vs theirs, tensor for tensor and key
for key) and tests/test_foreign_files.py (grafts and pairings with files gguf-mtp did not write).

Needs torch and transformers (not gguf-mtp's dependencies) and llama.cpp's source tree, e.g. the one vendored in
the llama-cpp-python sdist gguf-mtp builds:

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/sdist && tar xf /tmp/sdist/*.tar.gz -C /tmp
    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch transformers numpy safetensors jinja2 gguf
    /tmp/refvenv/bin/python scripts/make_reference_ggufs.py --llama-cpp /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp

The synthetic tokenizers are not real ones, so the converter's pre-tokenizer hash table cannot name them: the
script answers with the name that table gives the family's released tokenizer (PRE below; sources in docs/facts).
Everything else is the converter's own doing. manifest.json records the converter's llama.cpp commit, the exact
command of every file and the sha256 of every input file, so the tests can tell a stale reference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.synthetic import SyntheticSpec, write_checkpoint  # noqa: E402

#: what llama.cpp's pre-tokenizer hash table answers for each family's released tokenizer
PRE = {"qwen35": "qwen35", "qwen35moe": "qwen35", "qwen3next": "qwen2", "glm4moe": "glm4", "deepseek2": "deepseek-v3",
       "glm47flash": "glm4", "mimo2": "qwen2", "step35": "deepseek-v3"}

RAW_CONFIG = "<raw config.json>"
ORACLE = {"oracle_head": True, "trunk_scale": 0.5}
#: (name, family, spec overrides, converter options). Small on purpose: every file is committed.
#: deepseek2 (DeepSeek-V3): llama.cpp's converter always drops its MTP layer (skip_mtp) and refuses --no-mtp.
CASES: list[tuple[str, str, dict, list[str]]] = [
    ("qwen35", "qwen35", {}, []),
    # a head that is often right (a bigram trunk at half strength, the head computing the same bigram), so the
    # foreign-file tests can see drafts accepted after a graft, not only lossless output
    ("qwen35moe", "qwen35moe", ORACLE, []),
    ("qwen35moe-mtp", "qwen35moe", ORACLE, ["--mtp"]),
    ("qwen35moe-trunk", "qwen35moe", ORACLE, ["--no-mtp"]),
    # the released interval (4): transformers' Qwen3NextConfig does not keep full_attention_interval, so this
    # converter always writes its default 4 (beside the per-layer recurrent_layers that llama.cpp reads)
    ("qwen3next", "qwen3next", {"layers": 4, "attention_interval": 4}, []),
    ("glm4moe", "glm4moe", {}, []),
    ("deepseek2-trunk", "deepseek2", {}, []),
    ("glm47flash", "glm47flash", {}, []),
    # transformers 5's MiMo-V2 config class nests rope_parameters per attention type, where this converter looks
    # for rope_parameters["partial_rotary_factor"] (KeyError); RAW_CONFIG makes it read config.json as it does
    # when transformers does not know the model type
    ("mimo2", "mimo2", {}, [RAW_CONFIG]),
    ("step35", "step35", {}, [RAW_CONFIG]),  # transformers 5's Step3p5 config renames num_attention_groups
]
OUTTYPE = "q8_0"

#: run the converter with the pre-tokenizer answered (argv: llama.cpp dir, pre, converter args...)
BOOT = """
import sys
llama, pre, raw, argv = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
sys.path.insert(0, llama)
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
if raw:
    import conversion.base as base
    class NoAutoConfig:
        @staticmethod
        def from_pretrained(*a, **k):
            raise ValueError("read config.json")
    base.AutoConfig = NoAutoConfig
sys.argv = [llama + "/convert_hf_to_gguf.py"] + argv
import runpy
runpy.run_path(llama + "/convert_hf_to_gguf.py", run_name="__main__")
"""


#: smaller than SyntheticSpec's defaults (the files are committed); every width still a multiple of 32 (Q8_0)
SMALL = {"layers": 2, "attention_interval": 2, "heads": 4, "kv_heads": 2, "head_dim": 32, "intermediate": 64,
         "moe_intermediate": 32, "shared_intermediate": 32}


def spec_args(overrides: dict) -> dict:
    """SyntheticSpec arguments of a case (recorded in the manifest: the test makes the same checkpoint)."""
    return {**SMALL, **overrides, "n_shards": 1}


def sha256_files(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def llama_commit(llama: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(llama), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree (with convert_hf_to_gguf.py)")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "ref")
    ap.add_argument("--only", nargs="*", help="case names to regenerate (default: all)")
    ap.add_argument("--record-only", action="store_true",
                    help="do not run the converter: record the manifest entries of the files already in --out")
    args = ap.parse_args()
    llama = args.llama_cpp.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"cases": {}}
    manifest.setdefault("cases", {})
    manifest.update({"converter": "llama.cpp convert_hf_to_gguf.py", "llama_cpp_commit": llama_commit(llama),
                     "llama_cpp_python": "0.3.36 (sdist vendor/llama.cpp)", "outtype": OUTTYPE,
                     "regenerate": "python scripts/make_reference_ggufs.py --llama-cpp <llama.cpp tree>"})
    with tempfile.TemporaryDirectory() as tmp:
        for name, family, overrides, opts in CASES:
            if args.only and name not in args.only:
                continue
            ck = write_checkpoint(Path(tmp) / name, SyntheticSpec(family, **spec_args(overrides)))
            out = args.out / f"{name}.gguf"
            raw = RAW_CONFIG in opts
            cmd = [str(ck), "--outfile", str(out), "--outtype", OUTTYPE, *(o for o in opts if o != RAW_CONFIG)]
            env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}  # the tree's own gguf-py
            r = subprocess.run([sys.executable, "-c", BOOT, str(llama), PRE[family], "1" if raw else "0", *cmd], env=env,
                               capture_output=True, text=True) if not args.record_only else None
            if r is not None and r.returncode != 0:
                print(r.stderr[-4000:], file=sys.stderr)
                print(f"{name}: the converter failed", file=sys.stderr)
                return 1
            manifest["cases"][name] = {"family": family, "spec": spec_args(overrides), "converter_args": opts,
                                       "pre": PRE[family], "checkpoint_sha256": sha256_files(ck),
                                       "gguf_sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
                                       "bytes": out.stat().st_size}
            print(f"{name}: {out.stat().st_size / 1024:.0f} KiB")
            manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")  # after every case
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
