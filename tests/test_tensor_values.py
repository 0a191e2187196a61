"""Tensor-level checks: names, shapes and types are what llama.cpp expects, and values equal the source
weights after the documented transforms (bit-exact for f32/f16/bf16, within Q8_0 error for q8_0).

The expected values are computed here independently of the converter (index formulas, not its code),
and GGUF data is decoded with gguf-py's own dequantizer."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as gguf_dequantize

from gguf_mtp.checkpoint.folder import Checkpoint
from gguf_mtp.ggufio.reader import GGUFFile
from tests.helpers import whole
from tests.synthetic import SyntheticSpec

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it

S = SyntheticSpec()  # fixture sizes
H, NK, NV, DH, KC = S.hidden, S.lin_k_heads, S.lin_v_heads, S.lin_head_dim, S.conv_kernel
R = NV // NK


def gguf_values(f: GGUFFile, name: str) -> np.ndarray:
    t = f.tensors[name]
    raw = np.frombuffer(f.read_tensor_bytes(name), dtype=np.uint8)
    return gguf_dequantize(raw, T(t.ggml_type)).reshape(tuple(reversed(t.shape))).astype(np.float32)


def tiled_index(n_heads_total: int, hdim: int) -> np.ndarray:
    """Row index: new head p holds old head (p % NK) * R + p // NK."""
    idx = []
    for p in range(n_heads_total):
        old = (p % NK) * R + p // NK
        idx.extend(range(old * hdim, old * hdim + hdim))
    return np.array(idx)


def expected_qwen35(ck: Checkpoint, pre: str) -> dict[str, np.ndarray]:
    g = lambda n: whole(ck.tensor(n))  # noqa: E731
    key_dim = NK * DH
    la = f"{pre}layers.0.linear_attn."
    qkv = g(la + "in_proj_qkv.weight")
    v_rows = key_dim * 2 + tiled_index(NV, DH)
    conv = g(la + "conv1d.weight").reshape(-1, KC)
    return {
        "token_embd.weight": g(pre + "embed_tokens.weight"),
        "output_norm.weight": g(pre + "norm.weight") + 1,
        "output.weight": g("lm_head.weight"),
        "blk.0.attn_norm.weight": g(f"{pre}layers.0.input_layernorm.weight") + 1,
        "blk.0.attn_qkv.weight": np.concatenate([qkv[:2 * key_dim], qkv[v_rows]]),
        "blk.0.attn_gate.weight": g(la + "in_proj_z.weight")[tiled_index(NV, DH)],
        "blk.0.ssm_beta.weight": g(la + "in_proj_b.weight")[tiled_index(NV, 1)],
        "blk.0.ssm_alpha.weight": g(la + "in_proj_a.weight")[tiled_index(NV, 1)],
        "blk.0.ssm_conv1d.weight": np.concatenate([conv[:2 * key_dim], conv[v_rows]]),
        "blk.0.ssm_a": -np.exp(g(la + "A_log"))[tiled_index(NV, 1)],
        "blk.0.ssm_dt.bias": g(la + "dt_bias")[tiled_index(NV, 1)],
        "blk.0.ssm_norm.weight": g(la + "norm.weight"),  # gated norm: no +1
        "blk.0.ssm_out.weight": g(la + "out_proj.weight")[:, tiled_index(NV, DH)],
        "blk.3.attn_q.weight": g(f"{pre}layers.3.self_attn.q_proj.weight"),
        "blk.3.attn_q_norm.weight": g(f"{pre}layers.3.self_attn.q_norm.weight") + 1,
        "blk.3.post_attention_norm.weight": g(f"{pre}layers.3.post_attention_layernorm.weight") + 1,
        "blk.4.nextn.eh_proj.weight": g("mtp.fc.weight"),
        "blk.4.nextn.enorm.weight": g("mtp.pre_fc_norm_embedding.weight") + 1,
        "blk.4.nextn.hnorm.weight": g("mtp.pre_fc_norm_hidden.weight") + 1,
        "blk.4.nextn.shared_head_norm.weight": g("mtp.norm.weight") + 1,
        "blk.4.attn_k.weight": g("mtp.layers.0.self_attn.k_proj.weight"),
        "blk.4.attn_k_norm.weight": g("mtp.layers.0.self_attn.k_norm.weight") + 1,
    }


