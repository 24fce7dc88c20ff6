"""Building the pieces of a run from its config: model, engine, learner, tasks.

The starting policy is `model.name`, or with `model.init_from` the last checkpoint of an earlier
run (`rlyard sft` or `rlyard train`) on top of that run's own starting policy (`initial_model`).
"""
from __future__ import annotations

import copy
import os
import random
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from rlyard.config import ConfigError, ModelConfig, RunConfig, engine_dtype, load_run_config, loss_constant, training_algo
from rlyard.data import TaskStream, train_pool, train_stream
from rlyard.engines import CoalescingEngine, Engine, HFEngine, OpenAIEngine, ServerError
from rlyard.envs import Family
from rlyard.models import TORCH_DTYPES, add_lora, autocast_choice, engine_dtype_choice, is_peft, load_model, load_tokenizer
from rlyard.models.lora import load_trainable_state_dict, lora_factors, merged_weights, trainable_state_dict
from rlyard.models.templates import end_of_message_id
from rlyard.orchestrate.family import check_reward_arguments, run_family
from rlyard.train import Learner, find_checkpoint
from rlyard.types import Task


@dataclass
class Components:
    tokenizer: object
    model: object
    engine: Engine
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
    """End of turn: eos plus the chat template's end-of-message token when it differs (read from
    the template, e.g. Phi-3's `<|end|>`, and the usual names)."""
    ids = {tokenizer.eos_token_id, end_of_message_id(tokenizer)}
    for name in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        token_id = tokenizer.convert_tokens_to_ids(name)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            ids.add(token_id)
    return tuple(sorted(i for i in ids if i is not None))


def with_run_dir(tasks: list[Task], run_dir: Path | None) -> list[Task]:
    """The run folder in each task's metadata (`run_dir`): where a family writes its artefacts (webdev:
    screenshots/). Explicit per task, not `os.environ`, so that two runs in one process keep their own;
    the variable RLYARD_RUN_DIR is only for the run's subprocesses (Ray actors get it, RUN_DIR_VARIABLE)."""
    if run_dir is None:
        return tasks
    folder = str(Path(run_dir).resolve())
    return [replace(task, metadata={**task.metadata, "run_dir": folder}) for task in tasks]


def build(config: RunConfig, train: bool = True, model=None, adapter: bool | None = None, engine: Engine | None = None,
          shard: bool = False, followers: list = (), run_dir: Path | None = None) -> Components:
    """The run's pieces. `train=False` builds only what sampling needs (no learner, no training
    tasks); `adapter` (default: `train`) adds the LoRA adapter, e.g. to load a checkpoint into it;
    `engine` replaces the one the config names (the Ray backend's fleet). `shard`: this process
    is a rank of an FSDP2 learner (its process group joined); rank 0 gets its `followers`' handles
    and a learner that drives them (rlyard/orchestrate/ray_learners.py)."""
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    seed_everything(config.train.seed)
    tokenizer = load_tokenizer(config.model.name, config.model.chat_template)
    if model is None:
        model = policy_model(config.model, train if adapter is None else adapter)
    if shard:
        from rlyard.train import fsdp

        model = fsdp.shard_model(model)
    family = run_family(config)
    env_seed, options = config.env.seed, config.env.options
    train_tasks = with_run_dir(train_pool(family, config.env), run_dir) if train else []
    stream = train_stream(train_tasks, env_seed, config.train.seed) if train else None
    eval_tasks = with_run_dir(family.make_tasks("eval", config.eval.size, env_seed, **options), run_dir) if config.eval.size else []
    check_reward_arguments(config, train_tasks + eval_tasks)
    learner = None
    if train:
        precision, choice = autocast_choice(config.model.autocast, config.model.device)
        if config.model.autocast == "auto":
            print(f"[rlyard] {choice}", flush=True)
        learner = Learner(model, training_algo(config), config.rollout.temperature, config.train.micro_batch_size,
                          loss_constant(config, family.multi_turn), autocast_dtype=precision, total_steps=config.train.steps)
    if followers:
        from rlyard.orchestrate.ray_learners import GroupLearner

        learner = GroupLearner(learner, followers)
    if engine is None:
        if config.rollout.dtype == "auto" and config.rollout.engine == "hf":
            print(f"[rlyard] {engine_dtype_choice(config.rollout.dtype, config.model.dtype, config.model.device)[1]}", flush=True)
        engine = config_engine(config, model, tokenizer, train)
    return Components(tokenizer, model, engine, learner, family, stream, eval_tasks, stop_tokens(tokenizer))


