"""gguf-mtp's converter against llama.cpp's own (convert_hf_to_gguf.py), key for key and tensor for tensor.

The reference files in tests/data/ref/ were written by the converter vendored in llama-cpp-python 0.3.36 from
gguf-mtp's synthetic checkpoints (scripts/make_reference_ggufs.py; manifest.json names the llama.cpp commit and
the sha256 of every input file). Here the same checkpoints are generated again, checked byte-identical to the
ones the references came from, converted by gguf-mtp with the same options, and compared: every metadata key
but ``general.*`` with its type and value, every tensor's name, type, shape as ggml sees it, and bytes.

Where we differ on purpose, the difference is named in DIFFERENCES, and checked to be exactly that.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert
from gguf_mtp.ggufio.model import GGUFModel
from gguf_mtp.ggufio.shape import ggml_shape
from tests.synthetic import SyntheticSpec, write_checkpoint

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

REF = Path(__file__).parent / "data" / "ref"
MANIFEST = json.loads((REF / "manifest.json").read_text())
CASES = sorted(MANIFEST["cases"])

#: converter options -> our layout
LAYOUT = {(): "bundled", ("--mtp",): "mtp-only", ("--no-mtp",): "trunk-only"}
#: families whose reference has no MTP layer although ours keeps it (llama.cpp drops DeepSeek-V3's: skip_mtp)
DROPS_MTP = {"deepseek2"}
#: tensors we leave out on purpose: the MTP layer's copies of the embeddings / LM head when byte-identical to
#: token_embd / output (llama.cpp's graphs fall back to those; docs/architectures.md)
SHARED_COPIES = {".nextn.embed_tokens.weight": "token_embd.weight", ".nextn.shared_head_head.weight": "output.weight"}
#: F32 tensors computed with a transcendental function (ssm_a = -exp(A_log), Llama 3 rope factors): torch's and
#: numpy's float32 exp may differ in the last bit; everything else must be bit-identical
COMPUTED = (".ssm_a", "rope_freqs.weight")
#: keys we write and llama.cpp's converter does not, on purpose: GLM-4.7-Flash's config has no scoring_func, so
#: llama.cpp writes no gating function and its deepseek2 loader falls back to softmax; the router is sigmoid
EXTRA_KEYS = {"glm47flash": {"deepseek2.expert_gating_func"}}
#: tensors llama.cpp writes and we do not, on purpose: MiMo-V2-Flash heads ship split q/k/v, which llama.cpp's
#: converter keeps, but its mimo2 MTP graph needs one fused attn_qkv: we write that instead (docs/facts/mimo2.md)
SPLIT_QKV_HEADS = {"mimo2"}


def _options(case: dict) -> tuple[str, ...]:
    return tuple(o for o in case["converter_args"] if not o.startswith("<"))


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """``ours(name) -> (our GGUFModel, reference GGUFModel)``."""
    root = tmp_path_factory.mktemp("ref-cmp")

    def make(name: str):
        case = MANIFEST["cases"][name]
        ck = write_checkpoint(root / name, SyntheticSpec(case["family"], **case["spec"]))
        got = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ck.iterdir()) if p.is_file()}
        assert got == case["checkpoint_sha256"], (
            f"the synthetic {name} checkpoint is not the one tests/data/ref/{name}.gguf was made from; "
            "regenerate the references: python scripts/make_reference_ggufs.py --llama-cpp <llama.cpp tree>")
        layout = LAYOUT[_options(case)]
        if case["family"] in DROPS_MTP:
            layout = "trunk-only"
        out = convert(ck, outfile=root / f"{name}.gguf", outtype=MANIFEST["outtype"], layout=layout,
                      mtp_type=MANIFEST["outtype"], progress=False, force=True)
        return GGUFModel(out.path), GGUFModel(REF / f"{name}.gguf")

    return make


def _value(kv) -> object:  # type: ignore[no-untyped-def]
    v = kv.scalar()
    if isinstance(v, float):
        return float(np.float32(v))
    if isinstance(v, list):
        return [float(np.float32(x)) if isinstance(x, float) else x for x in v]
    return v


@pytest.mark.parametrize("name", CASES)
def test_metadata_key_for_key(ours, name: str) -> None:
    mine, ref = ours(name)
    keys = lambda m: {k for k in m.kv if not k.startswith("general.")}  # noqa: E731
    assert sorted(keys(ref) - keys(mine)) == [], f"{name}: keys llama.cpp writes and we do not"
    extra = EXTRA_KEYS.get(name, set())
    assert extra <= keys(mine)
    assert sorted(keys(mine) - keys(ref) - extra) == [], f"{name}: keys we write and llama.cpp does not"
    diffs = []
    for k in sorted(keys(ref)):
        a, b = mine.kv[k], ref.kv[k]
        if (a.vtype, a.item_type) != (b.vtype, b.item_type) or _value(a) != _value(b):
            show = lambda kv: str(_value(kv))[:80]  # noqa: E731
            diffs.append(f"{k}: ours {a.vtype.name}/{getattr(a.item_type, 'name', '-')} {show(a)} "
                         f"vs llama.cpp {b.vtype.name}/{getattr(b.item_type, 'name', '-')} {show(b)}")
    assert diffs == [], f"{name}:\n" + "\n".join(diffs)


@pytest.mark.parametrize("name", CASES)
def test_tensors_one_for_one(ours, name: str) -> None:
    mine, ref = ours(name)
    left_out = set()
    for t in ref.tensors:
        twin = next((v for s, v in SHARED_COPIES.items() if t.endswith(s)), None)
        if twin is not None and t not in mine.tensors and twin in ref.tensors and \
                ref.tensors[t].file.read_tensor_bytes(t) == ref.tensors[twin].file.read_tensor_bytes(twin):
            left_out.add(t)  # our documented choice, checked to hold: identical bytes
    n_trunk = int(ref.get(f"{ref.arch}.block_count")) - int(ref.get(f"{ref.arch}.nextn_predict_layers") or 0)
    if MANIFEST["cases"][name]["family"] in SPLIT_QKV_HEADS:
        for t in list(ref.tensors):
            b = t.split(".")
            if b[0] == "blk" and int(b[1]) >= n_trunk and b[2] in ("attn_q", "attn_k", "attn_v"):
                left_out.add(t)
                assert f"blk.{b[1]}.attn_qkv.weight" in mine.tensors, t
    assert sorted(set(ref.tensors) - set(mine.tensors) - left_out) == [], f"{name}: tensors we do not write"
    fused = {t for t in mine.tensors if MANIFEST["cases"][name]["family"] in SPLIT_QKV_HEADS and t.endswith("attn_qkv.weight")
             and int(t.split(".")[1]) >= n_trunk}
    assert sorted(set(mine.tensors) - set(ref.tensors) - fused) == [], f"{name}: tensors llama.cpp does not write"
    diffs = []
    for t in sorted(set(mine.tensors) - fused):
        a, b = mine.tensors[t].info, ref.tensors[t].info
        if ggml_shape(a.shape) != ggml_shape(b.shape):
            diffs.append(f"{t}: shape {list(a.shape)} vs {list(b.shape)}")
        elif a.ggml_type != b.ggml_type:
            diffs.append(f"{t}: type {a.type_name} vs {b.type_name}")
        elif (x := mine.tensors[t].file.read_tensor_bytes(t)) != (y := ref.tensors[t].file.read_tensor_bytes(t)):
            if t.endswith(COMPUTED) and a.type_name == "F32":
                ulps = np.abs(np.frombuffer(x, np.int32).astype(np.int64) - np.frombuffer(y, np.int32))
                if ulps.max() <= 1:
                    continue
            diffs.append(f"{t}: bytes differ ({a.type_name} {list(a.shape)})")
    assert diffs == [], f"{name}:\n" + "\n".join(diffs)


def test_references_are_what_the_manifest_says() -> None:
    """The committed files are the converter's output recorded in the manifest (not edited by hand)."""
    assert MANIFEST["llama_cpp_commit"] != "unknown" and MANIFEST["outtype"] == "q8_0"
    for name, case in MANIFEST["cases"].items():
        assert hashlib.sha256((REF / f"{name}.gguf").read_bytes()).hexdigest() == case["gguf_sha256"], name
    # every family the vendored converter handles is compared (Kimi-K2 needs tiktoken and remote code there)
    assert {c["family"] for c in MANIFEST["cases"].values()} == {
        "qwen35", "qwen35moe", "qwen3next", "glm4moe", "deepseek2", "glm47flash", "mimo2", "step35"}
