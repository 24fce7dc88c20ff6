"""Every config rlyard saves reads back equal through the loader the CLI uses.

`rlyard train` writes the resolved config as the run's config.yaml (`dump_config`);
`rlyard train --resume`, `rlyard eval --checkpoint` and `rlyard serve --checkpoint` read it
with `load_run_config` (`read_yaml`, YAML 1.2 floats). A value that PyYAML writes plain but
rlyard's loader reads as something else (a bare `+` was read as a float) breaks them all.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from rlyard.config import (RunConfig, algo_presets, build_config, dump_config, load_config, load_run_config, read_yaml,
                           write_yaml)
from rlyard.envs import family_names

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "configs").glob("*.yaml"))
PRESETS = sorted((ROOT / "configs" / "algos").glob("*.yaml"))
BUILTIN_FAMILIES = [name for name in family_names() if (ROOT / "rlyard" / "envs" / name).is_dir()]


def round_trip(config: RunConfig, tmp_path: Path) -> RunConfig:
    """load -> save (as a run folder's config.yaml) -> load with the CLI's loader."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "config.yaml").write_text(dump_config(config))
    return load_run_config(run)


def family_defaults(name: str) -> dict:
    module = importlib.import_module(f"rlyard.envs.{name}.tasks")
    return dict(getattr(module, "DEFAULTS", {}))


def test_every_shipped_config_and_preset_is_covered():
    assert {p.stem for p in SHIPPED} >= {"quickstart", "countdown", "files", "code"}
    assert {p.stem for p in PRESETS} == set(algo_presets()) and "dapo" in algo_presets()
    assert {"arith", "countdown", "files", "code"} <= set(BUILTIN_FAMILIES)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_config_round_trips(path, tmp_path):
    config = load_config(path)
    assert round_trip(config, tmp_path) == config
    assert round_trip(round_trip(config, tmp_path), tmp_path) == config  # a resumed run saves it again


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_algo_preset_round_trips(path, tmp_path):
    preset = read_yaml(path.read_text())
    assert read_yaml(write_yaml(preset)) == preset
    config = load_config(ROOT / "configs" / "quickstart.yaml", [f"algo={path.stem}"])
    assert config.algo.name == path.stem
    assert round_trip(config, tmp_path) == config


@pytest.mark.parametrize("family", BUILTIN_FAMILIES)
def test_family_options_round_trip(family, tmp_path):
    """A family's full option set (its DEFAULTS: None, nested mappings, lists, templates) survives."""
    env = {"name": family, "options": family_defaults(family)}
    if family == "dataset":  # graded only by env.reward; a list with weights round-trips too
        env |= {"reward": ["rlyard.rewards:exact_match", "rlyard.rewards:boxed_format"], "reward_weights": [1.0, 0.5]}
    config = build_config({"env": env})
    again = round_trip(config, tmp_path)
    assert again == config and again.env.options == family_defaults(family)


@pytest.mark.parametrize("ops", ["+", "-", "*", "+-", "+-*", "-+", "*-"])
def test_arith_operators_stay_strings(ops, tmp_path):
    config = load_config(ROOT / "configs" / "quickstart.yaml", [f"env.options.ops={ops!r}"])
    assert config.env.options["ops"] == ops
    assert round_trip(config, tmp_path).env.options["ops"] == ops


# Strings that YAML (1.1 or rlyard's 1.2 floats) could read as something else when written plain.
TRICKY = ["+", "-", ".", "1e5", "-2.5E-3", ".5", "1.", "1_000", "0x1f", "0o17", "1:30", "yes", "no", "on", "off", "true",
          "null", "~", "", "2026-12-01", ".inf", "-.inf", ".nan", "nan", "inf", "e5", "{x}+{y}", "[a]", "# not a comment",
          "a: b", "- item", "What is {x}{op}{y}?", " leading space", "trailing space ", "multi\nline", "ünïcode"]


@pytest.mark.parametrize("value", TRICKY)
def test_tricky_strings_round_trip(value, tmp_path):
    config = build_config({"name": "tricky", "env": {"options": {"template": value, "nested": {"k": [value]}}},
                           "output": {"run_dir": value or None}})
    again = round_trip(config, tmp_path)
    assert again == config
    assert again.env.options["template"] == value and again.env.options["nested"] == {"k": [value]}


@pytest.mark.parametrize("value", [2e-5, 5.0e-4, 1e-12, 0.0, -1.5, 1e300, 3, -7, True, False, None])
def test_numbers_and_constants_round_trip(value, tmp_path):
    config = build_config({"env": {"options": {"x": value}}})
    assert round_trip(config, tmp_path).env.options == {"x": value}


def test_overrides_read_like_files():
    """A dotted override is parsed by the same loader: `2e-5` a float, `+` a string."""
    config = load_config(None, ["algo.lr=2e-5", "env.options.ops=+", "env.options.max_value=1e3"])
    assert config.algo.lr == 2e-5 and config.env.options == {"ops": "+", "max_value": 1000.0}
