"""Checkpoints written atomically: a staging folder renamed into place, then a `latest` pointer.

A run killed at any instant leaves either the previous complete checkpoint or the new one,
never a half-written folder that resume would trust. Each folder's manifest.json, written last
before the rename, holds every file's size and sha256: a checkpoint corrupted or cut short later
(a bad disk, a copy that stopped) fails its check at resume with the file named, and the run
resumes from the newest one that passes. A write that fails (a full disk) removes its staging
folder and raises CheckpointWriteError; the previous checkpoint is left as it was.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlyard.models.lora import is_peft, load_trainable_state_dict, save_adapter, trainable_state_dict
from rlyard.observe.store import write_atomic
from rlyard.testing.kill import kill_point

MANIFEST = "manifest.json"
FULL_DISK_BYTES = 1 << 20  # a write that failed with less free space than this is said to have filled the disk


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or trusted; the message names the folder or file."""


class CheckpointWriteError(CheckpointError):
    pass


class CheckpointCorrupt(CheckpointError):
    pass


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
    for stale in root.glob(".staging-*"):  # left by a run killed mid-write
        shutil.rmtree(stale, ignore_errors=True)
    try:
        staging.mkdir()
        torch.save(trainable_state_dict(model) if gathered is None else adapter_keys(model, gathered.model_state), staging / "weights.pt")
        if is_peft(model):
            save_adapter(model, staging / "adapter", None if gathered is None else gathered.model_state)
        torch.save(optimizer.state_dict() if gathered is None else gathered.optimizer_state, staging / "optimizer.pt")
        if critic is not None:
            torch.save(critic.state_dict(), staging / "critic.pt")
        torch.save({**state, "step": step, "rng": rng_state()}, staging / "state.pt")
        kill_point("checkpoint")
        write_manifest(staging)
    except Exception as error:  # torch.save on a full disk raises RuntimeError ("unexpected pos"), not OSError
        free = shutil.disk_usage(root).free  # before the staging folder gives its space back
        shutil.rmtree(staging, ignore_errors=True)
        previous = latest_checkpoint(run_dir, quiet=True)
        full = getattr(error, "errno", None) == errno.ENOSPC or free < FULL_DISK_BYTES
        why = f"the disk is full, {free} bytes free" if full else type(error).__name__
        raise CheckpointWriteError(
            f"checkpoint step {step} could not be written to {staging} ({why}: {error}); "
            f"{'the previous checkpoint ' + str(previous) + ' is intact' if previous else 'no earlier checkpoint exists'}. "
            f"Free space and continue with: rlyard train --resume {run_dir}") from error
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    _fsync_dir(root)
    kill_point("checkpoint_pointer")
    write_atomic(root / "latest", final.name.encode())
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def _sha256(path: Path, sync: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
        if sync:  # on disk before the manifest vouches for it
            os.fsync(f.fileno())
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """manifest.json: size and sha256 of every file in `folder` (each fsynced first)."""
    files = {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p, sync=True)} for p in _files(folder)}
    write_atomic(folder / MANIFEST, json.dumps({"files": files}, indent=1).encode())
    _fsync_dir(folder)


def verify_checkpoint(path: Path) -> None:
    """Raise CheckpointCorrupt naming the first file that is missing, cut short or changed.
    A checkpoint from before manifests (none in the folder) passes if its state.pt exists."""
    path = Path(path)
    manifest = path / MANIFEST
    if not manifest.exists():
        if not (path / "state.pt").exists():
            raise CheckpointCorrupt(f"{path / 'state.pt'}: missing (and the checkpoint has no {MANIFEST})")
        return
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as error:
        raise CheckpointCorrupt(f"{manifest}: unreadable ({error})") from None
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointCorrupt(f"{file}: missing (listed in {MANIFEST})")
        size = file.stat().st_size
        if size != expected["bytes"]:
            raise CheckpointCorrupt(f"{file}: truncated or grown: {size} bytes, the manifest says {expected['bytes']}")
        if _sha256(file) != expected["sha256"]:
            raise CheckpointCorrupt(f"{file}: sha256 does not match the manifest (the file is corrupted)")


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


def latest_checkpoint(run_dir: Path, quiet: bool = False) -> Path | None:
    """The newest checkpoint of a run that passes `verify_checkpoint`; each one skipped is said.

    The `latest` pointer names the newest one written; a folder newer than it is complete too
    (renamed into place, killed before the pointer moved), so every step_* folder is a candidate.
    """
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    for path in sorted((p for p in root.glob("step_*") if p.is_dir()), reverse=True):
        try:
            verify_checkpoint(path)
        except CheckpointCorrupt as error:
            if not quiet:
                print(f"[rlyard] warning: checkpoint {path.name} is unusable: {error}; trying the one before it", flush=True)
            continue
        return path
    return None


def find_checkpoint(given: Path) -> Path | None:
    """The checkpoint a user names: one checkpoints/step_N folder as it is, or a run folder's latest."""
    given = Path(given)
    return given if (given / "weights.pt").exists() else latest_checkpoint(given)


def load_checkpoint(path: Path, model, optimizer=None, critic=None) -> dict[str, Any]:
    """Restore weights, optimizer and critic in place; return the saved state (RNG already restored).
    A model sharded over several ranks loads through `load_sharded` (every rank at once)."""
    verify_checkpoint(path)
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
