"""scripts/learn.py's arithmetic: the derived gate and constraint shares and the issue's test per
metric, on hand-made eval results (the recipe itself runs for minutes: docs/learning.md)."""
import json

import pytest


@pytest.fixture(scope="module")
def learn(script_module):
    return script_module("learn.py")


def test_gate_and_constraint_shares_count_every_reply(learn, tmp_path):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"accuracy": 0.0, "mean_reward": 0.1, "mean_rejected": 0.25, "mean_constraints": 0.6,
                                "sampled_mean_rejected": 1.0, "model": f"checkpoint {tmp_path}/sft/checkpoints/step_000092"}))
    result = learn.stage_result(path, 12.34)
    assert result["model"] == "checkpoint $OUT/sft/checkpoints/step_000092"  # no path of this machine
    assert result["gate_pass"] == pytest.approx(0.75) and result["constraint_share"] == pytest.approx(0.75 * 0.6)
    # no reply past the gate: no mean_constraints in the results, and none of the constraints met
    assert result["sampled_gate_pass"] == 0.0 and result["sampled_constraint_share"] == 0.0
    assert result["seconds"] == 12.3 and result["success"] == 0.0
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"accuracy": 0.5, "mean_reward": 0.5}))
    assert "gate_pass" not in learn.stage_result(plain, 1.0)  # a family without a gate


def test_the_verdict_asks_each_step_to_beat_the_rl_spread(learn):
    one_sft = {"m": learn.spread([0.30])}  # RL_SEEDS: one SFT run, no measured sd
    rl = {"m": learn.spread([0.36, 0.40, 0.44])}  # mean 0.40, sd 0.04
    v = learn.verdict({"m": 0.10}, one_sft, rl, ["m"])["m"]
    assert v["rl_sd"] == pytest.approx(0.04) and v["sft_sd"] == 0.0 and v["rl_minus_sft"] == pytest.approx(0.10)
    assert v["sft_above_base"] and v["rl_above_sft"] and "rl_minus_own_sft" not in v
    close = learn.verdict({"m": 0.28}, {"m": learn.spread([0.30])}, {"m": learn.spread([0.29, 0.32, 0.35])}, ["m"])["m"]
    assert not close["sft_above_base"] and not close["rl_above_sft"]  # +0.02 and +0.02, each below sd 0.03
    missing = learn.verdict({}, {"m": learn.spread([0.5])}, {"m": learn.spread([0.9, 0.9])}, ["m"])["m"]
    assert missing["sft_minus_base"] == 0.5  # a metric a stage lacks (no reply past the gate) counts 0


def test_one_run_of_each_stage_measures_no_spread_and_passes_nothing(learn):
    """SEEDS="0": one SFT and one RL run. Any difference beats an sd of 0, so the tests say None
    (not measured), not yes; the differences are still reported."""
    sft, rl = [{"m": 0.30}], [{"m": 0.32}]
    v = learn.verdict({"m": 0.0}, learn.seed_spread(sft, ["m"]), learn.seed_spread(rl, ["m"]), ["m"],
                      learn.paired_gain(sft, rl, ["m"]))["m"]
    assert v["sft_above_base"] is None and v["rl_above_sft"] is None
    assert v["rl_minus_sft"] == pytest.approx(0.02) and v["rl_minus_own_sft"] == pytest.approx(0.02)
    assert learn.answer(None).startswith("not measured") and learn.answer(True) == "yes" and learn.answer(False) == "NO"


def test_with_seeds_sfts_spread_counts_and_rl_must_beat_its_own_sft(learn):
    """SEEDS: SFT seeds 0.26 / 0.17 / 0.20 (sd 0.0458), RL from each +0.05 / +0.03 / +0.04."""
    sft = [{"m": 0.26}, {"m": 0.17}, {"m": 0.20}]
    rl = [{"m": 0.31}, {"m": 0.20}, {"m": 0.24}]
    sft_spread, rl_spread = learn.seed_spread(sft, ["m"]), learn.seed_spread(rl, ["m"])
    gain = learn.paired_gain(sft, rl, ["m"])
    assert gain["m"]["values"] == pytest.approx([0.05, 0.03, 0.04]) and gain["m"]["sd"] == pytest.approx(0.01)
    v = learn.verdict({"m": 0.0}, sft_spread, rl_spread, ["m"], gain)["m"]
    # RL's mean 0.25 is 0.04 above SFT's 0.21: each seed gained, but not by more than SFT's sd 0.0458
    assert v["sft_sd"] == pytest.approx(0.0458, abs=1e-4) and v["rl_minus_sft"] == pytest.approx(0.04)
    assert v["rl_minus_own_sft"] == pytest.approx(0.04) and v["rl_minus_own_sft_sd"] == pytest.approx(0.01)
    assert v["sft_above_base"] and not v["rl_above_sft"]
    before = [{"m": 0.10}, {"m": 0.30}, {"m": 0.20}]  # mean 0.20, sd 0.10
    after = [{"m": 0.45}, {"m": 0.25}, {"m": 0.35}]  # mean 0.35, sd 0.10: 0.15 above, more than either sd
    w = learn.verdict({"m": 0.0}, learn.seed_spread(before, ["m"]), learn.seed_spread(after, ["m"]), ["m"],
                      learn.paired_gain(before, after, ["m"]))["m"]
    assert w["rl_minus_sft"] == pytest.approx(0.15) and w["rl_minus_own_sft_sd"] == pytest.approx(0.20)
    assert not w["rl_above_sft"]  # seed 1 lost 0.05 to its own SFT: gains 0.35 / -0.05 / 0.15, sd 0.20 > mean 0.15


def test_a_sampled_only_evaluation_has_no_greedy_figures(learn, tmp_path):
    """EVAL_GREEDY=0 (`rlyard eval --no-greedy`): the stage has no greedy success or reward (None,
    not 0, so no verdict is drawn on them), and the spread is only over the metrics every seed has."""
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"tasks": 60, "mean_turns": 1.0, "sampled_mean_reward": 0.3, "sampled_mean_rejected": 0.1,
                                "sampled_mean_constraints": 0.5}))
    result = learn.stage_result(path, 1.0)
    assert result["success"] is None and result["mean_reward"] is None
    assert result["sampled_gate_pass"] == pytest.approx(0.9) and result["sampled_constraint_share"] == pytest.approx(0.45)


def test_the_rl_spread_counts_a_missing_metric_0_and_leaves_out_an_unmeasured_one(learn):
    rl = [{"success": None, "m": 0.4}, {"success": None}]  # the second seed has no m (nothing past the gate)
    spread = learn.seed_spread(rl, ["success", "m"])
    assert "success" not in spread  # not measured (EVAL_GREEDY=0): no verdict on it
    assert spread["m"]["values"] == [0.4, 0.0] and spread["m"]["mean"] == pytest.approx(0.2)


def test_seeds_and_rl_seeds_exclude_each_other(learn, monkeypatch):
    monkeypatch.setenv("SEEDS", "0 1")
    monkeypatch.setenv("RL_SEEDS", "0 1 2")
    with pytest.raises(SystemExit, match="SEEDS .* and RL_SEEDS .* exclude each other"):
        learn.main(["configs/code_learn.yaml"])
