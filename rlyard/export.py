"""`rlyard export`: a run's trained policy as a Hugging Face folder that transformers, PEFT and vLLM load.

A checkpoint holds what resuming needs (weights.pt: the LoRA adapter, or every weight with full
fine-tuning), in a form only rlyard reads. The export rebuilds the policy exactly as training saw
it (`policy_model` + weights.pt, so a `model.init_from` chain is merged in by `initial_model`)
and writes it with `save_pretrained`: merged weights by default, or only the adapter.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from rlyard.config import ConfigError, RunConfig, load_run_config
from rlyard.models import TORCH_DTYPES, is_peft, load_tokenizer
from rlyard.models.lora import load_trainable_state_dict, save_adapter
from rlyard.orchestrate.setup import policy_model, stop_tokens
from rlyard.train import find_checkpoint

RUN_EXPECTED = "expected the folder of an `rlyard train` / `rlyard sft` run, or one of its checkpoints/step_N folders"


@dataclass(frozen=True)
class Exported:
    out: Path  # the folder written
    checkpoint: Path  # the checkpoints/step_N folder it came from
    adapter: bool  # only the LoRA adapter (else merged weights)
    dtype: str  # of the written weights
    base_model: str | None  # adapter only: what the adapter applies to (adapter_config.json's base_model_name_or_path)
    init_from: str | None  # the run's model.init_from: its weights are inside the export (merged) or under the adapter
    lora_rank: int | None  # adapter only: vLLM refuses ranks above --max-lora-rank (16 unless set)
    files: tuple[str, ...]  # names written into `out`


def run_checkpoint(given: Path) -> tuple[RunConfig, Path]:
    """(the run's config, the checkpoint to export) for a run folder (its latest) or one step_N folder."""
    given = Path(given)
    if not given.is_dir():
        raise ConfigError(f"{given} is not a folder ({RUN_EXPECTED})")
    checkpoint = find_checkpoint(given)
    run_dir = checkpoint.parent.parent if checkpoint is not None else given
    if not (run_dir / "config.yaml").exists():
        raise ConfigError(f"{given} is not a run folder: it has no config.yaml ({RUN_EXPECTED})")
    if checkpoint is None:
        raise ConfigError(f"{given} has no checkpoint yet (no checkpoints/latest): the run stopped before its first "
                          "checkpoint (output.checkpoint_every); resume it (rlyard train / rlyard sft --resume RUN_DIR) or export another run")
    return load_run_config(run_dir), checkpoint


def check_out(out: Path, run_dir: Path, force: bool) -> None:
    """Refuse to replace a folder with content unless forced, and even then the run's own folders:
    --out . --force from inside the run would delete its checkpoints."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")
    if out.exists() and any(out.iterdir()) and not force:
        raise ConfigError(f"--out {out} exists and is not empty; pass --force to replace it")
    target, run, checkpoints = out.resolve(), run_dir.resolve(), run_dir.resolve() / "checkpoints"
    if target == run or target in run.parents or target == checkpoints or checkpoints in target.parents:
        raise ConfigError(f"--out {out} holds the run being exported ({run_dir}) or its checkpoints; pick another folder")


def trained_policy(config: RunConfig, checkpoint: Path):
    """The policy at `checkpoint`, as the learner held it: starting weights + a LoRA adapter (for
    LoRA runs) with weights.pt loaded. On the CPU: exporting is copying, and a GPU may be busy or absent."""
    model = policy_model(config.model.model_copy(update={"device": "cpu", "gradient_checkpointing": False}), adapter=True)
    load_trainable_state_dict(model, torch.load(checkpoint / "weights.pt", map_location="cpu", weights_only=True))
    return model.eval()


def write_merged(model, tokenizer, folder: Path, dtype: torch.dtype) -> None:
    """Merged in the training dtype, then cast, so the cast rounds once. The generation config stops
    at the chat template's end-of-turn token as rlyard's rollouts do (`stop_tokens`), which
    transformers' generate and vLLM read from it."""
    merged = model.merge_and_unload() if is_peft(model) else model
    merged = merged.to(dtype)
    merged.generation_config.eos_token_id = list(stop_tokens(tokenizer))
    merged.generation_config.pad_token_id = tokenizer.pad_token_id
    merged.save_pretrained(folder)


def write_adapter(model, folder: Path, dtype: torch.dtype) -> str | None:
    """The adapter alone; returns the base it records (what it must be loaded on)."""
    save_adapter(model.to(dtype), folder)
    return model.peft_config[model.active_adapter].base_model_name_or_path


def export_run(given: Path, out: Path, adapter: bool = False, dtype: str | None = None, force: bool = False) -> Exported:
    """Write `given`'s policy to `out` through a staging folder renamed into place, so a failed or
    killed export leaves `out` as it was (an existing `out` is swapped out, then deleted)."""
    config, checkpoint = run_checkpoint(given)
    out = Path(out)
    check_out(out, checkpoint.parent.parent, force)
    if adapter and not config.model.lora.enabled:
        raise ConfigError(f"{given} is a full fine-tuning run (model.lora.enabled=false): it has no adapter to export; "
                          "drop --adapter to export its weights")
    dtype = dtype or config.model.dtype
    model = trained_policy(config, checkpoint)
    tokenizer = load_tokenizer(config.model.name, config.model.chat_template)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{out.name}-", dir=out.parent))
    base = None
    try:
        if adapter:
            base = write_adapter(model, staging, TORCH_DTYPES[dtype])
        else:
            write_merged(model, tokenizer, staging, TORCH_DTYPES[dtype])
        tokenizer.save_pretrained(staging)
        files = tuple(sorted(p.name for p in staging.iterdir()))
        replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    rank = config.model.lora.rank if adapter else None
    return Exported(out, checkpoint, adapter, dtype, base, config.model.init_from, rank, files)


def replace_folder(staging: Path, out: Path) -> None:
    open_to_umask(staging)
    if not out.exists():
        os.replace(staging, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".old-{out.name}-", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(staging, out)
    shutil.rmtree(old, ignore_errors=True)


def open_to_umask(folder: Path) -> None:
    """mkdtemp makes the folder owner-only and safetensors its files too; a model folder is usually
    read by others (a vLLM server, a container), so it gets the modes a plain mkdir / open would."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def report(result: Exported) -> str:
    """What was written and the lines that load it."""
    kind = "the LoRA adapter" if result.adapter else "merged weights"
    lines = [f"[rlyard] exported {kind} ({result.dtype}) of {result.checkpoint} to {result.out}",
             f"[rlyard] files: {', '.join(result.files)}"]
    return "\n".join(lines + load_hint(result))


def load_hint(result: Exported) -> list[str]:
    out = result.out
    if not result.adapter:
        return ["load it:",
                f"  transformers: AutoModelForCausalLM.from_pretrained('{out}'); AutoTokenizer.from_pretrained('{out}')",
                f"  vLLM:         vllm serve {out}   or   LLM(model='{out}')"]
    lines = [f"[rlyard] the adapter applies on top of {result.base_model}"]
    if result.init_from:
        lines += [f"[rlyard] that is the policy of model.init_from={result.init_from} (this run started from it), not the "
                  f"bare model.name; make it a model folder first: rlyard export {result.init_from} --out BASE_DIR"]
    base = "BASE_DIR" if result.init_from else result.base_model
    # vLLM takes ranks up to 16 unless told, and only powers of two (from 8) as the limit
    rank = "" if result.lora_rank <= 16 else f" --max-lora-rank {1 << (result.lora_rank - 1).bit_length()}"
    return lines + ["load it:",
                    f"  PEFT: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained('{base}'), '{out}')",
                    f"  vLLM: vllm serve {base} --enable-lora{rank} --lora-modules adapter={out}"]
