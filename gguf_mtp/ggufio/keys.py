"""Every GGUF metadata key gguf-mtp reads or writes, in one place.

Per-architecture keys are templates filled with the architecture name (``arch_key(K_BLOCK_COUNT, "qwen35")``).
"""

from __future__ import annotations

# general
GENERAL_ARCH = "general.architecture"
GENERAL_TYPE = "general.type"
GENERAL_NAME = "general.name"
GENERAL_BASENAME = "general.basename"
GENERAL_SIZE_LABEL = "general.size_label"
GENERAL_FILE_TYPE = "general.file_type"
GENERAL_QUANT_VERSION = "general.quantization_version"
GENERAL_ALIGNMENT = "general.alignment"

# split sets
SPLIT_NO = "split.no"
SPLIT_COUNT = "split.count"
SPLIT_TENSORS_COUNT = "split.tensors.count"

# per-architecture (templates)
K_BLOCK_COUNT = "{arch}.block_count"
K_NEXTN = "{arch}.nextn_predict_layers"
K_SHARED_TARGET_TENSORS = "{arch}.nextn_shared_target_tensors"  # head-only sidecar marker
K_CONTEXT_LENGTH = "{arch}.context_length"
K_EMBEDDING_LENGTH = "{arch}.embedding_length"
K_FEED_FORWARD_LENGTH = "{arch}.feed_forward_length"
K_HEAD_COUNT = "{arch}.attention.head_count"
K_HEAD_COUNT_KV = "{arch}.attention.head_count_kv"
K_KEY_LENGTH = "{arch}.attention.key_length"
K_VALUE_LENGTH = "{arch}.attention.value_length"
K_RMS_EPS = "{arch}.attention.layer_norm_rms_epsilon"
K_RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"
K_FULL_ATTN_INTERVAL = "{arch}.full_attention_interval"
K_ROPE_FREQ_BASE = "{arch}.rope.freq_base"
K_ROPE_DIM_COUNT = "{arch}.rope.dimension_count"
K_ROPE_DIM_SECTIONS = "{arch}.rope.dimension_sections"
K_SSM_CONV_KERNEL = "{arch}.ssm.conv_kernel"
K_SSM_STATE_SIZE = "{arch}.ssm.state_size"
K_SSM_GROUP_COUNT = "{arch}.ssm.group_count"
K_SSM_TIME_STEP_RANK = "{arch}.ssm.time_step_rank"
K_SSM_INNER_SIZE = "{arch}.ssm.inner_size"
K_EXPERT_COUNT = "{arch}.expert_count"
K_EXPERT_USED_COUNT = "{arch}.expert_used_count"
K_EXPERT_FF_LENGTH = "{arch}.expert_feed_forward_length"
K_EXPERT_SHARED_FF_LENGTH = "{arch}.expert_shared_feed_forward_length"
K_EXPERT_WEIGHTS_NORM = "{arch}.expert_weights_norm"
K_EXPERT_WEIGHTS_SCALE = "{arch}.expert_weights_scale"
K_EXPERT_GATING_FUNC = "{arch}.expert_gating_func"
K_EXPERT_GROUP_COUNT = "{arch}.expert_group_count"
K_EXPERT_GROUP_USED_COUNT = "{arch}.expert_group_used_count"
K_EXPERT_SHARED_COUNT = "{arch}.expert_shared_count"
K_LEADING_DENSE_BLOCK_COUNT = "{arch}.leading_dense_block_count"
K_VOCAB_SIZE = "{arch}.vocab_size"
K_Q_LORA_RANK = "{arch}.attention.q_lora_rank"
K_KV_LORA_RANK = "{arch}.attention.kv_lora_rank"
K_KEY_LENGTH_MLA = "{arch}.attention.key_length_mla"
K_VALUE_LENGTH_MLA = "{arch}.attention.value_length_mla"
K_ROPE_SCALING_TYPE = "{arch}.rope.scaling.type"
K_ROPE_SCALING_FACTOR = "{arch}.rope.scaling.factor"
K_ROPE_SCALING_ORIG_CTX = "{arch}.rope.scaling.original_context_length"
K_ROPE_SCALING_YARN_LOG_MUL = "{arch}.rope.scaling.yarn_log_multiplier"
K_ROPE_SCALING_YARN_BETA_FAST = "{arch}.rope.scaling.yarn_beta_fast"
K_ROPE_SCALING_YARN_BETA_SLOW = "{arch}.rope.scaling.yarn_beta_slow"
# sliding-window attention and multi-head MTP families (mimo2, step35)
K_SLIDING_WINDOW = "{arch}.attention.sliding_window"
K_SLIDING_WINDOW_PATTERN = "{arch}.attention.sliding_window_pattern"
K_ROPE_FREQ_BASE_SWA = "{arch}.rope.freq_base_swa"
K_VALUE_SCALE = "{arch}.attention.value_scale"
K_SWIGLU_CLAMP_EXP = "{arch}.swiglu_clamp_exp"
K_SWIGLU_CLAMP_SHEXP = "{arch}.swiglu_clamp_shexp"
K_MOE_EVERY_N_LAYERS = "{arch}.moe_every_n_layers"

# tokenizer
TOK_MODEL = "tokenizer.ggml.model"
TOK_PRE = "tokenizer.ggml.pre"
TOK_TOKENS = "tokenizer.ggml.tokens"
TOK_TYPES = "tokenizer.ggml.token_type"
TOK_MERGES = "tokenizer.ggml.merges"
TOK_BOS = "tokenizer.ggml.bos_token_id"
TOK_EOS = "tokenizer.ggml.eos_token_id"
TOK_PAD = "tokenizer.ggml.padding_token_id"
TOK_EOT = "tokenizer.ggml.eot_token_id"
TOK_ADD_BOS = "tokenizer.ggml.add_bos_token"
TOK_ADD_EOS = "tokenizer.ggml.add_eos_token"
TOK_CHAT_TEMPLATE = "tokenizer.chat_template"


def arch_key(template: str, arch: str) -> str:
    return template.format(arch=arch)
