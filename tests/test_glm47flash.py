"""GLM-4.7-Flash (``Glm4MoeLiteForCausalLM`` -> ``deepseek2``) from a synthetic checkpoint with its real config keys:
every layout converts and loads in llama.cpp, metadata and values match the source (MLA split, GLM tokenizer),
surgery round-trips, and speculative decoding with its MTP layer is lossless (100% acceptance with an oracle head)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gguf_mtp import convert, inspect_file, surgery
from gguf_mtp.checkpoint.folder import Checkpoint
from gguf_mtp.errors import GgufMtpError
from gguf_mtp.ggufio.reader import GGUFFile
from gguf_mtp.layout import Layout
from gguf_mtp.runtime import MTPSession
from gguf_mtp.runtime.llama import Context, Model
from tests import helpers
from tests.lossless import Reference
from tests.helpers import whole
from tests.synthetic import SyntheticSpec

from .mtp_smoke import assert_head_drafts
from .test_surgery import same_model
from .test_tensor_values import gguf_values

FAMILY = "glm47flash"
S = SyntheticSpec()
L = S.layers
PROMPT = "The quick brown fox jumps over the lazy dog. " * 3
LAYOUTS = ("bundled", "trunk-only", "mtp-only", "head-only")


def greedy(path: Path, n: int = 12) -> list[int]:
    with Model(path, load_mtp=True) as m, Context(m) as ctx:
        return helpers.greedy(ctx, m.tokenize(PROMPT), n)


def test_layouts_convert_and_load(converted) -> None:
    for layout in LAYOUTS:
        assert inspect_file(converted(FAMILY, layout)).layout == Layout(layout)
    assert greedy(converted(FAMILY, "bundled")) == greedy(converted(FAMILY, "trunk-only"))
    for layout in ("bundled", "mtp-only"):
        with Model(converted(FAMILY, layout), load_mtp=True) as m:
            assert m.n_nextn == 1
            with Context(m, mtp=True) as ctx:
                assert_head_drafts(m, ctx)
    with pytest.raises(GgufMtpError, match="token_embd"):  # a head-only sidecar needs its target
        Model(converted(FAMILY, "head-only"), load_mtp=True)


def test_metadata(converted) -> None:
    files = {lay: GGUFFile(converted(FAMILY, lay)) for lay in LAYOUTS}
    for lay, f in files.items():
        n_mtp = 0 if lay == "trunk-only" else 1
        assert f.architecture == "deepseek2"
        assert f.get("deepseek2.block_count") == L + n_mtp
        assert f.get("deepseek2.nextn_predict_layers") == (n_mtp or None)
    b = files["bundled"]
    assert set(b.tensors) == set(files["trunk-only"].tensors) | set(files["head-only"].tensors)
    assert set(files["mtp-only"].tensors) == set(files["head-only"].tensors) | {
        "token_embd.weight", "output_norm.weight", "output.weight"}
    want = {"attention.head_count_kv": 1, "attention.q_lora_rank": S.q_lora, "attention.kv_lora_rank": S.kv_lora,
            "attention.key_length": S.kv_lora + S.qk_rope, "attention.value_length": S.kv_lora,
            "attention.key_length_mla": S.qk_nope + S.qk_rope, "attention.value_length_mla": S.v_dim,
            "rope.dimension_count": S.qk_rope, "rope.freq_base": 1e6, "expert_gating_func": 2,
            "leading_dense_block_count": 1, "expert_shared_count": 1, "expert_weights_norm": True,
            "context_length": 202752}
    for key, value in want.items():
        assert b.get(f"deepseek2.{key}") == pytest.approx(value), key
    assert b.get("deepseek2.expert_weights_scale") == pytest.approx(1.8)
    assert b.get("deepseek2.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert b.get("deepseek2.rope.scaling.type") is None  # no YaRN in GLM-4.7-Flash
    assert b.get("tokenizer.ggml.pre") == "glm4"
    toks = b.get("tokenizer.ggml.tokens")
    assert toks[b.get("tokenizer.ggml.eos_token_id")] == "<|endoftext|>"
    for layer in (1, L):  # MoE trunk layer and the MTP layer: split experts, shared expert, router bias
        assert {f"blk.{layer}.{t}" for t in ("ffn_gate_exps.weight", "ffn_gate_shexp.weight", "exp_probs_b.bias",
                                              "attn_k_b.weight", "attn_v_b.weight", "attn_q_a.weight")
                } <= set(b.tensors)
    assert "blk.0.ffn_gate.weight" in b.tensors and f"blk.{L}.nextn.eh_proj.weight" in b.tensors


def test_transformers5_config_spellings(checkpoint, tmp_path: Path) -> None:
    """``rope_parameters`` instead of a top-level ``rope_theta``, and ``mlp_layer_types`` instead of
    ``first_k_dense_replace`` (transformers' Glm4MoeLiteConfig), give the same metadata."""
    src = Path(shutil.copytree(checkpoint(FAMILY), tmp_path / "ck"))
    cfg = json.loads((src / "config.json").read_text())
    for key in ("rope_theta", "rope_scaling", "first_k_dense_replace"):
        cfg.pop(key)
    cfg["rope_parameters"] = {"rope_theta": 1000000, "rope_type": "default"}
    cfg["mlp_layer_types"] = ["dense"] + ["sparse"] * (L - 1)
    (src / "config.json").write_text(json.dumps(cfg))
    a = GGUFFile(convert(checkpoint(FAMILY), outfile=tmp_path / "a.gguf", outtype="f32", progress=False).path)
    b = GGUFFile(convert(src, outfile=tmp_path / "b.gguf", outtype="f32", progress=False).path)
    for key in ("deepseek2.rope.freq_base", "deepseek2.leading_dense_block_count"):
        assert a.get(key) == b.get(key) is not None, key
    assert set(a.tensors) == set(b.tensors)


def test_values(converted, checkpoint) -> None:
    f = GGUFFile(converted(FAMILY, "bundled", "f32", mtp_type="f32"))
    ck = Checkpoint.open(checkpoint(FAMILY))
    g = lambda n: whole(ck.tensor(n))  # noqa: E731
    experts = lambda il, p: np.stack([g(f"model.layers.{il}.mlp.experts.{e}.{p}.weight")  # noqa: E731
                                      for e in range(S.experts)])
    m = f"model.layers.{L}."
    want = {
        "token_embd.weight": g("model.embed_tokens.weight"), "output.weight": g("lm_head.weight"),
        "output_norm.weight": g("model.norm.weight"),
        "blk.0.ffn_up.weight": g("model.layers.0.mlp.up_proj.weight"),
        "blk.1.attn_q_a.weight": g("model.layers.1.self_attn.q_a_proj.weight"),
        "blk.1.attn_kv_a_mqa.weight": g("model.layers.1.self_attn.kv_a_proj_with_mqa.weight"),
        "blk.1.exp_probs_b.bias": g("model.layers.1.mlp.gate.e_score_correction_bias"),
        "blk.2.ffn_down_exps.weight": experts(2, "down_proj"),
        f"blk.{L}.nextn.eh_proj.weight": g(m + "eh_proj.weight"), f"blk.{L}.nextn.enorm.weight": g(m + "enorm.weight"),
        f"blk.{L}.nextn.hnorm.weight": g(m + "hnorm.weight"),
        f"blk.{L}.nextn.shared_head_norm.weight": g(m + "shared_head.norm.weight"),
        f"blk.{L}.attn_q_b.weight": g(m + "self_attn.q_b_proj.weight"),
        f"blk.{L}.ffn_gate_exps.weight": experts(L, "gate_proj"),
        f"blk.{L}.ffn_up_shexp.weight": g(m + "mlp.shared_experts.up_proj.weight"),
    }
    for name, value in want.items():
        np.testing.assert_array_equal(gguf_values(f, name), value.astype(np.float32), err_msg=name)
    nh, dn, dv = S.heads, S.qk_nope, S.v_dim
    w = g(m + "self_attn.kv_b_proj.weight").reshape(nh, dn + dv, S.kv_lora)
    np.testing.assert_array_equal(gguf_values(f, f"blk.{L}.attn_k_b.weight"), w[:, :dn].transpose(0, 2, 1))
    np.testing.assert_array_equal(gguf_values(f, f"blk.{L}.attn_v_b.weight"), w[:, dn:])


@pytest.mark.parametrize("head_only", [False, True])
def test_surgery_round_trip(converted, tmp_path: Path, head_only: bool) -> None:
    x = converted(FAMILY, "bundled")
    side = surgery.extract(x, tmp_path / "side.gguf", head_only=head_only, progress=False).paths[0]
    trunk = surgery.strip(x, tmp_path / "trunk.gguf", progress=False).paths[0]
    same_model(converted(FAMILY, "trunk-only"), trunk)
    same_model(converted(FAMILY, "head-only" if head_only else "mtp-only"), side)
    back = surgery.graft(side, trunk, tmp_path / "back.gguf", progress=False).paths[0]
    same_model(x, back)
    assert greedy(back) == greedy(x)


@pytest.mark.parametrize("trunk_scale", [0.0, 0.5])
def test_speculative_decoding_is_lossless(converted, trunk_scale: float) -> None:
    """Greedy output with the head equals plain decoding with every pairing; with trunk_scale=0 the head is an
    oracle (100% acceptance: the MTP layer is mapped right), 0.5 mixes accepts and rejects."""
    kw = {"oracle_head": True, "trunk_scale": trunk_scale}
    bundled, trunk = converted(FAMILY, "bundled", **kw), converted(FAMILY, "trunk-only", **kw)
    ref = Reference(lambda: MTPSession(bundled, mtp=False, n_ctx=512), lambda s: s.generate(PROMPT, max_tokens=32))
    for model, mtp in ((bundled, "auto"), (trunk, converted(FAMILY, "mtp-only", **kw)),
                       (trunk, converted(FAMILY, "head-only", **kw))):
        for k in (1, 3):
            with MTPSession(model, mtp=mtp, n_ctx=512, n_draft=k) as s:
                g = s.generate(PROMPT, max_tokens=32)
            ref.check(g, f"{FAMILY} trunk_scale={trunk_scale} {model.name} mtp={getattr(mtp, 'name', mtp)} k={k}")
            assert g.stats.drafted > 0
            if trunk_scale == 0.0:
                assert g.stats.accepted == g.stats.drafted, (model.name, mtp, k)
            elif k == 3:
                assert 0 < g.stats.accepted < g.stats.drafted


def test_checkpoint_without_head(checkpoint, tmp_path: Path) -> None:
    """No MTP weights: bundled falls back to trunk-only with a note; a sidecar is refused with a clear message."""
    src = checkpoint(FAMILY, mtp=False)
    r = convert(src, outfile=tmp_path / "t.gguf", progress=False)
    assert r.layout == Layout.TRUNK_ONLY and any("no MTP weights" in n for n in r.notes)
    with pytest.raises(GgufMtpError, match="num_nextn_predict_layers=1"):
        convert(src, outfile=tmp_path / "m.gguf", layout="mtp-only", progress=False)
