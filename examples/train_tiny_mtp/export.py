"""Write a trained model as a Hugging Face Qwen3.5 checkpoint: config.json (text keys under ``text_config``),
model.safetensors (bf16, real tensor names incl. ``mtp.*``), tokenizer files and a ChatML chat template."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from model import Qwen35MTP

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)


def tokenizer_config(tok: dict) -> dict:
    added = {str(t["id"]): {"content": t["content"], "special": t["special"], "lstrip": False, "rstrip": False,
                            "normalized": False, "single_word": False} for t in tok["added_tokens"]}
    return {"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False, "add_prefix_space": False,
            "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
            "errors": "replace", "model_max_length": 4096, "split_special_tokens": False,
            "clean_up_tokenization_spaces": False, "added_tokens_decoder": added}


def save_checkpoint(model: Qwen35MTP, tokenizer_json: Path, out: Path, extra_meta: dict | None = None,
                    max_shard_bytes: int = 12 << 20) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tok = json.loads(tokenizer_json.read_text())
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    cfg = model.config.hf_config(eos=ids["<|im_end|>"], bos=ids["<|endoftext|>"])
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    gen = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
           "pad_token_id": ids["<|endoftext|>"], "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    shutil.copyfile(tokenizer_json, out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(tok), indent=2) + "\n")
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}
    # sharded like the real repos (and each shard stays under 16 MiB)
    shards: list[dict] = [{}]
    for k, v in sd.items():
        if shards[-1] and sum(t.nbytes for t in shards[-1].values()) + v.nbytes > max_shard_bytes:
            shards.append({})
        shards[-1][k] = v
    n = len(shards)
    weight_map = {}
    for i, part in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{n:05d}.safetensors"
        save_file(part, str(out / name), metadata={"format": "pt", **(extra_meta or {})})
        weight_map.update({k: name for k in part})
    index = {"metadata": {"total_size": sum(v.nbytes for v in sd.values())}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
