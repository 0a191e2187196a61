"""Reading Hugging Face checkpoints: config, safetensors shards, tokenizer, Hub download."""
