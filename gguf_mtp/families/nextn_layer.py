"""Shared shape of the DeepSeek-style families (``deepseek2``, ``glm4moe``): the MTP layer is an extra decoder
layer at ``model.layers.{num_hidden_layers}`` with ``eh_proj``, ``enorm``, ``hnorm``, ``shared_head.{norm,head}``
and ``embed_tokens`` beside its block; norms are plain weights. Subclasses define ``_block`` and ``arch_kvs``."""

from __future__ import annotations

from typing import ClassVar

from ..errors import UnsupportedError
from .base import Family, ModelPlan, PlannedTensor, Source, Transform


class NextnLayerFamily(Family):
    dense: int  # leading dense layers, set by subclasses
    #: MTP layers llama.cpp's graph for the arch runs (None: any number, one per draft step)
    max_heads: ClassVar[int | None] = 1

    def _block(self, out: list[PlannedTensor], il: int, mtp: bool) -> None:
        raise NotImplementedError

    def arch_kvs(self, n_mtp: int) -> list:  # type: ignore[type-arg]
        raise NotImplementedError

    def _put(self, out: list[PlannedTensor], hf: str, gguf: str, shape: tuple[int, ...], mtp: bool,
             np_shape: tuple[int, ...] | None = None, whole: Transform | None = None) -> None:
        out.append(PlannedTensor(gguf, np_shape or shape, [Source(self.tensor(hf, shape))], mtp, None, whole,
                                 shape if whole else None))

    def _opt(self, out: list[PlannedTensor], hf: str, gguf: str, shape: tuple[int, ...], mtp: bool) -> None:
        if self.ck.has(hf):
            self._put(out, hf, gguf, shape, mtp)

    def _ffn(self, out: list[PlannedTensor], p: str, b: str, il: int, mtp: bool, default_shared: int) -> None:
        """Dense MLP for the leading layers, else sigmoid-routed MoE: router, correction bias, experts, shared."""
        H = self.H
        if il < self.dense:
            ff = int(self.need("intermediate_size"))
            for proj, gg, shape in (("gate_proj", "ffn_gate", (ff, H)), ("up_proj", "ffn_up", (ff, H)),
                                    ("down_proj", "ffn_down", (H, ff))):
                self._put(out, f"{p}mlp.{proj}.weight", f"{b}{gg}.weight", shape, mtp)
            return
        E, Ie = int(self.need("n_routed_experts")), int(self.need("moe_intermediate_size"))
        Is = Ie * int(self.hp.get("n_shared_experts", default_shared))
        self._put(out, p + "mlp.gate.weight", b + "ffn_gate_inp.weight", (E, H), mtp)
        self._opt(out, p + "mlp.gate.e_score_correction_bias", b + "exp_probs_b.bias", (E,), mtp)
        out.extend(self.expert_tensors(p, b, E, Ie, mtp))
        if Is:
            for proj, gg, shape in (("gate_proj", "ffn_gate_shexp", (Is, H)), ("up_proj", "ffn_up_shexp", (Is, H)),
                                    ("down_proj", "ffn_down_shexp", (H, Is))):
                self._put(out, f"{p}mlp.shared_experts.{proj}.weight", f"{b}{gg}.weight", shape, mtp)

    def mtp_layers(self) -> int:
        n = 0
        while self.ck.has(f"model.layers.{self.L + n}.eh_proj.weight"):
            n += 1
        return n

    def mtp_missing(self) -> str:
        declared = self.hp.get("num_nextn_predict_layers")
        say = f" although config.json declares num_nextn_predict_layers={declared}" if declared else ""
        return (f"{self.ck.root}: the checkpoint has no MTP weights (model.layers.{self.L}.eh_proj.weight and the "
                f"rest of layer {self.L} are missing){say}; convert without --mtp")

    def _head(self, out: list[PlannedTensor], i: int) -> None:
        """MTP layer ``i``: the DeepSeek-style nextn tensors beside a decoder block at ``model.layers.{L+i}``."""
        H, V = self.H, self.vocab
        il = self.L + i
        p, b = f"model.layers.{il}.", f"blk.{il}."
        self._put(out, p + "eh_proj.weight", b + "nextn.eh_proj.weight", (H, 2 * H), True)
        self._put(out, p + "enorm.weight", b + "nextn.enorm.weight", (H,), True)
        self._put(out, p + "hnorm.weight", b + "nextn.hnorm.weight", (H,), True)
        self._opt(out, p + "shared_head.norm.weight", b + "nextn.shared_head_norm.weight", (H,), True)
        self._opt(out, p + "shared_head.head.weight", b + "nextn.shared_head_head.weight", (V, H), True)
        self._opt(out, p + "embed_tokens.weight", b + "nextn.embed_tokens.weight", (V, H), True)
        self._block(out, il, True)

    def _output(self, out: list[PlannedTensor]) -> None:
        """Final norm and LM head (absent when tied: llama.cpp falls back to token_embd)."""
        self._put(out, "model.norm.weight", "output_norm.weight", (self.H,), False)
        if self.ck.has("lm_head.weight"):
            self._put(out, "lm_head.weight", "output.weight", (self.vocab, self.H), False)

    def plan(self, *, trunk: bool, mtp: bool, embeddings: bool) -> ModelPlan:
        n_mtp = self.mtp_layers() if mtp else 0
        if self.max_heads and n_mtp > self.max_heads:
            raise UnsupportedError(f"{self.ck.root}: {n_mtp} MTP layers; llama.cpp's {self.arch} MTP graph runs one")
        out: list[PlannedTensor] = []
        if embeddings:
            self._put(out, "model.embed_tokens.weight", "token_embd.weight", (self.vocab, self.H), False)
        if trunk:
            for il in range(self.L):
                self._block(out, il, False)
        for i in range(n_mtp):
            self._head(out, i)
        if embeddings:
            self._output(out)
            out += self.generated()
        return ModelPlan(self.arch, self.arch_kvs(n_mtp), out, self.L, n_mtp)
