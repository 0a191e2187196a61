"""A tiny random ``mimo2`` GGUF with three MTP heads, written directly with gguf-py (gguf-mtp has no mimo2
converter yet): the fixture for the runtime's multi-head (chained heads) mode. Layout and keys follow
docs/facts/mimo2.md: sliding-window and full attention layers, fused attn_qkv in the heads, attention sinks."""

import numpy as np
import gguf

rng = np.random.default_rng(0)
def R(*s, sc=0.1): return (rng.standard_normal(s) * sc).astype(np.float32)
def N(n): return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

def vocab(w):
    toks = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bs = list(range(ord("!"), ord("~")+1)) + list(range(ord("¡"), ord("¬")+1)) + list(range(ord("®"), ord("ÿ")+1))
    cs = bs[:]; n = 0
    for b in range(256):
        if b not in bs: bs.append(b); cs.append(256+n); n += 1
    toks += [chr(c) for c in cs] + ["Ġt", "he"]
    types = [3,3,3] + [1]*258
    w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks); w.add_token_types(types); w.add_token_merges(["Ġ t", "h e"])
    w.add_eos_token_id(0); w.add_bos_token_id(0); w.add_pad_token_id(0)
    return len(toks)

def build_mimo(path, E=64, H=2, HD=64, VHD=32, KVF=1, KVS=2, NT=2, NX=3, F=96, FE=32, X=4, K=2, fused_trunk=True, with_mtp=True, sinks=True, mtp_nx_tensors=99):
    w = gguf.GGUFWriter(path, "mimo2")
    A = "mimo2."
    BC = NT + NX
    w.add_uint32(A+"block_count", BC)
    w.add_uint32(A+"nextn_predict_layers", NX)
    w.add_uint32(A+"context_length", 4096)
    w.add_uint32(A+"embedding_length", E)
    w.add_uint32(A+"feed_forward_length", F)
    w.add_uint32(A+"attention.head_count", H)
    swa = [0, 1] + [1]*NX     # layer 0 full, layer 1 SWA, MTP SWA
    w.add_array(A+"attention.head_count_kv", [KVS if s else KVF for s in swa])
    w.add_uint32(A+"attention.key_length", HD)
    w.add_uint32(A+"attention.value_length", VHD)
    w.add_uint32(A+"rope.dimension_count", HD//2)
    w.add_float32(A+"rope.freq_base", 5e6)
    w.add_float32(A+"rope.freq_base_swa", 1e4)
    w.add_float32(A+"attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32(A+"attention.sliding_window", 8)
    w.add_array(A+"attention.sliding_window_pattern", swa)
    w.add_uint32(A+"expert_count", X); w.add_uint32(A+"expert_used_count", K)
    w.add_uint32(A+"expert_feed_forward_length", FE)
    w.add_float32(A+"attention.value_scale", 0.707)
    w.add_uint32("general.file_type", 0)
    Vv = vocab(w)
    T = {}
    def t(n, a): T[n] = a; w.add_tensor(n, a)
    t("token_embd.weight", R(Vv, E)); t("output_norm.weight", N(E)); t("output.weight", R(Vv, E))
    for i in range(BC):
        if i >= NT and (not with_mtp or i >= NT + mtp_nx_tensors): continue
        kv = KVS if swa[i] else KVF
        p = f"blk.{i}."
        if fused_trunk or i >= NT:
            t(p+"attn_qkv.weight", R(H*HD + kv*HD + kv*VHD, E))
        else:
            t(p+"attn_q.weight", R(H*HD, E)); t(p+"attn_k.weight", R(kv*HD, E)); t(p+"attn_v.weight", R(kv*VHD, E))
        t(p+"attn_output.weight", R(E, H*VHD))
        t(p+"attn_norm.weight", N(E)); t(p+"ffn_norm.weight", N(E))
        if sinks and swa[i]: t(p+"attn_sinks.weight", R(H, sc=1.0))
        if i == 0 or i >= NT:
            t(p+"ffn_gate.weight", R(F, E)); t(p+"ffn_up.weight", R(F, E)); t(p+"ffn_down.weight", R(E, F))
        else:
            t(p+"ffn_gate_inp.weight", R(X, E)); t(p+"exp_probs_b.bias", np.abs(R(X)))
            t(p+"ffn_gate_exps.weight", R(X, FE, E)); t(p+"ffn_up_exps.weight", R(X, FE, E)); t(p+"ffn_down_exps.weight", R(X, E, FE))
        if i >= NT:
            t(p+"nextn.eh_proj.weight", R(E, 2*E)); t(p+"nextn.enorm.weight", N(E)); t(p+"nextn.hnorm.weight", N(E))
            t(p+"layer_output_norm.weight", N(E))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return T

