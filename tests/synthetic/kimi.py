"""A synthetic Kimi-K2 checkpoint's config and tokenizer: DeepSeek-V3 tensors (``DeepseekV3ForCausalLM``,
``model_type: kimi_k2``) with a tiktoken rank file (``tiktoken.model``) trained on sample text, Kimi's special
tokens in ``tokenizer_config.json`` and a stand-in ``tokenization_kimi.py`` (the converter never runs it)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from gguf_mtp.checkpoint.tiktoken_bpe import byte_to_unicode

from .tokenizer import DEFAULT_CORPUS, train_bpe

#: offset from the first special id -> name, as in Kimi-K2's tokenizer_config.json (163584 = [BOS], ...)
KIMI_SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
                 6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
                 11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
                 14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
                 254: "[UNK]", 255: "[PAD]"}
N_RESERVED = 256  # vocab_size = base ranks + 256 (163584 + 256 = 163840 in Kimi-K2)
KIMI_CHAT_TEMPLATE = ("{%- for m in messages -%}<|im_{{ m['role'] }}|>{{ m['role'] }}<|im_middle|>"
                      "{{ m['content'] }}<|im_end|>{%- endfor -%}{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}")
STANDIN = '"""Stand-in for Kimi-K2\'s tokenization_kimi.py (a synthetic checkpoint; converters must not run it)."""\n'


def trained_ranks(n_base: int, corpus: str = DEFAULT_CORPUS) -> dict[bytes, int]:
    """``n_base`` ranks: the 256 single bytes in GPT-2's alphabet order (as real rank files start, so rank != byte
    value), then merged tokens in training order, each byte string once."""
    u2b = {u: b for b, u in byte_to_unicode().items()}
    ranks = {bytes([b]): i for i, b in enumerate(byte_to_unicode())}
    _, merges = train_bpe(corpus, 2 * n_base)
    for a, b in merges:
        tok = bytes(u2b[c] for c in a + b)
        if len(ranks) < n_base and tok not in ranks:
            ranks[tok] = len(ranks)
    if len(ranks) < n_base:
        raise ValueError(f"the corpus yields only {len(ranks)} distinct tokens, {n_base} asked for")
    return ranks


def write_tiktoken(root: Path, vocab_size: int, *, eos: str = "[EOS]") -> int:
    """Write ``tiktoken.model``, ``tokenizer_config.json`` and ``tokenization_kimi.py``; returns ``vocab_size``."""
    n_base = vocab_size - N_RESERVED
    if n_base < 256 + 16:
        raise ValueError(f"vocab_size {vocab_size} leaves no room for merges after {N_RESERVED} special slots")
    ranks = trained_ranks(n_base)
    lines = [f"{base64.b64encode(t).decode('ascii')} {r}" for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]
    (root / "tiktoken.model").write_text("\n".join(lines) + "\n", encoding="ascii")
    added = {str(n_base + k): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                               "single_word": False, "special": True} for k, name in KIMI_SPECIALS.items()}
    tc: dict[str, Any] = {
        "added_tokens_decoder": added, "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                                                                    "<|start_header_id|>", "<|end_header_id|>",
                                                                    "[EOT]", "<|im_system|>", "<|im_middle|>"],
        "bos_token": "[BOS]", "eos_token": eos, "pad_token": "[PAD]", "unk_token": "[UNK]",
        "clean_up_tokenization_spaces": False, "model_max_length": 1000000000000000019884624838656,
        "tokenizer_class": "TikTokenTokenizer", "chat_template": KIMI_CHAT_TEMPLATE,
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
    }
    (root / "tokenizer_config.json").write_text(json.dumps(tc, indent=1), encoding="utf-8")
    (root / "tokenization_kimi.py").write_text(STANDIN, encoding="utf-8")
    return vocab_size


def kimi_config(s: Any, vocab_tokens: int) -> dict[str, Any]:
    """Kimi-K2's config.json keys: DeepSeek-V3's with ``model_type: kimi_k2``, YaRN factor 32 with betas 1/1,
    no MTP layer declared unless the spec ships one."""
    n_base = vocab_tokens - N_RESERVED
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
            "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                         "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
            "hidden_size": s.hidden, "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
            "num_key_value_heads": s.heads, "q_lora_rank": s.q_lora, "kv_lora_rank": s.kv_lora,
            "qk_nope_head_dim": s.qk_nope, "qk_rope_head_dim": s.qk_rope, "v_head_dim": s.v_dim,
            "intermediate_size": s.intermediate, "moe_intermediate_size": s.moe_intermediate,
            "n_routed_experts": s.experts, "num_experts_per_tok": s.experts_used, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1,
            "routed_scaling_factor": 2.827, "norm_topk_prob": True, "scoring_func": "sigmoid",
            "topk_method": "noaux_tc", "seq_aux": True, "aux_loss_alpha": 0.001, "ep_size": 1,
            "rope_theta": 50000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 131072,
            "rope_scaling": {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                             "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
            "num_nextn_predict_layers": 1 if s.mtp else 0, "vocab_size": s.vocab_size,
            "bos_token_id": n_base, "eos_token_id": n_base + 1, "tie_word_embeddings": s.tie_embeddings,
            "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16", **s.extra}