def config_engine(config: RunConfig, model, tokenizer, train: bool) -> Engine:
    """The engine `rollout.engine` names, behind the coalescer when `rollout.coalesce`."""
    if config.rollout.engine == "openai":
        return openai_engine(config, model, tokenizer, train)
    if config.rollout.engine == "vllm":
        from rlyard.engines.vllm_engine import build_vllm_engine  # vllm is optional (docs/engines.md)

        return build_vllm_engine(config, model, tokenizer, train)
    engine = HFEngine(engine_model_for(model, config), tokenizer.pad_token_id, quantize=config.rollout.quantize,
                      prefix_cache_bytes=config.rollout.prefix_cache_mb << 20)
    return CoalescingEngine(engine) if config.rollout.coalesce else engine  # concurrent episodes share batches


def policy_model(model_config: ModelConfig, adapter: bool = True):
    """The model a run trains: its starting weights (`initial_model`), with a fresh LoRA adapter
    when `adapter` and `model.lora.enabled` (full fine-tuning trains the weights themselves).

    `model.gradient_checkpointing` recomputes each layer in backward. Non-reentrant checkpointing
    needs no `enable_input_require_grads` for LoRA (the frozen embeddings' output need not require
    grad, unlike the reentrant kind). It acts only in train mode with gradients on, so the engine
    (eval mode, no grad) keeps its KV cache when it shares this model; the learner's prompt-sharing
    cache does not survive it (`rlyard.train.logprobs.unshared_continuation_logprobs`).
    """
    model = initial_model(model_config)
    if adapter and model_config.lora.enabled:
        lora = model_config.lora
        model = add_lora(model, lora.rank, lora.alpha, lora.dropout, lora.target_modules, lora.last_layers)
    if model_config.gradient_checkpointing:
        base = model.get_base_model() if is_peft(model) else model
        kwargs = {"use_reentrant": False}
        if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.2x; the old name warns
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return model


def initial_model(model_config: ModelConfig):
    """The starting policy as a plain model (no adapter): `model.name`, or the weights of the
    `model.init_from` run's last checkpoint.

    A LoRA run's adapter is merged into its base and a new run adds a fresh adapter on top,
    rather than training the old one on. So the reference of a KL term (the adapter switched off)
    is the earlier run's policy, e.g. the SFT model that RL should stay near; the new run may
    pick its own rank and target modules, or full fine-tuning; and chains (SFT, then RL, then RL
    again) load the same way at any depth, each run's base being its `init_from` run's result.
    """
    if model_config.init_from is None:
        return load_model(model_config.name, model_config.dtype, model_config.device)
    checkpoint = init_checkpoint(model_config.init_from)
    source = load_run_config(checkpoint.parent.parent).model
    if source.name != model_config.name:
        raise ConfigError(f"model.init_from: {model_config.init_from} was trained from model.name={source.name}, "
                          f"this run has model.name={model_config.name}; set model.name={source.name}")
    model = initial_model(source.model_copy(update={"dtype": model_config.dtype, "device": model_config.device}))
    # The weights only: load_checkpoint would also restore the earlier run's RNG state.
    weights = torch.load(checkpoint / "weights.pt", map_location="cpu", weights_only=True)
    if source.lora.enabled:
        lora = source.lora
        with torch.random.fork_rng(devices=[]):  # the old adapter's throwaway init leaves this run's seeded draws alone
            model = add_lora(model, lora.rank, lora.alpha, 0.0, lora.target_modules, lora.last_layers)
        load_trainable_state_dict(model, weights)
        model = model.merge_and_unload()
    else:
        load_trainable_state_dict(model, weights)
    # A new adapter records this as its base (adapter_config.json): these weights are not model.name's.
    model.name_or_path = str(checkpoint.resolve())
    return model


