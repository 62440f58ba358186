#!/usr/bin/env python3
"""kvevict inside Hugging Face transformers on a tiny random Llama (no download): generate with
DropKV at a 10% budget and AdaKV per-head budgets, and print the KV memory saved.

    python examples/python/hf_generate.py
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import kvevict.hf

torch.manual_seed(0)
config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                     num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096)
model = LlamaForCausalLM(config).eval()
ids = torch.randint(1, 1000, (1, 2000))

with kvevict.hf.press(model, method="dropkv", budget=0.1, policy="adakv") as press:
    out = model.generate(ids, max_new_tokens=16, do_sample=False)
full = config.num_hidden_layers * 2 * 2 * (2000 + 15) * 32 * 4  # layers, K+V, Hkv, tokens, d, f32
print(press.describe())
print(f"generated {out.shape[1] - ids.shape[1]} tokens; KV {full / 2**20:.2f} MiB -> "
      f"{press.cache.kv_bytes() / 2**20:.2f} MiB")
