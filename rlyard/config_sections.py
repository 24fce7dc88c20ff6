"""The sections of a run's config that stand alone (no registry lookups): models, sampling,
the algorithm, training, evaluation, output, orchestration and SFT.

`rlyard.config` assembles them into `RunConfig` with `env` (which asks the family registry) and
re-exports every name here, so `from rlyard.config import AlgoConfig` keeps working.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

INT8_DEFAULT_TIS_CAP = 2.0  # verl's default truncation of the rollout importance weight
DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class FieldError(ValueError):
    """A check across fields that blames one of them: `field` is dotted from the section checked."""

    def __init__(self, field: str, value: Any, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.value, self.message = field, value, message


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraConfig(Strict):
    enabled: bool = True  # False = full fine-tuning
    rank: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: list(DEFAULT_LORA_TARGETS))
    last_layers: int | None = Field(None, ge=1)  # adapt only the last N decoder layers: backward stops below them (docs/sft.md); None = all


class ModelConfig(Strict):
    name: str = "embedded"  # "embedded" (SmolLM2-135M-Instruct, offline), an HF id or a local path
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    lora: LoraConfig = Field(default_factory=LoraConfig)
    autocast: Literal["none", "bfloat16", "auto"] = "none"  # training matmuls (SFT, the learner) in bf16 over float32 weights; auto: where the device has native bf16
    chat_template: str | None = None  # a Jinja chat template file (or the template text) replacing the tokenizer's
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, ~30% more compute
    init_from: str | None = None  # a run folder of `rlyard sft` / `rlyard train` (or its checkpoints/step_N): its weights start the policy

    @field_validator("name")
    @classmethod
    def _local_model_exists(cls, name: str) -> str:
        """A name written as a path (/..., ./..., ../..., ~/...) is a local model: refused now
        when it is missing, not by transformers after the run folder is made."""
        if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
            raise ValueError(f"no such folder {name!r} (a local model path; a Hugging Face id looks like org/name, "
                             "and 'embedded' is the built-in SmolLM2-135M)")
        return name


class RolloutConfig(Strict):
    prompts_per_step: int = Field(4, ge=1)
    n: int = Field(8, ge=1)  # samples per prompt (the GRPO group size)
    temperature: float = Field(0.7, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)  # 0 = off
    max_new_tokens: int = Field(32, ge=1)
    truncated_reward: float | None = None  # reward of a reply cut at max_new_tokens; None = verify it as is
    quantize: Literal["none", "int8"] = "none"  # int8: CPU decode on int8 kernels (TIS on by default); see docs/benchmarks.md
    dtype: Literal["float32", "bfloat16", "float16", "auto"] | None = None  # the engine's weights (None: model.dtype; auto: bf16 where native); docs/configuration.md
    prefix_cache_mb: int = Field(2048, ge=0)  # keys / values kept between an episode's turns (0 = off); docs/agents.md
    engine: Literal["hf", "openai", "vllm"] = "hf"  # hf: rlyard's transformers engine in process; openai: an OpenAI-compatible server; vllm: vLLM's Python engine (docs/engines.md)
    base_url: str | None = None  # engine=openai: the server's URL ending in /v1, e.g. http://127.0.0.1:8000/v1
    api_key_env: str = "OPENAI_API_KEY"  # engine=openai: the environment variable holding the server's key (unset: none sent)
    coalesce: bool = False  # hf engine: merge the generate calls of concurrent episodes / rollout threads into one batch
    engine_options: dict[str, Any] = Field(default_factory=dict)  # engine=vllm: keyword arguments of vllm.LLM, e.g. {max_model_len: 4096}


ALGO_PRESETS = ("grpo", "dr_grpo", "dapo", "ppo", "reinforce_pp", "reinforce_pp_baseline", "rloo", "remax", "gspo", "cispo")
# The advantage estimator each preset name stands for; gspo / cispo also fix the policy loss.
PRESET_ADVANTAGE = {"grpo": "grpo", "dr_grpo": "dr_grpo", "dapo": "grpo", "ppo": "gae", "reinforce_pp": "reinforce_pp",
                    "reinforce_pp_baseline": "reinforce_pp_baseline", "rloo": "rloo", "remax": "remax", "gspo": "grpo", "cispo": "grpo"}
PRESET_LOSS = {"gspo": "gspo", "cispo": "cispo"}
TOKEN_REWARD_ADVANTAGES = ("gae", "reinforce_pp")  # estimators that take per-token rewards (KL in the reward)


class AgentConfig(Strict):
    """Limits of multi-turn episodes (families with tools, e.g. `files`)."""

    max_turns: int = Field(6, ge=1)
    max_tokens_per_turn: int = Field(128, ge=1)
    max_total_tokens: int = Field(2048, ge=16)
    max_prompt_tokens: int | None = Field(None, ge=16)  # longer first prompts lose the middle of the task text; None: max_total_tokens less one reply (at most half)
    tool_output_chars: int = Field(4000, ge=100)  # longer tool output loses its middle
    # how tool calls are written: "auto" = the chat template's own format when it renders tools, else the family's
    tool_format: Literal["auto", "family", "hermes", "llama3_json", "bash_block"] = "auto"


class AlgoConfig(Strict):
    # What the algorithm is: configs/algos/<name>.yaml sets these; `algo=<name>` loads one.
    name: Literal[ALGO_PRESETS] = "grpo"  # preset label; it fixes `advantage` (and the loss for gspo / cispo)
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "gae"] = "grpo"  # must agree with `name`
    loss: Literal["ppo_clip", "dual_clip", "gspo", "cispo"] = "ppo_clip"
    lr: float = Field(2e-4, gt=0.0)
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"  # after the warmup, over train.steps (to 0 for linear / cosine)
    warmup_steps: int = Field(0, ge=0)  # linear warmup from lr / warmup_steps to lr
    std_normalize: bool = True  # GRPO divides by the group std; False = Dr. GRPO's advantage
    eps_low: float = Field(0.2, ge=0.0, le=1.0)  # 1.0 = no lower bound (CISPO)
    eps_high: float = Field(0.2, ge=0.0)
    dual_clip_c: float = Field(3.0, gt=1.0)  # loss=dual_clip: the loss of an A < 0 token is at most c * |A|
    tis_cap: float | None = Field(None, ge=1.0)  # truncated importance sampling against the engine's logprobs; None = off
    decoupled: bool = False  # AReaL's decoupled PPO: clip around the trainer's pi_prox, weight by pi_prox / pi_behav (async data)
    behaviour_weight_cap: float | None = Field(None, gt=1.0)  # decoupled: tokens whose pi_prox / pi_behav exceeds it get no loss; None = 5.0 (AReaL's legacy cap; set e.g. 1e9 for none)
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "prompt-mean", "constant"] = "token-mean"
    loss_constant: float | None = Field(None, gt=0.0)  # normaliser for loss_agg=constant; None = rollout.max_new_tokens, multi-turn agent.max_total_tokens
    kl_coef: float = Field(0.0, ge=0.0)  # KL to the base model (needs LoRA): a loss term, or a reward penalty
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    kl_in_reward: bool = False  # True: -kl_coef * kl_t is added to each token's reward (gae, reinforce_pp) instead of the loss
    entropy_coef: float = 0.0
    gamma: float = Field(1.0, ge=0.0, le=1.0)  # discount (gae, reinforce_pp)
    lam: float = Field(1.0, ge=0.0, le=1.0)  # GAE lambda
    value_lr: float = Field(1e-3, gt=0.0)  # critic (advantage=gae): AdamW lr of the value head
    value_clip: float = Field(0.5, gt=0.0)  # critic: clip range of the value loss around the old values
    dynamic_sampling: bool = False  # DAPO: drop groups whose accuracies (verifier rewards, before penalties) are all equal, sample more prompts
    max_sampling_tries: int = Field(4, ge=1)  # dynamic sampling: rollout rounds per step, the first included
    overlong_filter: bool = False  # DAPO: truncated samples get no loss (finish "length"; multi-turn "token_budget", "turn_token_limit")
    soft_overlong: bool = False  # DAPO: soft overlong punishment added to the reward
    soft_overlong_max_len: int | None = Field(None, ge=1)  # L_max; None = rollout.max_new_tokens, multi-turn min(agent.max_total_tokens, max_turns x max_tokens_per_turn)
    soft_overlong_cache_len: int | None = Field(None, ge=1)  # L_cache; None = L_max // 5 (the paper's 4096 of 20480)
    ppo_epochs: int = Field(1, ge=1)
    minibatches: int = Field(1, ge=1)
    max_grad_norm: float = Field(1.0, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.999, ge=0.0, lt=1.0)
    seed: int = 0  # minibatch shuffling

    @model_validator(mode="after")
    def _fields_agree(self) -> "AlgoConfig":
        """Checks across fields, on the whole section: they do not depend on the order fields are
        declared or given in, and they never change a value (defaults that depend on other
        sections are resolved where they are used, e.g. `training_algo`)."""
        name, advantage, loss = self.name, self.advantage, self.loss
        if PRESET_ADVANTAGE[name] != advantage:
            label = next(preset for preset, estimator in PRESET_ADVANTAGE.items() if estimator == advantage)
            raise FieldError("advantage", advantage, f"algo.name {name!r} stands for advantage {PRESET_ADVANTAGE[name]!r}: "
                             f"load that whole preset with algo={name}, or name advantage {advantage!r} algo.name={label}")
        if name in PRESET_LOSS and PRESET_LOSS[name] != loss:
            raise FieldError("loss", loss, f"algo.name {name!r} stands for loss {PRESET_LOSS[name]!r}: "
                             f"load that whole preset with algo={name}")
        if self.kl_in_reward and advantage not in TOKEN_REWARD_ADVANTAGES:
            raise FieldError("kl_in_reward", True, f"a KL reward penalty needs per-token rewards: advantage "
                             f"{' or '.join(TOKEN_REWARD_ADVANTAGES)}, not {advantage!r}; for a KL loss term set only algo.kl_coef")
        if self.decoupled and self.tis_cap is not None:
            raise FieldError("decoupled", True, "pick one off-policy correction: algo.decoupled (pi_prox / pi_behav weight, "
                             "masked above algo.behaviour_weight_cap) or algo.tis_cap (the same weight, truncated at the cap)")
        if self.decoupled and loss != "ppo_clip":
            raise FieldError("decoupled", True, f"decoupled PPO is a PPO-clip objective: set algo.loss=ppo_clip (got {loss!r})")
        if self.behaviour_weight_cap is not None and not self.decoupled:
            raise FieldError("behaviour_weight_cap", self.behaviour_weight_cap,
                             "only used by decoupled PPO: also set algo.decoupled=true")
        max_len, cache_len = self.soft_overlong_max_len, self.soft_overlong_cache_len
        if cache_len is not None and max_len is not None and cache_len > max_len:
            raise FieldError("soft_overlong_cache_len", cache_len, f"must be <= algo.soft_overlong_max_len ({max_len})")
        return self


class TrainConfig(Strict):
    steps: int = Field(30, ge=1)
    micro_batch_size: int = Field(8, ge=1)  # continuations per forward/backward
    seed: int = 0  # torch, sampling, and the order train tasks come in (rlyard.data.train_stream)
    threads: int | None = Field(None, ge=1)  # torch threads; None = torch's default


class EvalConfig(Strict):
    size: int = Field(200, ge=0)  # held-out tasks; 0 = no evaluation
    at_start: bool = True
    at_end: bool = True
    every: int = Field(0, ge=0)  # also evaluate every N steps; 0 = off
    max_new_tokens: int | None = Field(None, ge=1)  # default: rollout.max_new_tokens
    batch_size: int = Field(64, ge=1)


class OutputConfig(Strict):
    run_dir: str | None = None  # default: runs/<config name>-<timestamp>
    checkpoint_every: int = Field(10, ge=0)  # 0 = only at the end
    keep_checkpoints: int = Field(2, ge=1)
    progress: bool = True
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "rlyard"
    mlflow: bool = False
    mlflow_tracking_uri: str | None = None  # None: a local file store, mlruns/ beside the run folder
    mlflow_experiment: str = "rlyard"
    plot: bool = True


class RayConfig(Strict):
    """`orchestrate.backend=ray`: where the run's parts live as Ray actors (docs/cluster.md).
    CPU and GPU counts are Ray resources, reserved in one placement group."""

    address: str | None = None  # None: a local Ray cluster started by the run; "auto": the running one (`ray start --head`)
    rollout_workers: int = Field(1, ge=1)  # rollout actors, each an engine and the agent loop over its groups
    rollout_cpus: float = Field(1.0, ge=0.0)
    rollout_gpus: float = Field(0.0, ge=0.0)
    graders: int = Field(1, ge=0)  # grader actors hosting the environments (sandboxes, verifiers); 0 = inside the rollout actors
    grader_cpus: float = Field(1.0, ge=0.0)
    learners: int = Field(1, ge=1)  # learner actors: the data-parallel ranks of one FSDP2 learner (docs/fsdp.md)
    learner_cpus: float = Field(1.0, ge=0.0)  # per learner actor
    learner_gpus: float = Field(0.0, ge=0.0)  # per learner actor (one GPU a rank)
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    max_actor_restarts: int = Field(4, ge=0)  # per actor: restarts by Ray before the run gives up
    namespace: str | None = None  # Ray namespace of the run's actors (None: rlyard-<run name>-<pid>)


class OrchestrateConfig(Strict):
    """How rollouts and training interleave: sync (generate, then train) or async (rollout threads
    fill a bounded buffer while the learner trains; see docs/async.md)."""

    mode: Literal["sync", "async"] = "sync"
    backend: Literal["local", "ray"] = "local"  # local: one process; ray: learner, rollout and grader actors (docs/cluster.md)
    ray: RayConfig = Field(default_factory=RayConfig)
    max_staleness: int = Field(4, ge=0)  # async: a trained token's policy is at most this many versions behind the learner
    staleness_policy: Literal["drop", "wait"] = "drop"  # async: drop (and re-queue) too-stale groups, or make producers wait
    buffer_groups: int | None = Field(None, ge=1)  # async: finished groups waiting for the learner; None = 2 x rollout.prompts_per_step
    workers: int = Field(4, ge=1)  # async: rollout threads, each playing one group (n samples of a task) at a time
    partial_rollouts: bool = True  # async: multi-turn episodes take new weights between turns; False = a group keeps its version
    max_worker_restarts: int = Field(8, ge=0)  # async: dead rollout workers replaced before the run gives up
    shutdown_timeout_s: float = Field(30.0, gt=0.0)  # async: how long stopping waits for rollout threads


class LiveConfig(Strict):
    """`rlyard serve --learn`: train the served policy on the sessions it serves (docs/live.md)."""

    sessions_per_step: int = Field(8, ge=1)  # rewarded episodes (lone sessions + complete groups' members) per learner step
    baseline: Literal["rloo", "per_prompt"] = "rloo"  # lone sessions: leave-one-out mean over a window, or a value per prompt
    baseline_window: int = Field(64, ge=1)  # rloo: the last rewards of lone sessions the baseline averages
    baseline_alpha: float = Field(0.2, gt=0.0, le=1.0)  # per_prompt: V(p) <- V(p) + alpha (r - V(p))
    group_timeout_s: float = Field(120.0, gt=0.0)  # a metadata.group still missing rewards after this trains what it has


class SftConfig(Strict):
    """`rlyard sft`: supervised fine-tuning on conversations (docs/sft.md). The defaults train the
    embedded SmolLM2-135M with LoRA on a few hundred conversations on a laptop CPU in minutes."""

    data: str | None = None  # JSONL, one conversation per line; `rlyard sft DATA` sets it
    eval_data: str | None = None  # held-out JSONL; None = hold out eval_fraction of data
    eval_fraction: float = Field(0.1, ge=0.0, lt=1.0)  # share of data held out (at least one conversation; 0 = none)
    epochs: int = Field(2, ge=1)  # passes over the training conversations (when steps is None)
    steps: int | None = Field(None, ge=1)  # optimizer steps; None = epochs x steps per epoch
    batch_size: int = Field(8, ge=1)  # conversations per optimizer step
    micro_batch_size: int = Field(4, ge=1)  # conversations per forward/backward; must divide batch_size
    max_length: int = Field(2048, ge=16)  # tokens per conversation; longer ones are cut (their later replies lost)
    length_window: int = Field(16, ge=1)  # micro-batches whose conversations are sorted by length together; 1 = no grouping
    lr: float = Field(2e-4, gt=0.0)  # AdamW peak learning rate (2e-4 suits LoRA; full fine-tuning wants ~2e-5)
    schedule: Literal["cosine", "constant"] = "cosine"  # after the warmup: cosine decay to 0, or constant
    warmup_steps: int = Field(5, ge=0)  # linear warmup from lr / warmup_steps to lr
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, gt=0.0)  # gradient clipping
    eval_every: int = Field(10, ge=0)  # held-out loss every N steps (also before the first and after the last); 0 = only those
    seed: int = 0  # the held-out split, the data order and the LoRA init

    @model_validator(mode="after")
    def _micro_batches_fill_a_batch(self) -> "SftConfig":
        if self.batch_size % self.micro_batch_size:
            raise FieldError("micro_batch_size", self.micro_batch_size, f"must divide sft.batch_size ({self.batch_size})")
        return self
