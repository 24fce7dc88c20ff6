"""The whole run as pydantic models: YAML file + dotted command-line overrides.

Every model forbids unknown keys, and validation errors are rewritten to name the dotted
field and what it accepts, e.g. `algo.lr: must be > 0 (got -1)`. The schema holds every
default, so the code never guesses (`cfg.get(key, default)` does not appear).
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlyard.envs.registry import FamilyNotFound, get_family

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


class ModelConfig(Strict):
    name: str = "embedded"  # "embedded" (SmolLM2-135M-Instruct, offline), an HF id or a local path
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    lora: LoraConfig = Field(default_factory=LoraConfig)
    autocast: Literal["none", "bfloat16"] = "none"  # training matmuls (SFT, the learner) in bf16 over float32 weights
    init_from: str | None = None  # a run folder of `rlyard sft` / `rlyard train` (or its checkpoints/step_N): its weights start the policy


class EnvConfig(Strict):
    name: str = "arith"
    options: dict[str, Any] = Field(default_factory=dict)  # passed to the family's make_tasks
    train_size: int = Field(20000, ge=1)  # tasks in the training pool (reshuffled each epoch)
    seed: int = 0

    @field_validator("name")
    @classmethod
    def _known_env(cls, name: str) -> str:
        try:  # a built-in name, an installed family's name, or module:attribute
            get_family(name)
        except FamilyNotFound as error:
            raise ValueError(str(error)) from None
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
    dtype: Literal["float32", "bfloat16", "float16"] | None = None  # the engine's weights (None: model.dtype); docs/configuration.md
    prefix_cache_mb: int = Field(2048, ge=0)  # keys / values kept between an episode's turns (0 = off); docs/agents.md


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
    max_prompt_tokens: int | None = Field(None, ge=16)  # longer first prompts lose the middle of the task text
    tool_output_chars: int = Field(4000, ge=100)  # longer tool output loses its middle


class AlgoConfig(Strict):
    # What the algorithm is: configs/algos/<name>.yaml sets these; `algo=<name>` loads one.
    name: Literal[ALGO_PRESETS] = "grpo"  # preset label; it fixes `advantage` (and the loss for gspo / cispo)
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "gae"] = "grpo"  # must agree with `name`
    loss: Literal["ppo_clip", "dual_clip", "gspo", "cispo"] = "ppo_clip"
    lr: float = Field(2e-4, gt=0.0)
    std_normalize: bool = True  # GRPO divides by the group std; False = Dr. GRPO's advantage
    eps_low: float = Field(0.2, ge=0.0, le=1.0)  # 1.0 = no lower bound (CISPO)
    eps_high: float = Field(0.2, ge=0.0)
    dual_clip_c: float = Field(3.0, gt=1.0)  # loss=dual_clip: the loss of an A < 0 token is at most c * |A|
    tis_cap: float | None = Field(None, ge=1.0)  # truncated importance sampling against the engine's logprobs; None = off
    decoupled: bool = False  # AReaL's decoupled PPO: clip around the trainer's pi_prox, weight by pi_prox / pi_behav (async data)
    behaviour_weight_cap: float | None = Field(None, gt=1.0)  # decoupled: tokens whose pi_prox / pi_behav exceeds it get no loss; None = 5.0 (AReaL's legacy cap; set e.g. 1e9 for none)
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "prompt-mean", "constant"] = "token-mean"
    loss_constant: float | None = Field(None, gt=0.0)  # normaliser for loss_agg=constant; None = rollout.max_new_tokens
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
    seed: int = 0
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
    plot: bool = True


class OrchestrateConfig(Strict):
    """How rollouts and training interleave: sync (generate, then train) or async (rollout threads
    fill a bounded buffer while the learner trains; see docs/async.md)."""

    mode: Literal["sync", "async"] = "sync"
    max_staleness: int = Field(4, ge=0)  # async: a trained token's policy is at most this many versions behind the learner
    staleness_policy: Literal["drop", "wait"] = "drop"  # async: drop (and re-queue) too-stale groups, or make producers wait
    buffer_groups: int | None = Field(None, ge=1)  # async: finished groups waiting for the learner; None = 2 x rollout.prompts_per_step
    workers: int = Field(4, ge=1)  # async: rollout threads, each playing one group (n samples of a task) at a time
    partial_rollouts: bool = True  # async: multi-turn episodes take new weights between turns; False = a group keeps its version
    max_worker_restarts: int = Field(8, ge=0)  # async: dead rollout workers replaced before the run gives up
    shutdown_timeout_s: float = Field(30.0, gt=0.0)  # async: how long stopping waits for rollout threads


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


class RunConfig(Strict):
    name: str = "run"
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    orchestrate: OrchestrateConfig = Field(default_factory=OrchestrateConfig)
    sft: SftConfig = Field(default_factory=SftConfig)

    @model_validator(mode="after")
    def _int8_runs_on_cpu(self) -> "RunConfig":
        if self.rollout.quantize == "int8" and self.model.device != "cpu":
            raise FieldError("rollout.quantize", "int8", f"int8 runs on CPU int8 kernels; with model.device={self.model.device!r} "
                             "use model.dtype=bfloat16 instead")
        if self.rollout.quantize == "int8" and self.rollout.dtype not in (None, "float32"):
            raise FieldError("rollout.quantize", "int8", f"int8 packs the engine's float32 weights; with rollout.dtype="
                             f"{self.rollout.dtype} pick one of the two")
        return self

    @model_validator(mode="after")
    def _soft_overlong_fits(self) -> "RunConfig":
        if self.algo.soft_overlong:
            multi_turn = get_family(self.env.name).multi_turn  # env.name was checked by EnvConfig
            max_len, cache_len = soft_overlong_lengths(self, multi_turn)
            if cache_len > max_len:
                where = ("min(agent.max_total_tokens, agent.max_turns x agent.max_tokens_per_turn)" if multi_turn
                         else "rollout.max_new_tokens")
                raise FieldError("algo.soft_overlong_cache_len", cache_len, f"must be <= L_max = {max_len} "
                                 f"(algo.soft_overlong_max_len, default {where})")
        return self


def training_algo(config: RunConfig) -> AlgoConfig:
    """The learner's `algo` section with the defaults that depend on other sections resolved, as a
    copy (the config itself stays as written, so a saved run reads back the same): rollouts on int8
    kernels or on weights of another dtype than the learner's (`rollout.dtype`) are slightly
    off-policy by construction, so without a correction named they get TIS at 2."""
    algo = config.algo
    other_dtype = (config.rollout.dtype or config.model.dtype) != config.model.dtype
    if (config.rollout.quantize == "int8" or other_dtype) and algo.tis_cap is None and not algo.decoupled:
        return algo.model_copy(update={"tis_cap": INT8_DEFAULT_TIS_CAP})
    return algo


def soft_overlong_lengths(config: RunConfig, multi_turn: bool = False) -> tuple[int, int]:
    """(L_max, L_cache) of DAPO's soft overlong punishment (Eq. 13), defaults resolved.

    L_max is `algo.soft_overlong_max_len` when set, else the most sampled tokens a sample can
    have: single-turn, `rollout.max_new_tokens` (the paper's setting); multi-turn, the episode's
    budget min(`agent.max_total_tokens`, `agent.max_turns` x `agent.max_tokens_per_turn`), never
    the per-reply cap, since the replies of an episode add up. L_cache defaults to L_max // 5
    (the paper's 4096 of 20480).
    """
    algo = config.algo
    if algo.soft_overlong_max_len is not None:
        max_len = algo.soft_overlong_max_len
    elif multi_turn:
        max_len = min(config.agent.max_total_tokens, config.agent.max_turns * config.agent.max_tokens_per_turn)
    else:
        max_len = config.rollout.max_new_tokens
    return max_len, algo.soft_overlong_cache_len or max(1, max_len // 5)


class ConfigError(ValueError):
    """A config problem, worded for the person who wrote the config."""


class _Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2 floats: `2e-5` is a float (PyYAML's YAML 1.1 rules want `2.0e-5`)."""


class _Yaml12Dumper(yaml.SafeDumper):
    """Quotes every string that `_Yaml12Loader` would read as something else (`"1e5"`), so a saved
    config reads back equal."""


# A float needs at least one digit: a bare `+`, `-` or `.` (e.g. `ops: +`) stays a string.
_YAML12_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?$"
                           r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$")
for _cls in (_Yaml12Loader, _Yaml12Dumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))


def read_yaml(text: str) -> Any:
    """The loader of every config the CLI reads: config files, overrides, presets, a run's config.yaml."""
    return yaml.load(text, Loader=_Yaml12Loader)


def write_yaml(data: Any) -> str:
    """YAML that `read_yaml` reads back equal (strings that look like numbers are quoted)."""
    return yaml.dump(data, Dumper=_Yaml12Dumper, sort_keys=False, allow_unicode=True)


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.path=value, e.g. algo.lr=2e-5")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key")
    return key.split("."), read_yaml(raw) if raw != "" else ""


