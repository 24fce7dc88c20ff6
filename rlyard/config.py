"""The whole run as pydantic models: YAML file + dotted command-line overrides.

Every model forbids unknown keys, and validation errors are rewritten to name the dotted
field and what it accepts, e.g. `algo.lr: must be > 0 (got -1)`. The schema holds every
default, so the code never guesses (`cfg.get(key, default)` does not appear).
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from rlyard.config_sections import (  # noqa: F401  (re-exported: the sections' home is config_sections)
    ALGO_PRESETS, DEFAULT_LORA_TARGETS, INT8_DEFAULT_TIS_CAP, PRESET_ADVANTAGE, PRESET_LOSS, TOKEN_REWARD_ADVANTAGES,
    AgentConfig, AlgoConfig, EvalConfig, FieldError, LiveConfig, LoraConfig, ModelConfig, OrchestrateConfig, OutputConfig,
    RayConfig, RolloutConfig, SftConfig, Strict, TrainConfig,
)
from rlyard.envs.registry import FamilyNotFound, get_family
from rlyard.errors import ConfigError  # its home is rlyard.errors; `from rlyard.config import ConfigError` still works
from rlyard.rewards.loading import RewardLoadError, load_rewards


class EnvConfig(Strict):
    name: str = "arith"
    options: dict[str, Any] = Field(default_factory=dict)  # passed to the family's make_tasks
    train_size: int = Field(20000, ge=1)  # tasks in the training pool (reshuffled each epoch)
    seed: int = 0
    # Python reward functions, TRL's signature (docs/your-data.md): "pkg.module:fn" or "path/to/file.py:fn", or a list
    reward: str | list[str] | None = None  # None: the family's own verifier (env.name=dataset needs one)
    reward_weights: list[float] | None = None  # one per reward function; None = all 1.0 (TRL's reward_weights)
    # an environment's score() that has not answered by then fails its episode as infra (rlyard/environment/deadline.py)
    grader_timeout_s: float | None = Field(900.0, gt=0)

    @field_validator("name")
    @classmethod
    def _known_env(cls, name: str) -> str:
        try:  # a built-in name, an installed family's name, or module:attribute
            get_family(name)
        except FamilyNotFound as error:
            raise ValueError(str(error)) from None
        return name

    @model_validator(mode="after")
    def _one_weight_per_reward(self) -> "EnvConfig":
        rewards = [self.reward] if isinstance(self.reward, str) else (self.reward or [])
        if self.reward_weights is not None and len(self.reward_weights) != len(rewards):
            raise FieldError("reward_weights", self.reward_weights, f"needs one weight per env.reward function "
                             f"({len(rewards)}), got {len(self.reward_weights)}")
        family = get_family(self.name)  # env.name was checked by its field validator
        if rewards and family.multi_turn:
            raise FieldError("reward", self.reward, f"Python reward functions grade single-turn families; {self.name!r} is "
                             "multi-turn (its environment grades the episode)")
        if not rewards and not family.multi_turn and family.verify is None:
            raise FieldError("reward", None, f"env.name={self.name} has no grader of its own: name reward functions, e.g. "
                             "env.reward=rlyard.rewards:math_equal or env.reward=path/to/rewards.py:my_reward (docs/your-data.md)")
        try:
            load_rewards(self.reward, self.reward_weights)  # imports them now: a typo fails before any model loads
        except RewardLoadError as error:
            raise FieldError("reward", self.reward, str(error).removeprefix(f"env.reward {self.reward!r}: ")) from None
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
    live: LiveConfig = Field(default_factory=LiveConfig)  # rlyard serve --learn

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


def engine_dtype(config: RunConfig) -> str:
    """The engine's weight dtype: `rollout.dtype` with None and "auto" resolved (docs/configuration.md)."""
    from rlyard.models.loading import engine_dtype_choice  # here, not at the top: the schema itself needs no torch

    return engine_dtype_choice(config.rollout.dtype, config.model.dtype, config.model.device)[0]


