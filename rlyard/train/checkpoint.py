"""Checkpoints written atomically: a staging folder renamed into place, then a `latest` pointer.

A run killed at any instant leaves either the previous complete checkpoint or the new one,
never a half-written folder that resume would trust.
"""
from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlyard.observe.store import write_atomic
from rlyard.models.lora import is_peft, load_trainable_state_dict, save_adapter, trainable_state_dict


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: Path, step: int, model, optimizer, state: dict[str, Any], keep: int = 2, critic=None,
                    gathered=None) -> Path:
    """Save weights (adapter or full), optimizer, RNG states and `state` (step, data position ...).

    A LoRA run also gets adapter/, the same adapter in peft's format, so that
    `PeftModel.from_pretrained(base, ".../step_N/adapter")` or vLLM load it without rlyard.
    `critic` (PPO's value head and its optimizer, `rlyard.train.critic.Critic`) goes to critic.pt.
    `gathered`: a sharded model's full states, gathered on this rank (`ray_learners.Gathered`);
    the weights files are then the same as an unsharded run's, the optimizer state is keyed by
    parameter name.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    staging = root / f".staging-step_{step:06d}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    torch.save(trainable_state_dict(model) if gathered is None else adapter_keys(model, gathered.model_state), staging / "weights.pt")
    if is_peft(model):
        save_adapter(model, staging / "adapter", None if gathered is None else gathered.model_state)
    torch.save(optimizer.state_dict() if gathered is None else gathered.optimizer_state, staging / "optimizer.pt")
    if critic is not None:
        torch.save(critic.state_dict(), staging / "critic.pt")
    torch.save({**state, "step": step, "rng": rng_state()}, staging / "state.pt")
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    write_atomic(root / "latest", final.name.encode())
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def adapter_keys(model, model_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`trainable_state_dict`'s keys for a state in `model.state_dict()`'s (LoRA: peft's adapter format)."""
    if not is_peft(model):
        return model_state
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model, state_dict=model_state, save_embedding_layers=False)


def load_sharded(path: Path, model, optimizer=None) -> None:
    """A checkpoint saved from gathered states, into this rank's shards (a collective: every rank
    reads the same files and calls this at once). weights.pt holds `trainable_state_dict`'s keys;
    the sharded model takes `model.state_dict()`'s, which for LoRA name the adapter."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    weights = torch.load(path / "weights.pt", map_location="cpu", weights_only=True)
    if is_peft(model):
        adapter = model.active_adapter
        weights = {k.replace(".lora_A.", f".lora_A.{adapter}.").replace(".lora_B.", f".lora_B.{adapter}."): v for k, v in weights.items()}
    options = StateDictOptions(full_state_dict=True, strict=not is_peft(model))
    set_model_state_dict(model, weights, options=options)
    if optimizer is not None:
        state = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if (path / "state.pt").exists() else None


def find_checkpoint(given: Path) -> Path | None:
    """The checkpoint a user names: one checkpoints/step_N folder as it is, or a run folder's latest."""
    given = Path(given)
    return given if (given / "weights.pt").exists() else latest_checkpoint(given)


def load_checkpoint(path: Path, model, optimizer=None, critic=None) -> dict[str, Any]:
    """Restore weights, optimizer and critic in place; return the saved state (RNG already restored).
    A model sharded over several ranks loads through `load_sharded` (every rank at once)."""
    if critic is not None and not (path / "critic.pt").exists():
        raise ValueError(f"{path} has no critic.pt: it was saved by a run without a value head (algo.advantage is not gae)")
    from rlyard.train import fsdp

    if fsdp.is_sharded(model):
        load_sharded(path, model, optimizer)
    else:
        load_trainable_state_dict(model, torch.load(path / "weights.pt", map_location="cpu", weights_only=True))
        if optimizer is not None:
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True))
    if critic is not None:
        critic.load_state_dict(torch.load(path / "critic.pt", map_location="cpu", weights_only=True))
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
    set_rng_state(state["rng"])
    return state
