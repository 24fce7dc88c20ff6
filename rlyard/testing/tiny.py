"""A tiny random llama (as tests/conftest.py's) that ends its replies: multi-turn episodes on CPU.

A random model almost never samples the end-of-message token, so every reply runs into the
turn's token limit and a multi-turn episode never reaches the environment's step. Here the
untied output row of that token is set along the mean direction of the model's own final hidden
states, scaled by `stop_alpha`: measured on the toy prompt at temperature 1, alpha 8 gives a stop
probability of about 0.15 per token (mean 0.15, spread 0.00004-0.9), alpha 10 about 0.4.
"""
from __future__ import annotations

from pathlib import Path

import torch


def save_tiny_llama(path: Path, tokenizer, stop_alpha: float | None = 9.0, seed: int = 0) -> Path:
    """Save the tiny llama and `tokenizer` to `path` (a valid `model.name`); with `stop_alpha`, one that stops."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=stop_alpha is None,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).to(torch.float32).eval()
    if stop_alpha is not None:
        stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say something."}], add_generation_prompt=True,
                                               tokenize=True, return_dict=False)
        with torch.no_grad():
            sampled = model.generate(torch.tensor([list(prompt)]), do_sample=True, max_new_tokens=32, num_return_sequences=16,
                                     pad_token_id=tokenizer.pad_token_id or 0)
            hidden = model.model(sampled).last_hidden_state[:, len(prompt) - 1:].reshape(-1, config.hidden_size)
            mean = hidden.mean(0)
            model.lm_head.weight[stop] = stop_alpha * mean / mean.norm() ** 2
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
