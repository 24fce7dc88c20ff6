"""Building the pieces of a run from its config: model, engine, learner, tasks."""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import numpy as np
import torch

from rlyard.config import RunConfig, training_algo
from rlyard.data import TaskStream
from rlyard.engines import HFEngine
from rlyard.envs import Family, get_family
from rlyard.models import add_lora, is_peft, load_model, load_tokenizer
from rlyard.models.lora import merged_weights
from rlyard.train import Learner
from rlyard.types import Task


@dataclass
class Components:
    tokenizer: object
    model: object
    engine: HFEngine
    learner: Learner | None
    family: Family
    stream: TaskStream | None
    eval_tasks: list[Task]
    stop_token_ids: tuple[int, ...]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def stop_tokens(tokenizer) -> tuple[int, ...]:
    """End of turn: eos plus the chat template's end-of-message token when it differs."""
    ids = {tokenizer.eos_token_id}
    for name in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        token_id = tokenizer.convert_tokens_to_ids(name)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            ids.add(token_id)
    return tuple(sorted(i for i in ids if i is not None))


def build(config: RunConfig, train: bool = True, model=None, adapter: bool | None = None) -> Components:
    """The run's pieces. `train=False` builds only what sampling needs (no learner, no training
    tasks); `adapter` (default: `train`) adds the LoRA adapter, e.g. to load a checkpoint into it."""
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    seed_everything(config.train.seed)
    tokenizer = load_tokenizer(config.model.name)
    if model is None:
        model = load_model(config.model.name, config.model.dtype, config.model.device)
        if (train if adapter is None else adapter) and config.model.lora.enabled:
            lora = config.model.lora
            model = add_lora(model, lora.rank, lora.alpha, lora.dropout, lora.target_modules)
    family = get_family(config.env.name)
    env_seed, options = config.env.seed, config.env.options
    stream = TaskStream(family.make_tasks("train", config.env.train_size, env_seed, **options), seed=env_seed) if train else None
    eval_tasks = family.make_tasks("eval", config.eval.size, env_seed, **options) if config.eval.size else []
    learner = Learner(model, training_algo(config), config.rollout.temperature, config.train.micro_batch_size,
                      config.rollout.max_new_tokens) if train else None
    engine = HFEngine(engine_model_for(model, config), tokenizer.pad_token_id, quantize=config.rollout.quantize)
    return Components(tokenizer, model, engine, learner, family, stream, eval_tasks, stop_tokens(tokenizer))


def engine_model_for(model, config: RunConfig):
    """LoRA: a plain copy that receives merged weights (no adapter overhead while sampling).

    Full fine-tuning shares the learner's model in sync mode: its weights are the policy already.
    In async mode rollout threads sample while the learner steps, and int8 rollouts swap the
    engine's linear layers, so the engine gets its own copy and receives every weight with each update.
    """
    if not is_peft(model) and config.orchestrate.mode == "sync" and config.rollout.quantize == "none":
        return model
    engine_model = copy.deepcopy(model) if not is_peft(model) else load_model(config.model.name, config.model.dtype, config.model.device)
    engine_model.requires_grad_(False)
    return engine_model.eval()


def push_weights(c: "Components", version: int) -> None:
    """Give the engine the learner's current policy as `version` (nothing to copy when they share a model)."""
    if is_peft(c.model):
        weights = merged_weights(c.model)
    elif getattr(c.engine, "model", None) is c.model:
        weights = None
    else:
        weights = {name: param.detach() for name, param in c.model.named_parameters()}
    c.engine.update_weights(version, weights)
