"""Config checks across fields: the same verdict whatever order fields come in, and no value changed.

Each rule is tried with its fields given in both orders, set at construction and by assignment
(a check on one field that reads another used to run only when the later-declared one was set).
"""
from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from rlyard.config import AlgoConfig, ConfigError, dump_config, load_config, read_yaml, training_algo

# (fields that together break a rule, the field the error must name)
BROKEN = [
    ({"name": "ppo", "advantage": "grpo"}, "advantage"),
    ({"name": "gspo", "advantage": "grpo", "loss": "ppo_clip"}, "loss"),
    ({"kl_in_reward": True, "advantage": "grpo"}, "kl_in_reward"),
    ({"decoupled": True, "tis_cap": 2.0}, "decoupled"),
    ({"decoupled": True, "loss": "dual_clip"}, "decoupled"),
    ({"behaviour_weight_cap": 5.0, "decoupled": False}, "behaviour_weight_cap"),
    ({"soft_overlong_cache_len": 9, "soft_overlong_max_len": 8}, "soft_overlong_cache_len"),
]


@pytest.mark.parametrize("fields,blamed", BROKEN)
def test_a_rule_holds_whatever_order_its_fields_come_in(fields, blamed):
    for ordered in (fields, dict(reversed(list(fields.items())))):
        with pytest.raises(ValidationError, match=blamed):
            AlgoConfig(**ordered)
        with pytest.raises(ConfigError, match=rf"algo\.{blamed}:"):
            load_config(None, [f"algo.{key}={str(value).lower()}" for key, value in ordered.items()])


@pytest.mark.parametrize("fields,blamed", BROKEN)
def test_a_rule_holds_when_its_fields_are_assigned_in_either_order(fields, blamed):
    for ordered in (list(fields.items()), list(reversed(list(fields.items())))):
        *first, (last_key, last_value) = ordered
        algo = AlgoConfig(**dict(first)) if _valid(dict(first)) else None
        if algo is None:
            continue
        with pytest.raises(ValidationError, match=blamed):
            setattr(algo, last_key, last_value)


def _valid(fields: dict) -> bool:
    try:
        AlgoConfig(**fields)
        return True
    except ValidationError:
        return False


def test_every_rule_can_be_set_up_by_assignment():
    """The assignment test is not vacuous: each rule has an order whose first part is valid."""
    for fields, _ in BROKEN:
        items = list(fields.items())
        assert _valid(dict(items[:-1])) or _valid(dict(list(reversed(items))[:-1])), fields


def test_validation_changes_no_value():
    overrides = ["rollout.quantize=int8", "algo=dapo", "env.name=countdown"]
    config = load_config(None, overrides)
    before = copy.deepcopy(config.model_dump())
    assert config.algo.tis_cap is None  # int8's TIS default is the learner's, not written into the config
    assert training_algo(config).tis_cap == 2.0
    assert config.model_dump() == before  # resolving it did not touch the config
    revalidated = type(config).model_validate(read_yaml(dump_config(config)))
    assert revalidated == config and revalidated.model_dump() == before