def check(f: GGUFFile, expected: dict[str, np.ndarray], trunk_type: T, mtp_type: T) -> None:
    for name, want in expected.items():
        t = f.tensors[name]
        is_mtp = name.startswith("blk.4.")
        one_d = want.ndim == 1 or name.endswith(("_norm.weight", "ssm_conv1d.weight")) or not name.endswith(".weight")
        typ = T.F32 if one_d else (mtp_type if is_mtp else trunk_type)
        assert T(t.ggml_type) == typ, f"{name}: {T(t.ggml_type).name} != {typ.name}"
        assert tuple(reversed(t.shape)) == want.shape, name
        got = gguf_values(f, name)
        if typ == T.F32:
            np.testing.assert_array_equal(got, want.astype(np.float32), err_msg=name)
        elif typ == T.F16:
            np.testing.assert_array_equal(got, want.astype(np.float16).astype(np.float32), err_msg=name)
        elif typ == T.BF16:
            np.testing.assert_array_equal(got, want, err_msg=name)  # bf16 source -> bf16: exact
        else:  # Q8_0
            blocks = want.reshape(-1, 32)
            step = np.abs(blocks).max(axis=1, keepdims=True) / 127
            err = np.abs(got.reshape(-1, 32) - blocks)
            # half a step from rounding, plus up to 127 * d * 2**-11 from storing the scale d as fp16
            assert (err <= step * (0.5 + 127 * 2.0**-11) + 1e-7).all(), f"{name}: Q8_0 error {err.max()} too large"


@pytest.mark.parametrize("outtype,trunk_type", [("f32", T.F32), ("f16", T.F16), ("bf16", T.BF16), ("q8_0", T.Q8_0)])
def test_qwen35_values_and_types(converted, checkpoint, outtype: str, trunk_type: T) -> None:
    f = GGUFFile(converted("qwen35", "bundled", outtype))
    ck = Checkpoint.open(checkpoint("qwen35"))
    check(f, expected_qwen35(ck, "model.language_model."), trunk_type, T.Q8_0)
    assert f.get("general.file_type") == {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}[outtype]


def test_mtp_type_can_be_chosen(converted, checkpoint) -> None:
    f = GGUFFile(converted("qwen35", "bundled", "bf16", mtp_type="f16"))
    ck = Checkpoint.open(checkpoint("qwen35"))
    check(f, expected_qwen35(ck, "model.language_model."), T.BF16, T.F16)


def test_every_tensor_type_follows_the_policy(converted) -> None:
    for family in ("qwen35", "qwen35moe", "qwen3next"):
        f = GGUFFile(converted(family, "bundled", "bf16"))
        for name, t in f.tensors.items():
            if len(t.shape) == 1 or name.endswith(("_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight")) \
                    or not name.endswith(".weight"):
                assert T(t.ggml_type) == T.F32, name
            elif name.startswith("blk.4."):
                assert T(t.ggml_type) == T.Q8_0, name
            else:
                assert T(t.ggml_type) == T.BF16, name


@pytest.mark.parametrize("fused", [True, False])
def test_qwen35moe_experts(converted, checkpoint, fused: bool) -> None:
    f = GGUFFile(converted("qwen35moe", "bundled", "bf16", fused_experts=fused))
    ck = Checkpoint.open(checkpoint("qwen35moe", fused_experts=fused))
    pre = "model.language_model.layers.0.mlp."
    E, IE = S.experts, S.moe_intermediate
    if fused:
        gu = whole(ck.tensor(pre + "experts.gate_up_proj"))
        gate, up, down = gu[:, :IE], gu[:, IE:], whole(ck.tensor(pre + "experts.down_proj"))
    else:
        stack = lambda p: np.stack([whole(ck.tensor(f"{pre}experts.{e}.{p}.weight")) for e in range(E)])  # noqa: E731
        gate, up, down = stack("gate_proj"), stack("up_proj"), stack("down_proj")
    np.testing.assert_array_equal(gguf_values(f, "blk.0.ffn_gate_exps.weight"), gate)
    np.testing.assert_array_equal(gguf_values(f, "blk.0.ffn_up_exps.weight"), up)
    np.testing.assert_array_equal(gguf_values(f, "blk.0.ffn_down_exps.weight"), down)
    assert f.tensors["blk.0.ffn_gate_exps.weight"].shape == (H, IE, E)
    np.testing.assert_array_equal(gguf_values(f, "blk.0.ffn_gate_inp_shexp.weight"),
                                  whole(ck.tensor(pre + "shared_expert_gate.weight")).reshape(H))
    # the MTP layer's experts are per-expert in real Qwen3.5-MoE checkpoints; stacked and Q8_0 here
    mtp_gate = np.stack([whole(ck.tensor(f"mtp.layers.0.mlp.experts.{e}.gate_proj.weight")) for e in range(E)])
    got = gguf_values(f, "blk.4.ffn_gate_exps.weight")
    assert np.abs(got - mtp_gate).max() <= np.abs(mtp_gate).max() / 127


