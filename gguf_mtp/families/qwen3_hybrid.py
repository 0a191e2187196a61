"""Shared machinery of the Qwen hybrid families (Gated DeltaNet linear attention + gated full attention,
one MTP block): ``qwen35``, ``qwen35moe`` and ``qwen3next``. The family modules are tables on top of this.

HF -> GGUF rules (as llama.cpp's converter applies them):
- every ``*norm.weight`` except the linear-attention gated norm stores an offset: write ``w + 1``;
- ``A_log`` -> ``ssm_a = -exp(A_log)``; ``dt_bias`` -> ``ssm_dt.bias``; ``conv1d`` squeezed to 2-D;
- qwen35/qwen35moe: V heads reordered from grouped-by-K-head to tiled order (when nk != nv);
- MTP: ``mtp.fc`` -> ``nextn.eh_proj``, ``pre_fc_norm_embedding`` -> ``enorm``, ``pre_fc_norm_hidden`` ->
  ``hnorm``, ``mtp.norm`` -> ``shared_head_norm``, ``mtp.layers.i.*`` -> ``blk.{L+i}.*`` (a full-attention block).
"""

from __future__ import annotations

import re
from typing import ClassVar

import numpy as np
from gguf import GGUFValueType, Keys

from ..checkpoint.folder import Checkpoint
from ..checkpoint.shards import TensorRef
from ..errors import UnsupportedError
from ..ggufio.format import KV
from ..ggufio.keys import K_RECURRENT_LAYERS
from ..ggufio.names import MT, in_block, tensor_name
from .base import Family, ModelPlan, PlannedTensor, Source, Split, Transform

_MTP_LAYER = re.compile(r"^(?:model\.)?mtp\.layers\.(\d+)\.")


def neg_exp(x: np.ndarray) -> np.ndarray:
    return -np.exp(x)


def tile_heads(start: int, nk: int, r: int, hdim: int, axis: int = 0) -> Transform:
    """Reorder head blocks along ``axis`` from index ``start``: grouped (k-major) -> tiled (v-major)."""

    def f(x: np.ndarray) -> np.ndarray:
        x = np.moveaxis(x, axis, 0)
        head, tail = x[:start], x[start:]
        rest = tail.shape[1:]
        tail = tail.reshape(nk, r, hdim, *rest).swapaxes(0, 1).reshape(nk * r * hdim, *rest)
        return np.moveaxis(np.concatenate([head, tail]), 0, axis)

    return f


def tiled_rows(ref: TensorRef, start: int, nk: int, r: int, hdim: int) -> list[Source]:
    """The rows of ``ref`` with head blocks from row ``start`` on in tiled order, as byte ranges.

    Same permutation as :func:`tile_heads` on axis 0, expressed as source slices so the tensor
    streams (and byte-copies when the type is unchanged) instead of being reordered in memory.
    """
    row = ref.n_elements // ref.shape[0]
    out = [Source(ref, 0, start * row)] if start else []
    for p in range(nk * r):
        old = (p % nk) * r + p // nk
        out.append(Source(ref, (start + old * hdim) * row, hdim * row))
    return out


