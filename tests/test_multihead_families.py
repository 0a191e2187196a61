"""The multi-head MTP families, ``mimo2`` (MiMo-V2) and ``step35`` (Step-3.5), from synthetic checkpoints with three
heads: every layout converts and loads in llama.cpp, values match the source, per-layer arrays cover the MTP
blocks, surgery round-trips (split sets too), and chained speculative decoding is lossless with every pairing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from gguf_mtp import convert, inspect_file, surgery
from gguf_mtp.checkpoint.folder import Checkpoint
from gguf_mtp.errors import GgufMtpError, MissingTensorError
from gguf_mtp.ggufio.reader import GGUFFile
from gguf_mtp.layout import Layout
from gguf_mtp.runtime import MTPSession
from gguf_mtp.runtime.llama import Context, Model
from tests import helpers
from tests.lossless import Reference
from tests.helpers import whole
from tests.synthetic import SyntheticSpec, write_checkpoint

from .conftest import MULTIHEAD_FAMILIES as FAMILIES
from .mtp_smoke import assert_head_drafts
from .test_surgery import same_model
from .test_tensor_values import gguf_values

S = SyntheticSpec()
L, NX = S.layers, S.mtp_heads
PROMPT = "The quick brown fox jumps over the lazy dog. " * 3
#: per-layer arrays (key suffix -> values for the 4 trunk layers + 3 heads of the synthetic checkpoints)
ARRAYS = {
    "mimo2": {"attention.head_count_kv": [1, 2, 1, 2, 2, 2, 2],
              "attention.sliding_window_pattern": [0, 1, 0, 1, 1, 1, 1]},
    "step35": {"attention.head_count": [4, 8, 4, 8, 4, 8, 4], "attention.head_count_kv": [1, 2, 1, 2, 1, 2, 1],
               "attention.sliding_window_pattern": [False, True, False, True, False, True, False],
               "swiglu_clamp_exp": [0, 7, 0, 7, 0, 0, 0], "swiglu_clamp_shexp": [0, 16, 16, 16, 0, 0, 0]},
}


def greedy(path: Path, n: int = 12) -> list[int]:
    with Model(path, load_mtp=True) as m, Context(m) as ctx:
        return helpers.greedy(ctx, m.tokenize(PROMPT), n)


@pytest.mark.parametrize("family", FAMILIES)
def test_layouts_convert_and_load(converted, family: str) -> None:
    for layout in ("bundled", "trunk-only", "mtp-only", "head-only"):
        assert inspect_file(converted(family, layout)).layout == Layout(layout)
    assert greedy(converted(family, "bundled")) == greedy(converted(family, "trunk-only"))
    for layout in ("bundled", "mtp-only"):
        with Model(converted(family, layout), load_mtp=True) as m:
            assert m.n_nextn == NX
            with Context(m, mtp=True) as ctx:
                assert_head_drafts(m, ctx)
    with pytest.raises(GgufMtpError, match="token_embd"):  # a head-only sidecar needs its target
        Model(converted(family, "head-only"), load_mtp=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_metadata_and_per_layer_arrays(converted, family: str) -> None:
    files = {lay: GGUFFile(converted(family, lay)) for lay in ("bundled", "trunk-only", "mtp-only", "head-only")}
    for lay, f in files.items():
        n_mtp = 0 if lay == "trunk-only" else NX
        assert f.get(f"{family}.block_count") == L + n_mtp
        assert f.get(f"{family}.nextn_predict_layers") == (n_mtp or None)
        for key, want in ARRAYS[family].items():
            assert list(f.get(f"{family}.{key}")) == want[: L + n_mtp], (lay, key)
    b = files["bundled"]
    assert set(b.tensors) == set(files["trunk-only"].tensors) | set(files["head-only"].tensors)
    assert set(files["mtp-only"].tensors) == set(files["head-only"].tensors) | {
        "token_embd.weight", "output_norm.weight", "output.weight"}
    for k in range(NX):
        assert f"blk.{L + k}.nextn.eh_proj.weight" in b.tensors
    if family == "mimo2":
        assert b.get("tokenizer.ggml.pre") == "qwen2"
        assert (b.get("mimo2.attention.key_length"), b.get("mimo2.attention.value_length")) == (S.head_dim, S.v_dim)
        assert b.get("mimo2.rope.dimension_count") == S.head_dim // 2
        assert b.get("mimo2.attention.value_scale") == pytest.approx(0.707)
        assert b.get("mimo2.rope.freq_base_swa") == 10000.0 and b.get("mimo2.attention.sliding_window") == 8
        # every head: fused attention (the MTP graph asserts it), dense FFN, layer_output_norm
        for k in range(NX):
            assert {f"blk.{L + k}.{t}.weight" for t in ("attn_qkv", "ffn_gate", "layer_output_norm", "attn_sinks")} \
                <= set(b.tensors)
        assert "blk.0.attn_q.weight" in b.tensors  # a split trunk stays split
    else:
        assert b.get("tokenizer.ggml.pre") == "deepseek-v3"
        assert b.get("step35.rope.dimension_count") is None  # llama.cpp derives head_dim and head_dim / 2
        assert (b.get("step35.rope.freq_base"), b.get("step35.rope.freq_base_swa")) == (5e6, 1e4)
        assert b.get("step35.expert_gating_func") == 2 and b.get("step35.expert_weights_norm") is True
        assert b.get("step35.expert_shared_feed_forward_length") == S.shared_intermediate


def test_mimo2_values(converted, checkpoint) -> None:
    f = GGUFFile(converted("mimo2", "bundled", "f32", mtp_type="f32"))
    ck = Checkpoint.open(checkpoint("mimo2"))
    g = lambda n: whole(ck.tensor(n))  # noqa: E731
    h = lambda k, n: g(f"model.mtp.layers.{k}.{n}")  # noqa: E731
    qkv = lambda k: np.concatenate([h(k, f"self_attn.{p}_proj.weight") for p in "qkv"])  # noqa: E731
    experts = lambda p: np.stack([g(f"model.layers.1.mlp.experts.{e}.{p}.weight") for e in range(S.experts)])  # noqa: E731
    want = {
        "token_embd.weight": g("model.embed_tokens.weight"), "output_norm.weight": g("model.norm.weight"),
        "output.weight": g("lm_head.weight"), "blk.0.attn_q.weight": g("model.layers.0.self_attn.q_proj.weight"),
        "blk.1.attn_sinks.weight": g("model.layers.1.self_attn.attention_sink_bias"),
        "blk.1.exp_probs_b.bias": g("model.layers.1.mlp.gate.e_score_correction_bias"),
        "blk.1.ffn_gate_inp.weight": g("model.layers.1.mlp.gate.weight"),
        "blk.1.ffn_down_exps.weight": experts("down_proj"),
        "blk.4.attn_qkv.weight": qkv(0), "blk.6.attn_qkv.weight": qkv(2),
        "blk.5.nextn.eh_proj.weight": h(1, "eh_proj.weight"), "blk.6.nextn.enorm.weight": h(2, "enorm.weight"),
        "blk.4.nextn.hnorm.weight": h(0, "hnorm.weight"),
        "blk.5.layer_output_norm.weight": h(1, "final_layernorm.weight"),
        "blk.6.ffn_down.weight": h(2, "mlp.down_proj.weight"),
        "blk.4.attn_output.weight": h(0, "self_attn.o_proj.weight"),
    }
    for name, value in want.items():
        np.testing.assert_array_equal(gguf_values(f, name), value, err_msg=name)
    fused = GGUFFile(converted("mimo2", "bundled", "f32", mtp_type="f32", fused_qkv=True))
    ckf = Checkpoint.open(checkpoint("mimo2", fused_qkv=True))
    for il, hf in ((0, "model.layers.0."), (5, "model.mtp.layers.1.")):
        np.testing.assert_array_equal(gguf_values(fused, f"blk.{il}.attn_qkv.weight"),
                                      whole(ckf.tensor(hf + "self_attn.qkv_proj.weight")))


def test_step35_values(converted, checkpoint) -> None:
    f = GGUFFile(converted("step35", "bundled", "f32", mtp_type="f32"))
    ck = Checkpoint.open(checkpoint("step35"))
    g = lambda n: whole(ck.tensor(n))  # noqa: E731
    want = {  # every *norm.weight is zero-centred in the checkpoint: + 1
        "output_norm.weight": g("model.norm.weight") + 1,
        "blk.0.attn_norm.weight": g("model.layers.0.input_layernorm.weight") + 1,
        "blk.1.attn_q_norm.weight": g("model.layers.1.self_attn.q_norm.weight") + 1,
        "blk.1.attn_gate.weight": g("model.layers.1.self_attn.g_proj.weight"),
        "blk.1.attn_q.weight": g("model.layers.1.self_attn.q_proj.weight"),
        "blk.1.ffn_gate_exps.weight": g("model.layers.1.moe.gate_proj.weight"),
        "blk.2.ffn_down_exps.weight": g("model.layers.2.moe.down_proj.weight"),
        "blk.1.exp_probs_b.bias": g("model.layers.1.moe.router_bias"),
        "blk.1.ffn_up_shexp.weight": g("model.layers.1.share_expert.up_proj.weight"),
        "blk.4.nextn.enorm.weight": g("model.layers.4.enorm.weight") + 1,
        "blk.6.nextn.hnorm.weight": g("model.layers.6.hnorm.weight") + 1,
        "blk.5.nextn.shared_head_norm.weight": g("model.layers.5.transformer.shared_head.norm.weight") + 1,
        "blk.5.nextn.shared_head_head.weight": g("model.layers.5.transformer.shared_head.output.weight"),
        "blk.5.attn_k_norm.weight": g("model.layers.5.self_attn.k_norm.weight") + 1,
        "blk.6.ffn_gate_shexp.weight": g("model.layers.6.share_expert.gate_proj.weight"),
    }
    for name, value in want.items():
        np.testing.assert_array_equal(gguf_values(f, name), value.astype(np.float32), err_msg=name)
    # head 0's shared head is byte-identical to lm_head: left out, llama.cpp uses output.weight
    assert "blk.4.nextn.shared_head_head.weight" not in f.tensors
    assert f.tensors["blk.5.attn_q.weight"].shape == (S.hidden, 2 * S.heads * S.head_dim)  # a sliding-window head


@pytest.mark.parametrize("family", FAMILIES)
def test_tensor_types(converted, family: str) -> None:
    f = GGUFFile(converted(family, "bundled", "bf16"))
    for name, t in f.tensors.items():
        head = name.startswith(tuple(f"blk.{L + k}." for k in range(NX)))
        if len(t.shape) == 1 or name.endswith(("_norm.weight", "ffn_gate_inp.weight")) or not name.endswith(".weight"):
            assert T(t.ggml_type) == T.F32, name
        else:
            assert T(t.ggml_type) == (T.Q8_0 if head else T.BF16), name


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("head_only", [False, True])
def test_surgery_round_trip(converted, tmp_path: Path, family: str, head_only: bool) -> None:
    x = converted(family, "bundled")
    side = surgery.extract(x, tmp_path / "side.gguf", head_only=head_only, progress=False).paths[0]
    trunk = surgery.strip(x, tmp_path / "trunk.gguf", progress=False).paths[0]
    same_model(converted(family, "trunk-only"), trunk)
    same_model(converted(family, "head-only" if head_only else "mtp-only"), side)
    back = surgery.graft(side, trunk, tmp_path / "back.gguf", progress=False).paths[0]
    same_model(x, back)
    same_model(x, surgery.graft(converted(family, "head-only" if head_only else "mtp-only"),
                                converted(family, "trunk-only"), tmp_path / "conv.gguf", progress=False).paths[0])
    assert greedy(back) == greedy(x)


@pytest.mark.parametrize("family", FAMILIES)
def test_split_sets(converted, tmp_path: Path, family: str) -> None:
    x = converted(family, "bundled")
    parts = helpers.reshard(x, tmp_path / "x.gguf", shards=3)
    side = surgery.extract(parts[2], tmp_path / "side.gguf", head_only=True, progress=False).paths[0]
    trunk = surgery.strip(parts[1], tmp_path / "trunk.gguf", progress=False).paths
    assert len(trunk) >= 2
    back = surgery.graft(side, trunk[0], tmp_path / "back.gguf", progress=False).paths
    same_model(x, back[0])
    assert greedy(back[0]) == greedy(x)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("trunk_scale", [0.0, 0.5])
def test_chained_heads_are_lossless(converted, family: str, trunk_scale: float) -> None:
    """Greedy output with the heads equals plain decoding for every pairing and draft length (one head per draft
    step). With trunk_scale=0 every head is an oracle (100% acceptance); 0.5 mixes accepts and rejects."""
    kw = {"oracle_head": True, "trunk_scale": trunk_scale}
    bundled, trunk = converted(family, "bundled", **kw), converted(family, "trunk-only", **kw)
    ref = Reference(lambda: MTPSession(bundled, mtp=False, n_ctx=512), lambda s: s.generate(PROMPT, max_tokens=32))
    pairings = [(bundled, "auto"), (trunk, converted(family, "mtp-only", **kw)),
                (trunk, converted(family, "head-only", **kw))]
    for model, mtp in pairings:
        for k in (1, 3, 4):
            with MTPSession(model, mtp=mtp, n_ctx=512, n_draft=k) as s:
                assert s.engine.chain and s.engine.n_heads == NX and s.engine.n_draft_max == min(k, NX)
                g = s.generate(PROMPT, max_tokens=32)
            ref.check(g, f"{family} trunk_scale={trunk_scale} {model.name} mtp={getattr(mtp, 'name', mtp)} k={k}")
            assert g.stats.drafted > 0 and len(g.stats.drafted_at) == min(k, NX)
            if trunk_scale == 0.0:
                assert g.stats.accepted == g.stats.drafted, (model.name, mtp, k)
            elif k == 3:
                assert 0 < g.stats.accepted < g.stats.drafted


def test_missing_heads_are_refused(tmp_path: Path) -> None:
    """The config (or, for MiMo, the model family) promises three heads; weights with fewer are refused, since
    llama.cpp loads every declared head or none."""
    mimo = write_checkpoint(tmp_path / "mimo", SyntheticSpec("mimo2", mtp_heads=1))
    step = write_checkpoint(tmp_path / "step",
                            SyntheticSpec("step35", mtp_heads=2, extra={"num_nextn_predict_layers": 3}))
    for src, have in ((mimo, 1), (step, 2)):
        for layout in ("bundled", "mtp-only"):
            with pytest.raises(MissingTensorError, match=f"promises 3 MTP heads but the weights hold {have}"):
                convert(src, outfile=tmp_path / "x.gguf", layout=layout, progress=False)
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpoint_without_heads(checkpoint, tmp_path: Path, family: str) -> None:
    src = checkpoint(family, mtp=False)
    r = convert(src, outfile=tmp_path / "t.gguf", outtype="q8_0", progress=False)
    assert r.layout == Layout.TRUNK_ONLY and r.notes
    with Model(r.path) as m, Context(m) as ctx:
        assert helpers.greedy(ctx, m.tokenize(PROMPT), 4)
    with pytest.raises(MissingTensorError, match="no MTP weights"):
        convert(src, outfile=tmp_path / "h.gguf", layout="mtp-only", progress=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_quantize_pins_every_head(converted, tmp_path: Path, family: str) -> None:
    from gguf_mtp.quantize import quantize_model

    out = tmp_path / "q.gguf"
    quantize_model(converted(family, "bundled", "f16"), out, "Q4_0")
    rep = inspect_file(out)
    assert rep.layout == Layout.BUNDLED and rep.file_type == "Q4_0"
    heads = {t.name.split(".")[1] for t in rep.mtp_tensors}
    assert heads == {str(L + k) for k in range(NX)}
    assert {t.type for t in rep.mtp_tensors if len(t.shape) >= 2 and "gate_inp" not in t.name} == {"Q8_0"}
    ref = Reference(lambda: MTPSession(out, mtp=False, n_ctx=512), lambda s: s.generate(PROMPT, max_tokens=16))
    with MTPSession(out, n_ctx=512, n_draft=3) as s:
        ref.check(s.generate(PROMPT, max_tokens=16), f"{family} Q4_0 k=3")


def _rename_tensors(folder: Path, rename) -> None:  # type: ignore[no-untyped-def]
    """Rewrite a checkpoint's safetensors headers with ``rename(name)`` applied (data untouched)."""
    import json
    import struct

    for f in folder.glob("*.safetensors"):
        raw = f.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = {(k if k == "__metadata__" else rename(k)): v for k, v in json.loads(raw[8:8 + n]).items()}
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        f.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    index = folder / "model.safetensors.index.json"
    if index.exists():
        j = json.loads(index.read_text())
        j["weight_map"] = {rename(k): v for k, v in j["weight_map"].items()}
        index.write_text(json.dumps(j))


