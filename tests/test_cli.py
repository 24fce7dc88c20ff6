"""The `rlyard` command line: help, config errors as exit code 2, environment listing."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from rlyard.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The installed console script when on PATH, else the module (the same entry point)."""
    exe = shutil.which("rlyard")
    command = [exe, *args] if exe else [sys.executable, "-m", "rlyard.cli", *args]
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def test_top_level_help():
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for command in ("train", "eval", "envs"):
        assert command in out
    assert "algo.lr=2e-5 rollout.n=8" in out  # shows how to pass dotted overrides
    assert "--resume" in out


def test_train_help_mentions_overrides():
    result = run_cli("train", "--help")
    assert result.returncode == 0, result.stderr
    assert "overrides" in result.stdout and "dotted overrides" in result.stdout
    assert "algo.lr=2e-5" in result.stdout and "--resume" in result.stdout


def test_help_in_process_exits_zero(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--help"])
    assert info.value.code == 0
    assert "overrides" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train", "algo.lr=-1"], ["algo.lr", "greater than 0"]),
        (["train", "configs/quickstart.yaml", "rollout.top_p=2"], ["rollout.top_p", "less than or equal to 1"]),
        (["train", "algo.lrr=1e-4"], ["algo.lrr", "did you mean algo.lr?"]),
        (["train", "env.name=chess"], ["env.name", "unknown environment 'chess'"]),
        (["train", "nope.yaml"], ["nope.yaml", "does not exist"]),
        (["eval", "configs/quickstart.yaml", "algo.loss_agg=mean"], ["algo.loss_agg", "'token-mean'"]),
    ],
)
def test_bad_config_exits_2_and_names_the_field(capsys, argv, expected):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("rlyard: ")
    for fragment in expected:
        assert fragment in captured.err
    assert "Traceback" not in captured.err


def test_eval_overrides_without_a_config_file(capsys):
    # `rlyard eval --help` documents "dotted overrides, e.g. env.name=countdown model.name=..."
    assert main(["eval", "algo.loss_agg=mean"]) == 2
    err = capsys.readouterr().err
    assert "algo.loss_agg" in err and "'token-mean'" in err


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_model_dir):
    """A one-step run folder (config.yaml + checkpoint) of the tiny model on the toy env."""
    from rlyard.config import load_config
    from rlyard.orchestrate.entry import train

    run_dir = tmp_path_factory.mktemp("cli-run")
    config = load_config(None, [
        f"model.name={tiny_model_dir}", "model.lora.rank=2", "model.lora.alpha=4", "env.name=toy", "env.train_size=4",
        "rollout.prompts_per_step=1", "rollout.n=2", "rollout.max_new_tokens=2", "train.steps=1", "eval.size=3",
        "eval.at_start=false", "eval.at_end=false", "output.progress=false", "output.plot=false",
    ])
    train(config, run_dir)
    return run_dir


def test_eval_checkpoint_writes_results(tiny_run, tmp_path, capsys):
    import json

    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(tiny_run), "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["env"] == "toy" and result["tasks"] == 3.0
    assert 0.0 <= result["accuracy"] <= 1.0 and result["infra_errors"] == 0.0
    assert "accuracy" in capsys.readouterr().out


def test_eval_keeps_its_greedy_episodes_for_the_viewer(tiny_run, tmp_path, capsys):
    """--trajectories: one row per held-out task, with the reward the result counts, read back by
    the viewer's own index; a second evaluation into the same folder replaces the first's rows."""
    import json

    from rlyard.observe.viewer.index import TrajectoryIndex

    out, kept = tmp_path / "eval.json", tmp_path / "episodes"
    for _ in range(2):
        assert main(["eval", "--checkpoint", str(tiny_run), "--output", str(out), "--trajectories", str(kept)]) == 0
    rows = [json.loads(line) for line in (kept / "trajectories.jsonl").read_text().splitlines()]
    result = json.loads(out.read_text())
    assert len(rows) == result["tasks"] == 3 and len({r["task_id"] for r in rows}) == 3
    assert sum(r["reward"] >= 1.0 for r in rows) / 3 == result["accuracy"]
    assert all(r["prompt"] and "segments" in r and r["step"] == 0 for r in rows)
    index = TrajectoryIndex(kept / "trajectories.jsonl", tmp_path / "index.sqlite")
    index.update()
    assert index.count() == 3
    assert "rlyard view" in capsys.readouterr().out


def test_eval_on_the_train_split_plays_the_tasks_the_run_trained_on_first(tiny_run, tmp_path, capsys):
    """--split train: the head of the run's own train stream (its env section and train.seed), in
    its order: what its first steps sampled, never a held-out task."""
    import json

    from rlyard.config import load_config
    from rlyard.data import run_tasks
    from rlyard.envs import get_family

    out, kept = tmp_path / "eval.json", tmp_path / "episodes"
    assert main(["eval", "--checkpoint", str(tiny_run), "--split", "train", "--size", "3", "--output", str(out),
                 "--trajectories", str(kept)]) == 0
    config = load_config(tiny_run / "config.yaml")
    trained = [task.id for task in run_tasks(get_family("toy"), config.env, config.train.seed, 3)]
    rows = [json.loads(line) for line in (kept / "trajectories.jsonl").read_text().splitlines()]
    assert [row["task_id"] for row in rows] == trained and all("-train-" in t for t in trained)
    result = json.loads(out.read_text())
    assert result["tasks"] == 3 and result["split"].startswith("the first 3 tasks of the train stream at train.seed=")
    assert "train stream" in capsys.readouterr().out