def training_algo(config: RunConfig) -> AlgoConfig:
    """The learner's `algo` section with the defaults that depend on other sections resolved, as a
    copy (the config itself stays as written, so a saved run reads back the same): rollouts on int8
    kernels, on weights of another dtype than the learner's (`rollout.dtype`) or from an external
    server or vLLM (`rollout.engine=openai|vllm`: their own kernels) are slightly off-policy by
    construction, so without a correction named they get TIS at 2. So is a learner whose matmuls
    run in bf16 (`model.autocast` bfloat16, or auto where it picks bf16) under a float32 engine."""
    from rlyard.models.loading import autocast_choice  # here, not at the top: the schema itself needs no torch

    algo = config.algo
    engine = engine_dtype(config)
    other_dtype = engine != config.model.dtype
    learner_bf16 = config.model.autocast != "none" and autocast_choice(config.model.autocast, config.model.device)[0] is not None
    engine_bf16 = engine == "bfloat16"
    off_policy = (config.rollout.quantize == "int8" or other_dtype or config.rollout.engine in ("openai", "vllm")
                  or (learner_bf16 and not engine_bf16))
    if off_policy and algo.tis_cap is None and not algo.decoupled:
        return algo.model_copy(update={"tis_cap": INT8_DEFAULT_TIS_CAP})
    return algo


def loss_constant(config: RunConfig, multi_turn: bool = False) -> int:
    """L_max of `algo.loss_agg: constant` unless algo.loss_constant names it: the most sampled
    tokens a sample can have, `rollout.max_new_tokens` single-turn and the episode's budget
    `agent.max_total_tokens` multi-turn (the per-turn cap would rescale the learning rate)."""
    if config.algo.loss_constant:
        return config.algo.loss_constant
    return config.agent.max_total_tokens if multi_turn else config.rollout.max_new_tokens


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


class _Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2 floats: `2e-5` is a float (PyYAML's YAML 1.1 rules want `2.0e-5`); a key given
    twice in one mapping is an error (PyYAML keeps the last silently, so a second `train:`
    section would quietly replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            if first is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice (first on line "
                                                        f"{first.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep)


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


def yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's multi-line report as one line: where, then what."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        context = f" ({error.context})" if error.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}{context}"
    return " ".join(str(error).split())


def read_text(path: Path, what: str) -> str:
    """A config file's text; a file that is not UTF-8 is refused naming the byte and its line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError(f"{what} {path} is not UTF-8: byte 0x{data[error.start]:02x} on line {line}; "
                          "save it as UTF-8") from None


def write_yaml(data: Any) -> str:
    """YAML that `read_yaml` reads back equal (strings that look like numbers are quoted)."""
    return yaml.dump(data, Dumper=_Yaml12Dumper, sort_keys=False, allow_unicode=True)


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.path=value, e.g. algo.lr=2e-5")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key")
    try:
        return key.split("."), read_yaml(raw) if raw != "" else ""
    except yaml.YAMLError as error:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({yaml_problem(error)}); "
                          "quote it to pass a string, e.g. key='[1,'") from None


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
            data = read_yaml(read_text(path, "config file")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {yaml_problem(exc)}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        data.setdefault("name", path.stem)
        source = str(path)
    return build_config(apply_overrides(data, overrides), source + (" with overrides" if overrides else ""))


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `key.path=value` overrides to a config tree in place and return it.

    An `env.name=<family>` naming another family than the file's drops the file's `env.options`
    (they are that family's); `env.options.<key>=` overrides then apply to the new family.

    A bare `algo=<name>` loads the preset configs/algos/<name>.yaml into the `algo` section
    before any other override: the preset's keys replace the file's, the file's other algo
    keys (lr ...) stay, and dotted overrides such as `algo.lr=1e-4` still win.
    """
    parsed = [(text, *parse_override(text)) for text in overrides]
    env = data.get("env")
    if isinstance(env, dict) and "options" in env and any(keys == ["env", "name"] and value != env.get("name")
                                                          for _, keys, value in parsed):
        del env["options"]  # options are the file's family's: another env.name starts from that family's defaults
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
        preset = read_yaml(read_text(path, "algo preset"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"algo preset {path} is not valid YAML: {yaml_problem(exc)}") from None
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
        data = read_yaml(read_text(saved, "run config")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{saved} is not a readable config: {yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{saved} must hold a mapping at the top level")
    data = apply_overrides(data, list(overrides))
    return build_config(data, str(saved) + (" with overrides" if overrides else ""))


def dump_config(config: RunConfig) -> str:
    """The resolved config as YAML; `read_yaml` (what --resume, eval and serve use) reads it back equal."""
    return write_yaml(config.model_dump(mode="json"))