class QwenHybrid(Family):
    skip = re.compile(r"(^|\.)(visual|vision_tower|vision|merger|patch_embed)\."
                      r"|rotary_emb\.inv_freq$|weight_scale_inv$")
    plain_norms = (in_block(MT.SSM_NORM),)  # the linear-attention gated norm is stored as is
    moe: ClassVar[bool] = False
    reorder_v: ClassVar[bool] = True
    fused_qkvz: ClassVar[bool] = False
    #: the trunk's RoPE is multimodal (``rope.dimension_sections``); qwen3next's is plain
    mrope_sections: ClassVar[bool] = True

    def __init__(self, ck: Checkpoint) -> None:
        super().__init__(ck)
        hp = self.hp
        self.read_attention_dims()
        self.nk, self.nv = int(self.need("linear_num_key_heads")), int(self.need("linear_num_value_heads"))
        self.dk, self.dv = int(self.need("linear_key_head_dim")), int(self.need("linear_value_head_dim"))
        self.kc = int(self.need("linear_conv_kernel_dim"))
        if self.dk != self.dv or self.nv % self.nk:
            raise UnsupportedError(f"{ck.root / 'config.json'}: llama.cpp needs linear_key_head_dim == "
                                   f"linear_value_head_dim and nv % nk == 0 (got dk={self.dk} dv={self.dv} "
                                   f"nk={self.nk} nv={self.nv})")
        self.interval = int(hp.get("full_attention_interval", 4))
        self.layer_types = hp.get("layer_types") or [
            "linear_attention" if (i + 1) % self.interval else "full_attention" for i in range(self.L)
        ]
        self.prefix = "model.language_model." if ck.has("model.language_model.embed_tokens.weight") else "model."
        self.mtp_prefix = "model.mtp." if any(n.startswith("model.mtp.") for n in ck.tensors) else "mtp."
        emb = ck.tensor(self.prefix + "embed_tokens.weight")
        self.vocab = int(emb.shape[0])
        rope = hp.get("rope_parameters") or hp.get("rope_scaling") or {}
        self.rope_theta = float(rope.get("rope_theta", hp.get("rope_theta", 10000.0)))
        prf = float(rope.get("partial_rotary_factor", hp.get("partial_rotary_factor", 0.25)))
        self.rope_dims = int(self.hd * prf)
        self.mrope = list(rope.get("mrope_section") or [11, 11, 10])

    # -- facts per subclass ----------------------------------------------------------------
    def ffn_kvs(self) -> list[KV]:
        return []

    # -- counting the head ------------------------------------------------------------------
    def mtp_layers(self) -> int:
        idx = {int(m.group(1)) for n in self.ck.tensors if (m := _MTP_LAYER.match(n))}
        if not idx or not self.ck.has(self.mtp_prefix + "fc.weight"):
            return 0
        return max(idx) + 1

    def mtp_missing(self) -> str:
        declared = self.hp.get("mtp_num_hidden_layers")
        say = f" although config.json declares mtp_num_hidden_layers={declared}" if declared else ""
        return (f"{self.ck.root}: the checkpoint has no MTP weights ({self.mtp_prefix}fc.weight and "
                f"{self.mtp_prefix}layers.0.* are missing){say}; convert without --mtp, or use a checkpoint that "
                "ships the head")

    # -- metadata ---------------------------------------------------------------------------
    def hparam_kvs(self, n_mtp: int) -> list[KV]:
        k, hp = self.key, self.hp
        kvs = []
        if "intermediate_size" in hp:
            kvs.append(KV.u32(k(Keys.LLM.FEED_FORWARD_LENGTH), int(hp["intermediate_size"])))
        kvs += self.attention_kvs(eps=1e-6)
        if self.mrope_sections:
            sections = (self.mrope + [0, 0, 0, 0])[:4]
            kvs.append(KV.array(k(Keys.Rope.DIMENSION_SECTIONS), GGUFValueType.INT32, sections))
        kvs += [
            KV.u32(k(Keys.SSM.CONV_KERNEL), self.kc),
            KV.u32(k(Keys.SSM.STATE_SIZE), self.dk),
            KV.u32(k(Keys.SSM.GROUP_COUNT), self.nk),
            KV.u32(k(Keys.SSM.TIME_STEP_RANK), self.nv),
            KV.u32(k(Keys.SSM.INNER_SIZE), self.dv * self.nv),
            KV.array(k(K_RECURRENT_LAYERS), GGUFValueType.BOOL,
                     [t == "linear_attention" for t in self.layer_types] + [False] * n_mtp),
            KV.u32(k(Keys.LLM.FULL_ATTENTION_INTERVAL), self.interval),
        ]
        return kvs + self.ffn_kvs()

    # -- tensors ----------------------------------------------------------------------------
    def v_rows(self, start: int, hdim: int) -> Split | None:
        """Take V-head row blocks (from row ``start``, ``hdim`` rows each) in tiled order, when the arch reorders."""
        if not (self.reorder_v and self.nk != self.nv):
            return None
        return lambda ref: tiled_rows(ref, start, self.nk, self.nv // self.nk, hdim)

    def _attention(self, out: list[PlannedTensor], p: str, b: str, mtp: bool) -> None:
        H, nh, nkv, hd = self.H, self.nh, self.nkv, self.hd
        for hf, t, shape in (
            ("self_attn.q_proj.weight", MT.ATTN_Q, (2 * nh * hd, H)),
            ("self_attn.k_proj.weight", MT.ATTN_K, (nkv * hd, H)),
            ("self_attn.v_proj.weight", MT.ATTN_V, (nkv * hd, H)),
            ("self_attn.o_proj.weight", MT.ATTN_OUT, (H, nh * hd)),
            ("self_attn.q_norm.weight", MT.ATTN_Q_NORM, (hd,)),
            ("self_attn.k_norm.weight", MT.ATTN_K_NORM, (hd,)),
        ):
            self.put(out, p + hf, b + in_block(t), shape, mtp)

    def _linear_attention(self, out: list[PlannedTensor], p: str, b: str) -> None:
        H, nk, nv, dk, dv = self.H, self.nk, self.nv, self.dk, self.dv
        key_dim, value_dim = nk * dk, nv * dv
        conv_dim, r = 2 * key_dim + value_dim, nv // nk
        tile = self.reorder_v and nk != nv
        la = p + "linear_attn."
        if self.fused_qkvz:
            shape = (nk * (2 * dk + 2 * r * dv), H)
            self.put(out, la + "in_proj_qkvz.weight", b + in_block(MT.ATTN_QKV), shape, False, (conv_dim, H),
                     self._split_qkvz(want_z=False))
            self.put(out, la + "in_proj_qkvz.weight", b + in_block(MT.ATTN_GATE), shape, False, (value_dim, H),
                     self._split_qkvz(want_z=True))
            self.put(out, la + "in_proj_ba.weight", b + in_block(MT.SSM_BETA_ALPHA), (2 * nv, H), False)
        else:
            self.put(out, la + "in_proj_qkv.weight", b + in_block(MT.ATTN_QKV), (conv_dim, H), False,
                     split=self.v_rows(2 * key_dim, dv))
            self.put(out, la + "in_proj_z.weight", b + in_block(MT.ATTN_GATE), (value_dim, H), False,
                     split=self.v_rows(0, dv))
            self.put(out, la + "in_proj_b.weight", b + in_block(MT.SSM_BETA), (nv, H), False, split=self.v_rows(0, 1))
            self.put(out, la + "in_proj_a.weight", b + in_block(MT.SSM_ALPHA), (nv, H), False, split=self.v_rows(0, 1))

        tiled = tile_heads(2 * key_dim, nk, r, dv) if tile else None

        def conv(x: np.ndarray) -> np.ndarray:
            y = x.reshape(conv_dim, self.kc)
            return tiled(y) if tiled is not None else y

        self.put(out, la + "conv1d.weight", b + "ssm_conv1d.weight", (conv_dim, 1, self.kc), False,
                 (conv_dim, self.kc), conv)
        self.put(out, la + "dt_bias", b + in_block(MT.SSM_DT, ".bias"), (nv,), False, split=self.v_rows(0, 1))
        self.put(out, la + "A_log", b + in_block(MT.SSM_A, ""), (nv,), False, elementwise=neg_exp,
                 split=self.v_rows(0, 1))
        self.put(out, la + "norm.weight", b + in_block(MT.SSM_NORM), (dv,), False)
        self.put(out, la + "out_proj.weight", b + in_block(MT.SSM_OUT), (H, value_dim), False,
                 whole=tile_heads(0, nk, r, dv, axis=1) if tile else None)

    def _split_qkvz(self, want_z: bool) -> Transform:
        nk, dk, r, dv, H = self.nk, self.dk, self.nv // self.nk, self.dv, self.H

        def f(x: np.ndarray) -> np.ndarray:
            g = x.reshape(nk, 2 * dk + 2 * r * dv, H)
            if want_z:
                return g[:, 2 * dk + r * dv:].reshape(-1, H)
            return np.concatenate([g[:, :dk].reshape(-1, H), g[:, dk:2 * dk].reshape(-1, H),
                                   g[:, 2 * dk:2 * dk + r * dv].reshape(-1, H)])

        return f

    def _ffn(self, out: list[PlannedTensor], p: str, b: str, mtp: bool) -> None:
        H = self.H
        if not self.moe:
            self.dense_ffn(out, p, b, mtp)
            return
        E, Ie, Is = (int(self.need("num_experts")), int(self.need("moe_intermediate_size")),
                     int(self.need("shared_expert_intermediate_size")))
        self.put(out, p + "mlp.gate.weight", b + in_block(MT.FFN_GATE_INP), (E, H), mtp)
        out.extend(self.expert_tensors(p, b, E, Ie, mtp))
        self.shared_expert(out, p + "mlp.shared_expert.", b, Is, mtp)
        self.put(out, p + "mlp.shared_expert_gate.weight", b + in_block(MT.FFN_GATE_INP_SHEXP), (1, H), mtp, (H,))

    def _block(self, out: list[PlannedTensor], p: str, il: int, *, linear: bool, mtp: bool) -> None:
        b = f"blk.{il}."
        self.put(out, p + "input_layernorm.weight", b + in_block(MT.ATTN_NORM), (self.H,), mtp)
        self.put(out, p + "post_attention_layernorm.weight", b + in_block(MT.ATTN_POST_NORM), (self.H,), mtp)
        if linear:
            self._linear_attention(out, p, b)
        else:
            self._attention(out, p, b, mtp)
        self._ffn(out, p, b, mtp)

    def plan(self, *, trunk: bool, mtp: bool, embeddings: bool) -> ModelPlan:
        n_mtp = self.mtp_layers() if mtp else 0
        if n_mtp > 1:
            raise UnsupportedError(f"{self.ck.root}: {n_mtp} MTP layers; llama.cpp's {self.arch} MTP graph runs "
                                   "exactly one")
        out: list[PlannedTensor] = []
        H, V = self.H, self.vocab
        if embeddings:
            self.put(out, self.prefix + "embed_tokens.weight", tensor_name(MT.TOKEN_EMBD), (V, H), False)
        if trunk:
            for il in range(self.L):
                self._block(out, f"{self.prefix}layers.{il}.", il,
                            linear=self.layer_types[il] == "linear_attention", mtp=False)
        if n_mtp:
            mp, il = self.mtp_prefix, self.L
            self.put(out, mp + "fc.weight", tensor_name(MT.NEXTN_EH_PROJ, il), (H, 2 * H), True)
            self.put(out, mp + "pre_fc_norm_embedding.weight", tensor_name(MT.NEXTN_ENORM, il), (H,), True)
            self.put(out, mp + "pre_fc_norm_hidden.weight", tensor_name(MT.NEXTN_HNORM, il), (H,), True)
            self.put(out, mp + "norm.weight", tensor_name(MT.NEXTN_SHARED_HEAD_NORM, il), (H,), True)
            self._block(out, f"{mp}layers.0.", il, linear=False, mtp=True)
        if embeddings:
            self.put(out, self.prefix + "norm.weight", tensor_name(MT.OUTPUT_NORM), (H,), False)
            if self.ck.has("lm_head.weight"):
                self.put(out, "lm_head.weight", tensor_name(MT.OUTPUT), (V, H), False)
        return ModelPlan(self.arch, self.arch_kvs(n_mtp), out, self.L, n_mtp)