@pytest.mark.parametrize("family,spelling", [
    ("mimo2", {"pre_mlp_layernorm": "post_attention_layernorm"}),   # SGLang's name for the heads' FFN norm
    ("step35", {"transformer.shared_head.output": "shared_head.head",  # the names llama.cpp and vLLM rename to
                "transformer.shared_head.norm": "shared_head.norm"}),
])
def test_every_real_spelling_of_head_tensors(checkpoint, converted, tmp_path: Path, family: str, spelling) -> None:
    """Each spelling that public loaders read converts to the same file as the released one."""
    import shutil

    src = tmp_path / "ck"
    shutil.copytree(checkpoint(family), src)
    seen = []

    def rename(name: str) -> str:
        for a, b in spelling.items():
            if a in name and (".mtp." in name or family == "step35"):
                seen.append(name)
                return name.replace(a, b)
        return name

    _rename_tensors(src, rename)
    assert seen
    out = convert(src, outfile=tmp_path / "x.gguf", outtype="q8_0", progress=False).path
    a, b = GGUFFile(out), GGUFFile(converted(family, "bundled"))
    assert list(a.tensors) == list(b.tensors)
    assert all(a.read_tensor_bytes(n) == b.read_tensor_bytes(n) for n in a.tensors)
    assert {k for k in a.kv if not k.startswith("general.")} == {k for k in b.kv if not k.startswith("general.")}
