"""GLM-4.5 / 4.6 / 4.7 (``Glm4MoeForCausalLM`` -> ``glm4moe``): GQA attention with biases and optional q/k
norms, leading dense layers, sigmoid-routed MoE with a correction bias and shared experts, one MTP layer at
``model.layers.{num_hidden_layers}`` that carries its own ``embed_tokens`` and ``shared_head.head`` copies.
Norms are plain weights (no +1); no q/k permutation (NEOX rope on the first ``head_dim * 0.5`` dims).
Facts: docs/facts/glm4moe.md."""

from __future__ import annotations

from gguf import Keys

from ..checkpoint.folder import Checkpoint
from ..ggufio.format import KV
from ..ggufio.names import MT, in_block
from .base import PlannedTensor
from .nextn_layer import NextnLayerFamily

#: GLM tokenizers' special tokens beyond tokenizer_config's (<|endoftext|> as eot makes generation endless)
GLM_SPECIALS = (("bos", "[gMASK]"), ("eot", "<|user|>"), ("unk", "<|endoftext|>"), ("eom", "<|observation|>"))


class Glm4Moe(NextnLayerFamily):
    arch = "glm4moe"
    #: as llama.cpp's converter (_set_vocab_glm) adds them where the tokenizer files leave them unset
    extra_specials = GLM_SPECIALS

    def __init__(self, ck: Checkpoint) -> None:
        super().__init__(ck)
        hp = self.hp
        self.read_attention_dims()
        self.dense = int(hp.get("first_k_dense_replace", 0))
        self.vocab = int(ck.tensor("model.embed_tokens.weight").shape[0])
        rope = hp.get("rope_parameters") or hp.get("rope_scaling") or {}
        self.rope_theta = float(rope.get("rope_theta", hp.get("rope_theta", 10000.0)))
        self.rope_dims = int(self.hd * float(hp.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.5))))

    # -- metadata ---------------------------------------------------------------------------
    def hparam_kvs(self, n_mtp: int) -> list[KV]:
        return [KV.u32(self.key(Keys.LLM.FEED_FORWARD_LENGTH), int(self.need("intermediate_size"))),
                *self.attention_kvs(eps=1e-5),
                *self.routed_kvs(shared=1, gating=2, norm=True)]  # gating 2: sigmoid

    # -- tensors ----------------------------------------------------------------------------
    def _block(self, out: list[PlannedTensor], il: int, mtp: bool) -> None:
        p, b, H, hd = f"model.layers.{il}.", f"blk.{il}.", self.H, self.hd
        q, kv = self.nh * hd, self.nkv * hd
        self.put(out, p + "input_layernorm.weight", b + in_block(MT.ATTN_NORM), (H,), mtp)
        for proj, t, rows in (("q_proj", MT.ATTN_Q, q), ("k_proj", MT.ATTN_K, kv), ("v_proj", MT.ATTN_V, kv)):
            self.put(out, f"{p}self_attn.{proj}.weight", b + in_block(t), (rows, H), mtp)
            self.opt(out, f"{p}self_attn.{proj}.bias", b + in_block(t, ".bias"), (rows,), mtp)
        self.put(out, p + "self_attn.o_proj.weight", b + in_block(MT.ATTN_OUT), (H, q), mtp)
        self.opt(out, p + "self_attn.q_norm.weight", b + in_block(MT.ATTN_Q_NORM), (hd,), mtp)
        self.opt(out, p + "self_attn.k_norm.weight", b + in_block(MT.ATTN_K_NORM), (hd,), mtp)
        self.put(out, p + "post_attention_layernorm.weight", b + in_block(MT.ATTN_POST_NORM), (H,), mtp)
        self._ffn(out, p, b, il, mtp, default_shared=1)
