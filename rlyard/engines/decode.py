"""A lean decode step for llama-shaped decoders (Llama, SmolLM2, Qwen2, Mistral).

A decode step of a small model at batch 32 is about 200 small matmuls; transformers' generic
forward adds Python around each layer (mask building, cache and attention dispatch, output
records) that costs as much as a tenth of the step on 2 CPU cores. This step runs the same
modules' weights in the same order with nothing around them, and it is where int8 decoding
plugs in: projections that read one input (q/k/v, gate/up) become one fused int8 matmul.
Prefill and every other architecture keep transformers' forward; the engine's tests hold this
step to the plain forward's logits.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache

from rlyard.engines.quant import Int8Projection, Projection, check_int8_support

LLAMA_SHAPED = ("llama", "qwen2", "mistral")
_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def lean_decode_support(model) -> str | None:
    """None if `model` can use the lean step, else why not (for the error message of int8)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in LLAMA_SHAPED:
        return f"model_type {model_type!r} is not one of {', '.join(LLAMA_SHAPED)}"
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    if window is not None:
        return "sliding-window attention"
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act {getattr(config, 'hidden_act', None)!r}"
    inner = getattr(model, "model", None)
    if not (hasattr(inner, "layers") and hasattr(inner, "rotary_emb") and type(getattr(model, "lm_head", None)) is torch.nn.Linear):
        return f"{type(model).__name__} is not a plain *ForCausalLM (a peft wrapper?)"
    for layer in inner.layers:
        if any(type(layer.get_submodule(name)) is not torch.nn.Linear for name in _LINEARS):
            return "its projections are not plain nn.Linear (LoRA layers?)"
    return None


class LeanDecoder:
    """A llama-shaped model's forward over a KV cache, returning the last position's logits."""

    def __init__(self, model, quantize: str = "none"):
        why = lean_decode_support(model)
        if why:
            raise ValueError(f"the lean decode step does not support this model: {why}")
        self.inner = model.model
        if quantize == "int8":
            check_int8_support(next(model.parameters()).device)
        group = Int8Projection if quantize == "int8" else Projection
        self.layers = []
        for layer in self.inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append((
                layer, group([attn.q_proj, attn.k_proj, attn.v_proj]), group([attn.o_proj]),
                group([mlp.gate_proj, mlp.up_proj]), group([mlp.down_proj]),
            ))
        self.head = group([model.lm_head])
        self.int8_projections = [p for p in self.projections() if isinstance(p, Int8Projection)]

    def projections(self) -> list[Projection]:
        return [p for _, *groups in self.layers for p in groups] + [self.head]

    def forward(self, cache: Cache, tokens: torch.Tensor, positions: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """Logits [B, V] of the last of `tokens` [B, T], whose keys / values join `cache`.

        `positions` [B, T] are the tokens' rope positions; `key_mask` [B, L] (bool, L = cache
        length after this call) marks the real keys, or is None when no row is padded.
        """
        batch, length = tokens.shape
        x = self.inner.embed_tokens(tokens)
        cos, sin = self.inner.rotary_emb(x, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        mask = attention_mask(key_mask, length, cache.get_seq_length() + length, x.device)
        for index, (layer, qkv, out, gate_up, down) in enumerate(self.layers):
            attn = layer.self_attn
            q, k, v = (t.view(batch, length, -1, attn.head_dim).transpose(1, 2) for t in qkv(layer.input_layernorm(x)))
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            keys, values = cache.layers[index].update(k, v)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling, enable_gqa=True)
            x = x + out(o.transpose(1, 2).reshape(batch, length, -1))[0]
            gate, up = gate_up(layer.post_attention_layernorm(x))
            x = x + down(layer.mlp.act_fn(gate) * up)[0]
        return self.head(self.inner.norm(x[:, -1:]))[0][:, -1, :]

    @property
    def quantization_pending(self) -> bool:
        """A first (fp32) batch has measured the inputs and the int8 projections are not packed yet."""
        return bool(self.int8_projections) and any(p.packed is None for p in self.int8_projections) \
            and self.int8_projections[0].calibrated

    def quantize_if_calibrated(self) -> None:
        """After a first (fp32) batch has measured the inputs, pack every int8 projection.

        It switches every projection from fp32 to int8, so no forward pass may be in flight:
        single-threaded, generate calls it after its batch; SharedEngine under its exclusive lock.
        """
        if self.quantization_pending:
            for projection in self.int8_projections:
                if projection.packed is None:
                    projection.quantize()

    def weights_changed(self, changed: set[int], factors: dict | None = None) -> None:
        """The int8 projections that read any parameter whose id() is in `changed` re-pack, or
        only take new LoRA `factors` (by id() of a linear's weight: A, scaling * B)."""
        for projection in self.int8_projections:
            projection.weights_changed(changed, factors or {})


def attention_mask(key_mask: torch.Tensor | None, queries: int, keys: int, device) -> torch.Tensor | None:
    """[B, 1, queries, keys] bool: a query sees the real keys up to its own position. A padded
    query also sees itself, so that no softmax row is empty (NaN would reach the cache)."""
    if queries == 1:
        return None if key_mask is None else key_mask[:, None, None, :]
    query_at = torch.arange(keys - queries, keys, device=device)[:, None]
    key_at = torch.arange(keys, device=device)[None, :]
    allowed = (key_at <= query_at)[None] if key_mask is None else (key_at <= query_at)[None] & key_mask[:, None, :]
    return (allowed | (key_at == query_at)[None])[:, None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