def init_checkpoint(init_from: str) -> Path:
    """The checkpoint `model.init_from` names: a run folder's latest, or one checkpoints/step_N folder."""
    given = Path(init_from)
    checkpoint = find_checkpoint(given)
    if checkpoint is None:
        raise ConfigError(f"model.init_from: no checkpoint in {given} (expected the folder of a finished "
                          "rlyard sft / rlyard train run, or one of its checkpoints/step_N folders)")
    return checkpoint


def engine_model_for(model, config: RunConfig):
    """LoRA: a plain copy that receives merged weights (no adapter overhead while sampling).

    Full fine-tuning shares the learner's model in sync mode: its weights are the policy already.
    In async mode rollout threads sample while the learner steps, int8 rollouts swap the engine's
    linear layers and `rollout.dtype` gives the engine weights of another dtype, so the engine gets
    its own copy and receives every weight with each update (cast to its dtype as it is copied in).
    """
    dtype = TORCH_DTYPES[engine_dtype(config)]
    own = config.orchestrate.mode != "sync" or config.rollout.quantize != "none" or next(model.parameters()).dtype != dtype
    if not is_peft(model) and not own:
        return model
    engine_model = copy.deepcopy(model) if not is_peft(model) else initial_model(config.model)
    engine_model.requires_grad_(False)
    return engine_model.to(dtype).eval()


def openai_engine(config: RunConfig, model, tokenizer, train: bool) -> OpenAIEngine:
    """The engine over the server at `rollout.base_url`, checked on the spot (docs/engines.md).
    It gets the learner's model itself: the LoRA adapter it sends the server comes from it."""
    rollout = config.rollout
    if rollout.base_url is None:
        raise ConfigError("rollout.base_url: rollout.engine=openai needs the server's URL, e.g. "
                          "rollout.base_url=http://127.0.0.1:8000/v1")
    for name, value, default in (("quantize", rollout.quantize, "none"), ("dtype", rollout.dtype, None)):
        if value not in (default, "auto"):
            raise ConfigError(f"rollout.{name}={value} sets the hf engine's weights; with rollout.engine=openai the "
                              "server picks its own (e.g. vllm serve --dtype)")
    if train and not is_peft(model):
        raise ConfigError("rollout.engine=openai trains LoRA adapters only: full fine-tuning cannot push its weights to "
                          "an external server yet; set model.lora.enabled=true or rollout.engine=hf")
    probe = tokenizer("Hello, how are you?", add_special_tokens=False).input_ids
    try:
        return OpenAIEngine(rollout.base_url, model, os.environ.get(rollout.api_key_env) or None,
                            served_name=config.model.name, probe_prompt=probe)
    except ServerError as error:
        raise ConfigError(str(error)) from None


def push_weights(c: "Components", version: int) -> None:
    """Give the engine the learner's current policy as `version`: nothing to copy when it samples
    from the learner's model itself (full fine-tuning in sync mode; the openai engine, which sends
    that model's adapter to its server), the adapter's own weights to an engine that `takes_adapter`
    (the Ray fleet of vLLM actors), else merged LoRA weights (with the factors for an engine that
    `takes_lora_factors`: the int8 engine) or every weight."""
    if getattr(c.engine, "model", None) is c.model:
        weights = None
    elif hasattr(c.learner, "rollout_weights"):  # sharded over several ranks: gathered here first
        weights = c.learner.rollout_weights(getattr(c.engine, "takes_adapter", False),
                                            getattr(c.engine, "takes_lora_factors", False))
    elif is_peft(c.model) and getattr(c.engine, "takes_adapter", False):
        weights = trainable_state_dict(c.model)
    elif is_peft(c.model):
        weights = merged_weights(c.model) | (lora_factors(c.model) if getattr(c.engine, "takes_lora_factors", False) else {})
    else:
        weights = {name: param.detach() for name, param in c.model.named_parameters()}
    c.engine.update_weights(version, weights)