def _set_dotted(tree: dict, path: list[str], value: Any, original: str) -> None:
    node = tree
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {original!r}: {'.'.join(path[: depth + 1])} is a value, not a section")
        node = child
    node[path[-1]] = value


def _describe(error: dict, data: dict) -> str:
    loc = [str(part) for part in error["loc"]]
    field = ".".join(loc)
    blamed = error.get("ctx", {}).get("error")
    if isinstance(blamed, FieldError):  # a check across fields or sections, naming the field at fault
        return f"{'.'.join([*loc, blamed.field])}: {blamed.message} (got {blamed.value!r})"
    if not loc:
        return error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        model: type[BaseModel] = RunConfig
        for part in loc[:-1]:
            annotation = model.model_fields[part].annotation
            model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else model
        allowed = list(model.model_fields)
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        hint = f" (did you mean {'.'.join(loc[:-1] + close)}?)" if close else ""
        return f"unknown field {field}{hint}; allowed here: {', '.join(allowed)}"
    message = error["msg"].removeprefix("Value error, ")
    got = error.get("input")
    return f"{field}: {message} (got {got!r})" if not isinstance(got, dict) else f"{field}: {message}"


def build_config(data: dict, source: str = "config") -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(error, data) for error in exc.errors()]
        raise ConfigError(f"invalid {source}:\n  " + "\n  ".join(lines)) from None


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """Read a YAML file (or start from the defaults) and apply `key.path=value` overrides."""
    data: dict = {}
    source = "defaults"
    if path is not None:
        path = resolve_config_path(path)
        try:
            data = read_yaml(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        data.setdefault("name", path.stem)
        source = str(path)
    return build_config(apply_overrides(data, overrides), source + (" with overrides" if overrides else ""))


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `key.path=value` overrides to a config tree in place and return it.

    A bare `algo=<name>` loads the preset configs/algos/<name>.yaml into the `algo` section
    before any other override: the preset's keys replace the file's, the file's other algo
    keys (lr ...) stay, and dotted overrides such as `algo.lr=1e-4` still win.
    """
    parsed = [(text, *parse_override(text)) for text in overrides]
    for text, keys, value in parsed:
        if keys == ["algo"] and isinstance(value, str):
            if not isinstance(data.get("algo"), dict):
                data["algo"] = {}
            data["algo"].update(load_algo_preset(value))
    for text, keys, value in parsed:
        if not (keys == ["algo"] and isinstance(value, str)):
            _set_dotted(data, keys, value, text)
    return data


# The configs shipped with the package: rlyard/configs (in a checkout a link to the top-level
# configs/ folder; in a wheel the files themselves), so `configs/...` works from any folder.
PACKAGE_CONFIGS = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = "configs/quickstart.yaml"


def resolve_config_path(path: str | Path) -> Path:
    """A config file as given (relative to the working directory), else a shipped one: `configs/X.yaml`
    (or `X.yaml`, `X`) is looked up in the package's configs when the working directory has none."""
    given = Path(path)
    if given.is_file():
        return given
    candidates = []
    if not given.is_absolute():
        parts = given.parts[1:] if given.parts[:1] == ("configs",) else given.parts
        if parts:
            shipped = PACKAGE_CONFIGS.joinpath(*parts)
            candidates = [shipped, shipped.with_name(shipped.name + ".yaml")] if shipped.suffix != ".yaml" else [shipped]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    shipped_names = ", ".join(f"configs/{p.name}" for p in sorted(PACKAGE_CONFIGS.glob("*.yaml"))) or f"none ({PACKAGE_CONFIGS} is missing)"
    raise ConfigError(f"config file {path} does not exist (not in {Path.cwd()}, nor shipped with rlyard); shipped: {shipped_names}")


def default_config_path() -> Path:
    """configs/quickstart.yaml of the working directory, else the package's (never silent defaults)."""
    return resolve_config_path(DEFAULT_CONFIG)


def algo_preset_dirs() -> list[Path]:
    """Where `algo=<name>` looks, in order: configs/algos of the working directory, then the package's."""
    dirs: list[Path] = []
    for folder in (Path("configs/algos"), PACKAGE_CONFIGS / "algos"):
        if folder.is_dir() and all(folder.resolve() != d.resolve() for d in dirs):
            dirs.append(folder)
    return dirs


def algo_presets() -> list[str]:
    return sorted({path.stem for folder in algo_preset_dirs() for path in folder.glob("*.yaml")})


def load_algo_preset(name: str) -> dict:
    found = [folder / f"{name}.yaml" for folder in algo_preset_dirs() if name and (folder / f"{name}.yaml").is_file()]
    if not found:
        looked = ", ".join(str(folder) for folder in algo_preset_dirs()) or f"{PACKAGE_CONFIGS / 'algos'} (missing)"
        available = ", ".join(algo_presets()) or "none"
        raise ConfigError(f"algo={name}: no preset configs/algos/{name}.yaml (looked in {looked}); available: {available}")
    path = found[0]
    try:
        preset = read_yaml(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"algo preset {path} is not valid YAML: {exc}") from None
    if not isinstance(preset, dict):
        raise ConfigError(f"algo preset {path} must hold a mapping of algo keys")
    return preset


def split_config_args(first: str | None, rest: list[str]) -> tuple[str | None, list[str]]:
    """`rlyard train [CONFIG] [OVERRIDES...]`: the first positional may already be an override."""
    if first is not None and "=" in first:
        return None, [first, *rest]
    return first, list(rest)


def load_run_config(run_dir: Path, overrides: list[str] = ()) -> RunConfig:
    """The config saved in a run folder, with overrides on top (for --resume and eval --checkpoint)."""
    saved = Path(run_dir) / "config.yaml"
    if not saved.exists():
        raise ConfigError(f"{run_dir} has no config.yaml: is it a run folder?")
    try:
        data = read_yaml(saved.read_text()) or {}
    except (yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"{saved} is not a readable config: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{saved} must hold a mapping at the top level")
    data = apply_overrides(data, list(overrides))
    return build_config(data, str(saved) + (" with overrides" if overrides else ""))


def dump_config(config: RunConfig) -> str:
    """The resolved config as YAML; `read_yaml` (what --resume, eval and serve use) reads it back equal."""
    return write_yaml(config.model_dump(mode="json"))
