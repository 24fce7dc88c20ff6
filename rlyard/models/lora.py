"""LoRA through peft, and the reference policy as "the same model with the adapter off"."""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from rlyard.errors import ConfigError


def add_lora(model, rank: int, alpha: int, dropout: float, target_modules: list[str], last_layers: int | None = None):
    """A fresh adapter on `target_modules`; with `last_layers`, only in the last N decoder layers.

    Why the last layers: nothing below the lowest adapted layer needs a gradient, so backward
    stops there (on the embedded model, an SFT step with the last 15 of 30 layers takes 0.64x the
    time of one with all of them; docs/sft.md, bench/results/sft_lora_layers.json)."""
    from peft import LoraConfig, get_peft_model

    tied = {"lm_head", "embed_tokens"} & set(target_modules)
    if tied and getattr(model.config, "tie_word_embeddings", False):
        raise ValueError(f"LoRA on {sorted(tied)} of a model with tied embeddings would change both; drop it from model.lora.target_modules")
    layers = None
    if last_layers is not None:
        total = getattr(model.config, "num_hidden_layers", None)
        if total is None or last_layers > total:
            raise ConfigError(f"model.lora.last_layers={last_layers}: the model has {total} decoder layers")
        layers = list(range(total - last_layers, total))
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, task_type="CAUSAL_LM",
                        layers_to_transform=layers)
    return get_peft_model(model, config)


def is_peft(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


@contextlib.contextmanager
def reference_mode(model):
    """Run the frozen base weights: with LoRA this needs no second copy of the model."""
    if not is_peft(model):
        raise ValueError("a KL term against the reference needs LoRA (lora.enabled=true); full fine-tuning keeps no reference copy")
    with model.disable_adapter(), torch.no_grad():
        yield model


def trainable_state_dict(model) -> dict[str, torch.Tensor]:
    """What a checkpoint must keep: the adapter for LoRA, every weight otherwise."""
    if is_peft(model):
        from peft import get_peft_model_state_dict

        # rlyard never resizes the vocabulary, so the base embeddings need no copy; peft's "auto"
        # would reread the base's config.json (or ask the Hub) at every save to find that out.
        state = get_peft_model_state_dict(model, save_embedding_layers=False)
        return {k: v.detach().clone() for k, v in state.items()}
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def load_trainable_state_dict(model, state: dict[str, torch.Tensor]) -> None:
    if is_peft(model):
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, state)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"checkpoint adapter has keys the model lacks: {unexpected[:5]}")
    else:
        model.load_state_dict(state)


def save_adapter(model, folder: Path, state_dict: dict | None = None) -> None:
    """The adapter in peft's own format (adapter_config.json + adapter_model.safetensors), the one
    `PeftModel.from_pretrained` and vLLM's LoRA support read; weights.pt is rlyard's resume format.

    adapter_config.json names as its base the folder or id the base weights came from, made
    absolute so that the folder still loads from elsewhere (a run started with model.init_from
    names that run's checkpoint: `initial_model`).
    """
    config = model.peft_config[model.active_adapter]
    base = config.base_model_name_or_path
    if base and Path(base).exists():
        config.base_model_name_or_path = str(Path(base).resolve())
    # state_dict: a sharded model's adapter, gathered in model.state_dict()'s keys (train/checkpoint.py)
    model.save_pretrained(folder, save_embedding_layers=False, **({"state_dict": state_dict} if state_dict is not None else {}))


# The keys of a LoRA linear's factors in a weight push: f"{module}{FACTOR_DOWN}" is A (r, in), f"{module}{FACTOR_UP}"
# is scaling * B (out, r), so that W = base + up @ down. No plain model has parameters named so.
FACTOR_DOWN, FACTOR_UP = ".lora_factor_down", ".lora_factor_up"


def factor_entries(plain: str, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float) -> dict[str, torch.Tensor]:
    """One linear's factors as a push carries them: A and scale * B in fp32, under FACTOR_DOWN /
    FACTOR_UP after its plain name (what the int8 engine reads); `lora_factors` and the sharded
    learner's `fsdp.rollout_weights` both build them here."""
    return {plain + FACTOR_DOWN: lora_a.detach().float().clone(), plain + FACTOR_UP: lora_b.detach().float() * scale}


def adapted_linears(model):
    """(name in the plain base model, LoRA layer, its active adapters with LoRA weights) for every
    LoRA-wrapped linear: what `merged_weights` and `lora_factors` both read."""
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and hasattr(module, "base_layer"):
            yield name.removeprefix("base_model.model."), module, [a for a in module.active_adapters if a in module.lora_A]


@torch.no_grad()
def lora_factors(model) -> dict[str, torch.Tensor]:
    """Every LoRA-wrapped linear's factors, keyed as in the plain base model (FACTOR_DOWN / FACTOR_UP).

    For an engine that keeps the base weights quantized and adds the low-rank term itself (the
    int8 engine): with them a push need not re-pack what merged weights would force it to."""
    factors = {}
    for plain, module, active in adapted_linears(model):
        if len(active) != 1:
            continue  # several adapters at once: the engine re-packs the merged weights instead
        adapter = active[0]
        factors |= factor_entries(plain, module.lora_A[adapter].weight, module.lora_B[adapter].weight, module.scaling[adapter])
    return factors


@torch.no_grad()
def merged_weights(model) -> dict[str, torch.Tensor]:
    """W + scale * B @ A for every LoRA-wrapped linear, keyed as in the plain base model.

    This is what an inference engine with its own copy of the weights needs after each step;
    the learner's model is left untouched (no merge / unmerge drift).
    """
    merged = {}
    for plain, module, active in adapted_linears(model):
        weight = module.base_layer.weight.detach().clone()
        for adapter in active:
            add_low_rank_(weight, module.lora_A[adapter].weight, module.lora_B[adapter].weight, module.scaling[adapter])
        merged[f"{plain}.weight"] = weight
    return merged


def add_low_rank_(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float) -> torch.Tensor:
    """weight += scale * B @ A in place, in weight's dtype and on its device: plain addmm, where
    peft's get_delta_weight is ~50x slower on a CPU."""
    return weight.addmm_(lora_b.to(weight), lora_a.to(weight), alpha=scale)
