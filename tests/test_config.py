"""Config: YAML + dotted overrides, errors that name the dotted field, and the saved run config."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlyard.config import ConfigError, RunConfig, build_config, dump_config, load_config, parse_override


def error_of(overrides: list[str], path=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


# --------------------------------------------------------------------------- unknown keys
def test_unknown_key_names_dotted_field_and_suggests():
    message = error_of(["algo.lrr=1e-4"])
    assert "unknown field algo.lrr" in message
    assert "did you mean algo.lr?" in message
    assert "allowed here:" in message and "kl_coef" in message


def test_unknown_nested_key_names_full_path():
    message = error_of(["model.lora.rnak=4"])
    assert "model.lora.rnak" in message and "did you mean model.lora.rank?" in message
    assert "target_modules" in message  # the allowed fields of the lora section, not of model


def test_unknown_section_in_yaml_file(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("algoo:\n  lr: 0.1\n")
    message = error_of([], path)
    assert str(path) in message
    assert "unknown field algoo" in message and "did you mean algo?" in message


# --------------------------------------------------------------------------- bad values
@pytest.mark.parametrize(
    "override, field, bound",
    [
        ("algo.lr=-1", "algo.lr", "greater than 0"),
        ("rollout.top_p=1.5", "rollout.top_p", "less than or equal to 1"),
        ("rollout.n=0", "rollout.n", "greater than or equal to 1"),
        ("model.lora.dropout=1.0", "model.lora.dropout", "less than 1"),
        ("train.steps=abc", "train.steps", "valid integer"),
    ],
)
def test_bad_value_names_field_and_bound(override, field, bound):
    message = error_of([override])
    assert f"{field}:" in message and bound in message
    assert f"(got {yaml.safe_load(override.split('=', 1)[1])!r})" in message


def test_literal_lists_allowed_values():
    message = error_of(["algo.loss_agg=mean"])
    assert "algo.loss_agg" in message
    for allowed in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "prompt-mean", "constant"):
        assert f"'{allowed}'" in message
    message = error_of(["model.dtype=fp8"])
    assert "model.dtype" in message and "'bfloat16'" in message and "'float16'" in message


def test_unknown_env_lists_registered_families():
    message = error_of(["env.name=chess"])
    assert "env.name" in message and "unknown environment 'chess'" in message
    allowed = message.split("known:", 1)[1]
    for name in ("arith", "countdown", "toy", "module:attribute"):
        assert name in allowed


def test_every_error_is_reported_at_once():
    message = error_of(["algo.lr=0", "rollout.n=0", "algo.lrr=1"])
    assert "algo.lr:" in message and "rollout.n:" in message and "algo.lrr" in message


# --------------------------------------------------------------------------- override parsing
def test_overrides_parse_to_typed_values():
    config = load_config(None, ["algo.lr=2e-5", "rollout.n=8", "model.lora.enabled=false", "env.name=countdown",
                                "model.lora.target_modules=[q_proj, v_proj]", "eval.max_new_tokens=null"])
    assert isinstance(config.algo.lr, float) and config.algo.lr == 2e-5
    assert isinstance(config.rollout.n, int) and config.rollout.n == 8
    assert config.model.lora.enabled is False
    assert config.env.name == "countdown"
    assert config.model.lora.target_modules == ["q_proj", "v_proj"]
    assert config.eval.max_new_tokens is None
    assert parse_override("rollout.n=8") == (["rollout", "n"], 8)
    assert parse_override("algo.lr=0.5") == (["algo", "lr"], 0.5)
    assert parse_override("name=a=b") == (["name"], "a=b")  # split at the first '=' only


def test_exponent_override_is_a_float_even_in_untyped_options():
    assert parse_override("algo.lr=2e-5") == (["algo", "lr"], 2e-5)
    config = load_config(None, ["env.options.scale=1e-3"])
    assert config.env.options["scale"] == 1e-3


def test_yaml_file_plus_overrides(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"lora": {"rank": 4, "alpha": 8}},
        "rollout": {"n": 4, "max_new_tokens": 16},
        "algo": {"lr": 0.001},
        "train": {"steps": 5},
    }))
    config = load_config(path, ["rollout.n=6", "train.micro_batch_size=2"])
    assert config.name == "small"  # the file's stem when the file names no run
    assert config.model.lora.rank == 4 and config.model.lora.alpha == 8
    assert config.rollout.n == 6  # override beats the file
    assert config.rollout.max_new_tokens == 16  # file beats the default
    assert config.train.steps == 5 and config.train.micro_batch_size == 2
    assert config.algo.lr == 0.001
    assert config.rollout.temperature == RunConfig().rollout.temperature  # untouched default


@pytest.mark.parametrize("bad, fragment", [("algo.lr", "must look like key.path=value"), ("=3", "empty key"), ("algo..lr=1", "empty key")])
def test_malformed_override(bad, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_override(bad)
    assert fragment in error_of([bad])


def test_override_into_a_value_is_refused():
    message = error_of(["algo.lr=1", "algo.lr.x=2"])
    assert "algo.lr is a value, not a section" in message


def test_missing_and_malformed_config_files(tmp_path):
    missing = tmp_path / "nope.yaml"
    assert f"config file {missing} does not exist" in error_of([], missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("algo: [unclosed\n")
    assert "not valid YAML" in error_of([], broken)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    assert "mapping" in error_of([], listing)


def test_quickstart_config_loads():
    path = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"
    config = load_config(path)
    assert config.name == "quickstart" and config.env.name == "arith"


# --------------------------------------------------------------------------- round trip
def test_dump_config_round_trips():
    config = load_config(None, ["algo.lr=2e-5", "algo.loss_agg=constant", "algo.loss_constant=32",
                                "env.options={ops: '+-', max_value: 50}", "output.run_dir=/tmp/x"])
    again = build_config(yaml.safe_load(dump_config(config)))
    assert again == config
    assert again.algo.lr == 2e-5 and again.env.options == {"ops": "+-", "max_value": 50}


def test_run_folder_config_round_trips(tmp_path, tiny_model_dir):
    """The resolved config a run saves in its folder rebuilds the same RunConfig."""
    from rlyard.orchestrate.entry import train

    config = load_config(None, [
        f"model.name={tiny_model_dir}", "model.lora.rank=2", "model.lora.alpha=4", "env.name=toy", "env.train_size=4",
        "rollout.prompts_per_step=1", "rollout.n=2", "rollout.max_new_tokens=2", "algo.lr=2e-5", "train.steps=1",
        "eval.size=0", "output.progress=false", "output.plot=false",
    ])
    run_dir = tmp_path / "run"
    train(config, run_dir)
    saved = run_dir / "config.yaml"
    assert saved.exists()
    reloaded = build_config(yaml.safe_load(saved.read_text()), str(saved))
    assert reloaded == config
    assert reloaded.model.name == str(tiny_model_dir) and reloaded.algo.lr == 2e-5
