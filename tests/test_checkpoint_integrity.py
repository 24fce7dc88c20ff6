"""Storage faults: a checkpoint's manifest (size and sha256 of every file) catches a corrupted or
cut file at resume, names it, and the run resumes from the checkpoint before; a full disk during
a checkpoint write (a real, small tmpfs where this machine lets root mount one, and an injected
ENOSPC in a run) leaves the previous checkpoint intact and fails with a clear message.
"""
from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest
import torch

from rlyard.config import load_config
from rlyard.orchestrate.entry import train
from rlyard.train import checkpoint as ckpt
from rlyard.train.checkpoint import CheckpointCorrupt, CheckpointWriteError, latest_checkpoint, save_checkpoint, verify_checkpoint


def config_for(model_dir: Path, run_dir: Path, *more: str):
    return load_config(None, [
        f"model.name={model_dir}", "env.name=rlyard.testing.faults:SINGLE", "env.train_size=8", "rollout.prompts_per_step=2",
        "rollout.n=4", "rollout.max_new_tokens=6", "eval.size=0", "output.progress=false", "output.plot=false",
        f"output.run_dir={run_dir}", "model.lora.rank=2", "model.lora.alpha=4", "algo.lr=2e-2", "output.checkpoint_every=2", *more,
    ])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_dir):
    """Four steps, checkpoints at 2 and 4 (a LoRA run: weights.pt, adapter/, optimizer.pt, state.pt)."""
    run_dir = tmp_path_factory.mktemp("run")
    train(config_for(tiny_model_dir, run_dir, "train.steps=4"), run_dir)
    return run_dir


def copy_run(run_dir: Path, to: Path) -> Path:
    subprocess.run(["cp", "-a", str(run_dir), str(to)], check=True)
    return to


def test_every_file_is_in_the_manifest(finished_run):
    step4 = finished_run / "checkpoints" / "step_000004"
    files = json.loads((step4 / "manifest.json").read_text())["files"]
    assert {"weights.pt", "optimizer.pt", "state.pt", "adapter/adapter_model.safetensors"} <= set(files)
    assert files["weights.pt"]["bytes"] == (step4 / "weights.pt").stat().st_size
    verify_checkpoint(step4)


@pytest.mark.parametrize("damage, says", [
    ("flip", "optimizer.pt: sha256 does not match the manifest"),
    ("truncate", "optimizer.pt: truncated or grown"),
    ("delete", "optimizer.pt: missing (listed in manifest.json)"),
    ("manifest", "manifest.json: unreadable"),
])
def test_a_damaged_checkpoint_is_named_and_the_one_before_is_used(finished_run, tmp_path, damage, says, capsys):
    run_dir = copy_run(finished_run, tmp_path / "run")
    step4 = run_dir / "checkpoints" / "step_000004"
    target = step4 / "optimizer.pt"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-100])
    elif damage == "delete":
        target.unlink()
    else:
        (step4 / "manifest.json").write_text('{"files": {"weights.pt": ')
    with pytest.raises(CheckpointCorrupt, match=says.replace("(", r"\(").replace(")", r"\)")):
        verify_checkpoint(step4)
    assert latest_checkpoint(run_dir) == run_dir / "checkpoints" / "step_000002"
    assert f"checkpoint step_000004 is unusable: {step4}" in capsys.readouterr().out


def test_resume_skips_a_corrupted_checkpoint_and_redoes_its_steps(finished_run, tmp_path, tiny_model_dir, capsys):
    run_dir = copy_run(finished_run, tmp_path / "run")
    weights = run_dir / "checkpoints" / "step_000004" / "weights.pt"
    original = torch.load(weights, weights_only=True)
    data = bytearray(weights.read_bytes())
    data[-20] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupt, match="weights.pt: sha256"):  # loading it directly is refused too
        ckpt.load_checkpoint(weights.parent, torch.nn.Linear(1, 1))

    train(config_for(tiny_model_dir, run_dir, "train.steps=4"), run_dir, resume=True)
    out = capsys.readouterr().out
    assert "step_000004 is unusable" in out and "weights.pt: sha256 does not match" in out
    assert "resumed from" in out and "step_000002 at step 2" in out
    assert read_jsonl(run_dir / "trajectories.jsonl") == read_jsonl(finished_run / "trajectories.jsonl")
    redone = torch.load(weights, weights_only=True)
    assert all(torch.equal(original[k], redone[k]) for k in original)  # steps 3-4 redone exactly
    verify_checkpoint(weights.parent)


def test_a_full_disk_in_a_run_keeps_the_previous_checkpoint(tmp_path, tiny_model_dir, monkeypatch):
    """ENOSPC injected into step 4's optimizer.pt write: the run stops with the cause and the
    folder to resume; step 2's checkpoint is untouched, no staging folder is left, resume finishes."""
    run_dir = tmp_path / "run"
    real_save = torch.save

    def save(obj, path, *args, **kwargs):
        if str(path).endswith("step_000004/optimizer.pt"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(ckpt.torch, "save", save)
    with pytest.raises(CheckpointWriteError) as failed:
        train(config_for(tiny_model_dir, run_dir, "train.steps=4"), run_dir)
    message = str(failed.value)
    assert "checkpoint step 4 could not be written" in message and "the disk is full" in message
    assert f"the previous checkpoint {run_dir / 'checkpoints' / 'step_000002'} is intact" in message
    assert f"rlyard train --resume {run_dir}" in message
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "step_000002"]
    verify_checkpoint(run_dir / "checkpoints" / "step_000002")
    monkeypatch.setattr(ckpt.torch, "save", real_save)
    train(config_for(tiny_model_dir, run_dir, "train.steps=4"), run_dir, resume=True)
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]
    verify_checkpoint(run_dir / "checkpoints" / "step_000004")


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_really_full_disk_keeps_the_previous_checkpoint(small_disk):
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 64)).sum().backward()
    optimizer.step()
    first = save_checkpoint(small_disk, 1, model, optimizer, {"stream": {"position": 2}})
    used = sum(p.stat().st_size for p in first.iterdir())
    free = subprocess.run(["df", "--output=avail", "-B1", str(small_disk)], capture_output=True, text=True, check=True).stdout.split()[-1]
    (small_disk / "filler").write_bytes(b"\0" * (int(free) - used // 2))  # room for half a checkpoint
    with pytest.raises(CheckpointWriteError, match="checkpoint step 2 could not be written .*the disk is full"):
        save_checkpoint(small_disk, 2, model, optimizer, {"stream": {"position": 4}})
    assert sorted(p.name for p in (small_disk / "checkpoints").iterdir()) == ["latest", "step_000001"]
    verify_checkpoint(first)
    assert latest_checkpoint(small_disk) == first
    (small_disk / "filler").unlink()
    assert save_checkpoint(small_disk, 2, model, optimizer, {"stream": {"position": 4}}) == latest_checkpoint(small_disk)