def test_qwen3next_qkvz_split(converted, checkpoint) -> None:
    f = GGUFFile(converted("qwen3next", "bundled", "bf16"))
    ck = Checkpoint.open(checkpoint("qwen3next"))
    w = whole(ck.tensor("model.layers.0.linear_attn.in_proj_qkvz.weight"))
    group = 2 * DH + 2 * R * DH
    rows = lambda lo, hi: np.concatenate([w[g * group + lo:g * group + hi] for g in range(NK)])  # noqa: E731
    qkv = np.concatenate([rows(0, DH), rows(DH, 2 * DH), rows(2 * DH, 2 * DH + R * DH)])
    np.testing.assert_array_equal(gguf_values(f, "blk.0.attn_qkv.weight"), qkv)
    np.testing.assert_array_equal(gguf_values(f, "blk.0.attn_gate.weight"), rows(2 * DH + R * DH, group))
    np.testing.assert_array_equal(gguf_values(f, "blk.0.ssm_ba.weight"),
                                  whole(ck.tensor("model.layers.0.linear_attn.in_proj_ba.weight")))
    conv = whole(ck.tensor("model.layers.0.linear_attn.conv1d.weight")).reshape(-1, KC)
    np.testing.assert_array_equal(gguf_values(f, "blk.0.ssm_conv1d.weight"), conv)  # no reorder for qwen3next


def test_metadata_keys(converted) -> None:
    f = GGUFFile(converted("qwen35", "bundled"))
    a = "qwen35"
    assert f.get("general.architecture") == a
    assert f.get(f"{a}.block_count") == S.layers + 1 and f.get(f"{a}.nextn_predict_layers") == 1
    assert f.get(f"{a}.embedding_length") == H
    assert f.get(f"{a}.attention.key_length") == S.head_dim
    assert f.get(f"{a}.rope.dimension_count") == S.head_dim // 4
    assert len(f.get(f"{a}.rope.dimension_sections")) == 4
    assert f.get(f"{a}.attention.recurrent_layers") == [True, True, True, False, False]
    assert f.get("tokenizer.ggml.model") == "gpt2" and f.get("tokenizer.ggml.pre") == "qwen35"
    toks = f.get("tokenizer.ggml.tokens")
    assert len(toks) == S.vocab_size and toks[-1] == f"[PAD{S.vocab_size - 1}]"
    assert toks[f.get("tokenizer.ggml.eos_token_id")] == "<|im_end|>"
    assert toks[f.get("tokenizer.ggml.padding_token_id")] == "<|endoftext|>"
    types = f.get("tokenizer.ggml.token_type")
    assert types[toks.index("<|im_start|>")] == 3 and types[toks.index("<think>")] == 4 and types[-1] == 5
    assert "<|im_start|>" in f.get("tokenizer.chat_template")
    assert GGUFFile(converted("qwen3next", "bundled")).get("tokenizer.ggml.pre") == "qwen2"


def test_deepseek2_kv_b_split(converted, checkpoint) -> None:
    """attn_k_b[h] = W_kb[h]^T and attn_v_b[h] = W_vb[h], with kv_b_proj's rows grouped per head as [nope | v]."""
    f = GGUFFile(converted("deepseek2", "bundled", "f32"))
    ck = Checkpoint.open(checkpoint("deepseek2"))
    w = whole(ck.tensor("model.layers.0.self_attn.kv_b_proj.weight"))
    nh, dn, dv, kl = S.heads, S.qk_nope, S.v_dim, S.kv_lora
    kb, vb = gguf_values(f, "blk.0.attn_k_b.weight"), gguf_values(f, "blk.0.attn_v_b.weight")
    assert kb.shape == (nh, kl, dn) and vb.shape == (nh, dv, kl)
    for h in range(nh):
        rows = w[h * (dn + dv):(h + 1) * (dn + dv)]
        np.testing.assert_array_equal(kb[h], rows[:dn].T)
        np.testing.assert_array_equal(vb[h], rows[dn:])
    assert f.get("deepseek2.attention.head_count_kv") == 1
    assert f.get("deepseek2.attention.key_length") == kl + S.qk_rope
    assert f.get("deepseek2.attention.key_length_mla") == dn + S.qk_rope
    assert f.get("deepseek2.expert_gating_func") == 2
    assert f.get("deepseek2.nextn_predict_layers") == 1 and "blk.4.nextn.eh_proj.weight" in f.tensors
