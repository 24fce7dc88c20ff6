"""LoRA adapters loaded at run time (vLLM's `/v1/load_lora_adapter` API), served by name.

A trainer that samples from an external server (`rollout.engine=openai`) writes its adapter
with peft's `save_pretrained` after every step and asks the server to load it; requests then
name the adapter as their `model`. `rlyard serve` implements the same calls, so it can be that
server: an adapter is kept as its (A, B, scale) factors, and the engine's weights become base +
scale * B @ A when a batch for that adapter runs (the scheduler switches between batches, never
inside one). Only the weights an adapter touches are copied, once, to restore the base.
"""
from __future__ import annotations

import math
import threading
from pathlib import Path

import torch

from rlyard.models.lora import add_low_rank_
from rlyard.serve.schema import ApiError

PREFIX = "base_model.model."


class Adapters:
    def __init__(self, engine, base_name: str):
        self.engine, self.base_name = engine, base_name
        self.loaded: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor, float]]] = {}
        self.paths: dict[str, str] = {}
        self.active = base_name  # whose weights the engine holds now (scheduler thread only)
        self.base: dict[str, torch.Tensor] = {}  # the served weights of every parameter an adapter changed
        self.lock = threading.Lock()

    def names(self) -> list[str]:
        with self.lock:
            return list(self.loaded)

    def models(self) -> list[dict]:
        """`/v1/models` rows for the adapters, with their base as `parent` (as vLLM lists them)."""
        with self.lock:
            return [{"id": name, "object": "model", "created": 0, "owned_by": "rlyard", "root": self.paths[name],
                     "parent": self.base_name} for name in self.loaded]

    def load(self, name: str, path: str, inplace: bool = False) -> None:
        """Read an adapter folder (peft's format) and check it fits the served model."""
        model = getattr(self.engine, "model", None)
        if model is None or not hasattr(self.engine, "update_weights"):
            raise ApiError(400, "this server's engine cannot load LoRA adapters", "lora_path")
        if name == self.base_name:
            raise ApiError(400, f"'{name}' is the served model's name", "lora_name")
        with self.lock:
            if name in self.loaded and not inplace:
                raise ApiError(400, f"The lora adapter '{name}' has already been loaded (use load_inplace to replace it)",
                               "lora_name")
        factors = read_adapter(Path(path), dict(model.named_parameters(remove_duplicate=False)))
        with self.lock:
            self.loaded[name], self.paths[name] = factors, str(path)
            if self.active == name:
                self.active = None  # the engine holds the old factors: recompute at the next batch

    def unload(self, name: str) -> None:
        with self.lock:
            if name not in self.loaded:
                raise ApiError(404, f"The lora adapter '{name}' cannot be found", "lora_name", "model_not_found")
            del self.loaded[name], self.paths[name]
            if self.active == name:
                self.active = None

    def activate(self, name: str) -> None:
        """Give the engine `name`'s weights (the base model's for the served name). Runs in the
        scheduler's thread between engine calls; the engine's policy version is left as it is."""
        with self.lock:
            if name == self.active:
                return
            factors = {} if name == self.base_name else self.loaded[name]
        params = dict(self.engine.model.named_parameters(remove_duplicate=False))
        weights = {}
        with torch.no_grad():
            for param in set(self.base) | set(factors):
                if param not in self.base:  # never changed so far: this is the served weight
                    self.base[param] = params[param].detach().clone()
                weight = self.base[param].clone()
                if param in factors:
                    lora_a, lora_b, scale = factors[param]
                    add_low_rank_(weight, lora_a, lora_b, scale)
                weights[param] = weight
        self.engine.update_weights(self.engine.policy_version, weights)
        self.active = name


def read_adapter(path: Path, params: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """{weight name: (A, B, scale)} of a plain LoRA adapter; variants that are not W + s * B @ A
    (DoRA, extra trained modules, per-module ranks) are refused rather than served wrong."""
    from peft import PeftConfig
    from peft.utils import load_peft_weights

    if not (path / "adapter_config.json").is_file():
        raise ApiError(400, f"no adapter_config.json in {path} (the server must see the trainer's folder)", "lora_path")
    try:
        config = PeftConfig.from_pretrained(str(path))
        state = load_peft_weights(str(path), device="cpu")
    except Exception as exc:  # a corrupt or foreign folder: the caller's problem, said as such
        raise ApiError(400, f"cannot read the adapter in {path}: {type(exc).__name__}: {exc}", "lora_path") from None
    unsupported = [what for what, used in (("DoRA", getattr(config, "use_dora", False)),
                                           ("modules_to_save", getattr(config, "modules_to_save", None)),
                                           ("rank_pattern", getattr(config, "rank_pattern", None)),
                                           ("alpha_pattern", getattr(config, "alpha_pattern", None)),
                                           ("fan_in_fan_out", getattr(config, "fan_in_fan_out", False))) if used]
    if config.peft_type != "LORA":  # PeftType is a str enum
        unsupported.append(f"peft_type {config.peft_type}")
    if unsupported:
        raise ApiError(400, f"rlyard serve loads plain LoRA adapters only; {path} uses {', '.join(map(str, unsupported))}", "lora_path")
    scale = config.lora_alpha / (math.sqrt(config.r) if config.use_rslora else config.r)
    factors = {}
    for key, tensor in state.items():
        if not key.endswith(".lora_A.weight"):
            if not key.endswith(".lora_B.weight"):
                raise ApiError(400, f"the adapter in {path} has a weight rlyard serve cannot apply: {key}", "lora_path")
            continue
        module = key.removeprefix(PREFIX).removesuffix(".lora_A.weight")
        lora_b = state.get(f"{PREFIX}{module}.lora_B.weight")
        name = f"{module}.weight"
        if lora_b is None or name not in params or params[name].shape != (lora_b.shape[0], tensor.shape[1]):
            raise ApiError(400, f"the adapter in {path} does not fit the served model at {name}", "lora_path")
        factors[name] = (tensor.float(), lora_b.float(), scale)
    return factors