def test_eval_samples_report_the_sampled_episodes_means_and_keep_them(tiny_run, tmp_path):
    """--samples: sampled_mean_reward (and each sampled component's mean) is the mean over the
    sampled episodes kept in DIR/sampled/, computed again here from those rows."""
    import json

    out, kept = tmp_path / "eval.json", tmp_path / "episodes"
    assert main(["eval", "--checkpoint", str(tiny_run), "--output", str(out), "--trajectories", str(kept), "--samples", "2"]) == 0
    result = json.loads(out.read_text())
    greedy = [json.loads(line) for line in (kept / "trajectories.jsonl").read_text().splitlines()]
    sampled = [json.loads(line) for line in (kept / "sampled" / "trajectories.jsonl").read_text().splitlines()]
    assert len(greedy) == 3 and len(sampled) == 6 and len({r["task_id"] for r in sampled}) == 3
    assert result["sampled_mean_reward"] == pytest.approx(sum(r["reward"] for r in sampled) / 6)
    assert result["sampled_accuracy"] == pytest.approx(sum(r["reward"] >= 1.0 for r in sampled) / 6)
    names = {name for r in sampled for name in r["components"]}
    assert names  # the toy family reports components; each gets its sampled mean
    for name in names:
        values = [r["components"][name] for r in sampled if name in r["components"]]
        assert result[f"sampled_mean_{name}"] == pytest.approx(sum(values) / len(values))


def test_eval_no_greedy_plays_only_the_sampled_episodes(tiny_run, tmp_path, capsys):
    """--no-greedy: no greedy episode is played or kept, the greedy keys are absent (not 0), and the
    sampled means are those of the kept sampled rows, as with greedy on."""
    import json

    out, kept = tmp_path / "eval.json", tmp_path / "episodes"
    assert main(["eval", "--checkpoint", str(tiny_run), "--output", str(out), "--trajectories", str(kept),
                 "--samples", "2", "--no-greedy", "output.progress=true"]) == 0
    captured = capsys.readouterr()
    result = json.loads(out.read_text())
    sampled = [json.loads(line) for line in (kept / "sampled" / "trajectories.jsonl").read_text().splitlines()]
    greedy_rows = kept / "trajectories.jsonl"
    assert not greedy_rows.exists() or not greedy_rows.read_text().strip()  # no greedy episode
    assert "accuracy" not in result and "mean_reward" not in result and result["tasks"] == 3
    assert len(sampled) == 6 and result["sampled_mean_reward"] == pytest.approx(sum(r["reward"] for r in sampled) / 6)
    assert result["mean_turns"] == pytest.approx(sum(r["turns"] for r in sampled) / 6)
    assert "6/6" in captured.err and "greedy episodes in" not in captured.out  # the bar counts sampled episodes only


def test_eval_no_greedy_without_samples_exits_2_before_loading(capsys):
    assert main(["eval", "--no-greedy"]) == 2
    assert "--no-greedy needs --samples >= 1" in capsys.readouterr().err


def test_eval_checkpoint_applies_overrides(tiny_run, tmp_path, capsys):
    out = tmp_path / "eval.json"
    # a bad override must be reported, not ignored while the eval runs anyway
    assert main(["eval", "--checkpoint", str(tiny_run), "--output", str(out), "algo.loss_agg=mean"]) == 2
    assert "algo.loss_agg" in capsys.readouterr().err
    assert not out.exists()


def test_resume_of_a_non_run_folder_exits_2(capsys, tmp_path):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no config.yaml" in capsys.readouterr().err


def test_envs_list(capsys):
    assert main(["envs", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines if line.strip()]
    assert "arith" in names and "countdown" in names
    arith = next(line for line in lines if line.startswith("arith"))
    assert "arithmetic" in arith.lower()  # each family is listed with its description


def test_envs_list_console_script():
    result = run_cli("envs", "list")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    assert {"arith", "countdown"} <= set(names)


def test_envs_show_prints_tasks(capsys):
    import json

    assert main(["envs", "show", "arith", "-n", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and all(row["id"].startswith("arith-eval-") for row in rows)


def test_eval_checkpoint_json_goes_into_the_run_folder(tiny_run, tmp_path, monkeypatch, capsys):
    import json
    import re

    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--checkpoint", str(tiny_run), "--samples", "2", "--k", "2", "output.progress=true"]) == 0
    captured = capsys.readouterr()
    saved = list(tiny_run.glob("eval-step_000001-*.json"))
    assert len(saved) == 1 and not list(tmp_path.iterdir())  # the run folder, not the working folder
    result = json.loads(saved[0].read_text())
    assert result["tasks"] == 3 and isinstance(result["tasks"], int) and isinstance(result["infra_errors"], int)
    assert re.search(r"^tasks +3$", captured.out, re.M) and re.search(r"^infra_errors +0$", captured.out, re.M)
    assert "9/9" in captured.err  # the progress bar: 3 greedy + 3 x 2 sampled episodes
    saved[0].unlink()


def test_eval_k_above_samples_exits_2_before_loading(capsys):
    assert main(["eval", "--k", "4"]) == 2
    assert "--k 4 needs --samples >= 4" in capsys.readouterr().err


def test_collect_is_a_command_and_writes_demonstrations(tmp_path, capsys):
    import json

    out = tmp_path / "demos.jsonl"
    assert main(["collect", "files", "-n", "3", "--out", str(out), "--no-progress"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(row["metadata"]["reward"] == 1.0 for row in rows)
    assert main(["collect", "arith", "-n", "1", "--out", str(tmp_path / "none.jsonl")]) == 2
    assert "has no oracle" in capsys.readouterr().err
    assert "collect" in run_cli("--help").stdout
