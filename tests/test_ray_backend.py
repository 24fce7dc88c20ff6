"""`orchestrate.backend=ray` on a local 2-CPU Ray cluster: the learner, rollout and grader
actors run the ordinary sync and async loops; a rollout actor killed mid-run is restarted,
gets the current weights, and its groups are played again, so that no group is lost.

The families here are built-in or loaded from files (`env.reward=file.py:fn`): the actors
are other processes, which never see a family registered in this one.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from rlyard.cli import main as cli_main  # noqa: E402
from rlyard.config import ConfigError, load_config, load_run_config  # noqa: E402
from rlyard.envs import get_family  # noqa: E402
from rlyard.orchestrate.entry import train  # noqa: E402
from test_run_imports import RUN  # noqa: E402

pytestmark = pytest.mark.timeout(300)
DATA = Path(__file__).parent / "data"


def rlyard_train(report: Path, config: str, *overrides: str) -> subprocess.CompletedProcess:
    """`rlyard train CONFIG OVERRIDES` in a fresh interpreter (test_run_imports.py's runner of the
    CLI's `main`), which writes to `report` its exit code and whether it imported torch."""
    return subprocess.run([sys.executable, "-c", RUN, config, str(report), *overrides], capture_output=True, text=True,
                          timeout=280, env={**os.environ, "COLUMNS": "120"})


def test_cli_smoke_command_of_cluster_md_then_eval_that_run(tiny_model_dir, tmp_path):
    """docs/cluster.md's one-machine command (a private Ray cluster started by the run; first in
    this file, before the module's own cluster) on the tiny model, with the dense file reward so
    that every step trains: 2 rollout actors and a grader actor run the sync loop, every push
    reaches both rollout actors (check_run), and the saved config names Ray, so `--resume` runs on
    Ray again (a resumed sharded learner's state: test_fsdp.py's round trip). Then `rlyard eval` on
    that very run folder, through the CLI's own `main` in this process (the loaders are the CLI's;
    a second process would only import torch again)."""
    run_dir = tmp_path / "cli"
    tiny = [f"model.name={tiny_model_dir}", "train.steps=2", "rollout.prompts_per_step=2", "rollout.n=4",
            "rollout.max_new_tokens=8", "eval.size=2", "output.progress=false", f"output.run_dir={run_dir}",
            "env.name=dataset", f"env.options={{path: {DATA / 'gsm8k_test_head30.jsonl'}, prompt_column: question}}",
            f"env.reward={DATA / 'vowel_reward.py'}:vowel_share", "rollout.truncated_reward=null", "algo.tis_cap=10"]
    report = tmp_path / "driver.json"
    trained = rlyard_train(report, "configs/quickstart.yaml", "orchestrate.backend=ray", "orchestrate.ray.rollout_workers=2", *tiny)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    driver = json.loads(report.read_text())
    assert driver["code"] == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    assert driver["torch"] is False  # the driver only launches actors (RunResult in types.py)
    assert "2 rollout actor(s), 1 grader actor(s) and the learner" in trained.stdout
    assert "base model held-out" in trained.stdout and "final model held-out" in trained.stdout, trained.stdout[-2000:]
    config = load_run_config(run_dir)
    assert config.orchestrate.backend == "ray" and config.orchestrate.ray.rollout_workers == 2  # the saved config resumes on Ray
    check_run(run_dir, config, 2)
    out = tmp_path / "eval.json"
    assert cli_main(["eval", "--checkpoint", str(run_dir), "--output", str(out)]) == 0
    assert json.loads(out.read_text())["tasks"] == 2


@pytest.fixture(scope="module")
def local_ray():
    """One local cluster for the module: 2 CPUs, as on this machine (train_on_ray joins it)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    yield
    ray.shutdown()


def ray_config(model_dir: Path, run_dir: Path, *overrides: str):
    return load_config(None, [
        f"model.name={model_dir}", "env.name=dataset", f"env.options.path={DATA / 'gsm8k_test_head30.jsonl'}",
        "env.options.prompt_column=question", f"env.reward={DATA / 'vowel_reward.py'}:vowel_share",
        "rollout.prompts_per_step=2", "rollout.n=4", "rollout.max_new_tokens=8", "eval.size=4", "output.progress=false",
        "output.plot=false", f"output.run_dir={run_dir}", "model.lora.enabled=false", "algo.lr=1e-2",
        "algo.tis_cap=10", "train.steps=3", "orchestrate.backend=ray", "orchestrate.workers=2",
        "orchestrate.ray.rollout_workers=2", "orchestrate.ray.graders=1", "orchestrate.ray.learner_cpus=0.5",
        "orchestrate.ray.rollout_cpus=0.5", "orchestrate.ray.grader_cpus=0.25", *overrides,
    ])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_run(run_dir: Path, config, steps: int) -> list[dict]:
    """Every step trained whole groups of n, every weight update reached the rollout actors
    (sync: the engine's logprobs are the learner's, TIS weights 1; async: every trained token
    within the staleness bound), and the run folder is complete."""
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "loss/policy" in m]
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    for m in metrics:
        assert m["rollout/infra_errors"] == 0.0
        assert m["reward/std"] > 0.0  # the dense reward gives every step a gradient
        if config.orchestrate.mode == "sync":
            # fp32 on both sides: a rollout actor sampling with stale weights would be off by far more
            assert m["train/tis_weight_mean"] == pytest.approx(1.0, abs=1e-3), m
    rows = read_jsonl(run_dir / "trajectories.jsonl")
    for row in rows if config.orchestrate.mode == "async" else []:
        assert row["trained_at_version"] == row["step"] - 1
        assert row["trained_at_version"] - min(row["policy_versions"]) <= config.orchestrate.max_staleness
    per_step = Counter(row["step"] for row in rows)
    want = config.rollout.prompts_per_step * config.rollout.n
    assert per_step == {step: want for step in range(1, steps + 1)}
    groups = Counter((row["step"], row["group_id"]) for row in rows)
    assert set(groups.values()) == {config.rollout.n}, groups  # no group split, lost or doubled
    assert (run_dir / "checkpoints" / f"step_{steps:06d}").is_dir()
    return metrics


def test_async_multi_turn_training_on_ray_with_grader_actors(local_ray, tiny_model_dir, tmp_path):
    """files: a multi-turn family whose sandboxes live in the grader actor."""
    run_dir = tmp_path / "async"
    config = load_config(None, [
        f"model.name={tiny_model_dir}", "env.name=files", "rollout.prompts_per_step=2", "rollout.n=2",
        "rollout.max_new_tokens=8", "agent.max_turns=2", "eval.size=2", "output.progress=false", "output.plot=false",
        f"output.run_dir={run_dir}", "model.lora.enabled=false", "train.steps=2", "orchestrate.mode=async",
        "orchestrate.backend=ray", "orchestrate.workers=2", "orchestrate.ray.rollout_workers=1",
        "orchestrate.ray.learner_cpus=0.5", "orchestrate.ray.rollout_cpus=0.5", "orchestrate.ray.grader_cpus=0.5",
    ])
    result = train(config, run_dir)
    assert result.steps == 2
    rows = read_jsonl(run_dir / "trajectories.jsonl")
    assert Counter(row["step"] for row in rows) == {1: 4, 2: 4}
    assert not any(row["infra_error"] for row in rows), rows


def test_killed_rollout_and_grader_actors_are_restarted_and_no_group_is_lost(local_ray, tiny_model_dir, tmp_path):
    """Async (the fleet's recovery is one code path for both loops, and async adds concurrent
    calls). The rollout actor is killed once step 1 is logged, the grader once step 3 is: the
    grader hosts the episodes' environments (here the batched reward), so its death fails the
    episodes it held, which are played again once it is back, never trained as failures."""
    run_dir, namespace = tmp_path / "kill", "rlyard-kill"
    config = ray_config(tiny_model_dir, run_dir, "orchestrate.mode=async", "train.steps=6", "eval.size=0",
                        "orchestrate.ray.rollout_workers=1", f"orchestrate.ray.namespace={namespace}")
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = train(config, run_dir)
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    metrics_file = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 200
    for after_step, actor in ((1, "rollout-0"), (3, "grader-0")):
        while not (metrics_file.exists() and any(m["step"] >= after_step for m in read_jsonl(metrics_file))):
            assert thread.is_alive() and time.monotonic() < deadline, outcome
            time.sleep(0.02)
        ray.kill(ray.get_actor(actor, namespace=namespace), no_restart=False)  # Ray restarts it
    thread.join(timeout=240)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].steps == 6
    metrics = check_run(run_dir, config, 6)  # every trained step: no infra error, whole groups
    assert metrics[-1]["rollout/actor_restarts"] == 1.0 and metrics[-1]["rollout/grader_restarts"] == 1.0
    assert metrics[-1]["rollout/replayed_calls"] >= 1.0


def test_remote_environments_grade_in_the_grader_actor(local_ray):
    """A files episode played through RemoteEnv: the oracle's replies solve it in the grader
    actor's sandbox (reward 1), and a wrong answer there scores 0, exactly as locally."""
    from rlyard.orchestrate.ray_actors import GraderActor, RemoteEnv

    config = load_config(None, ["env.name=files"])
    family = get_family("files")
    task = family.make_tasks("eval", 1, 0)[0]
    grader = ray.remote(GraderActor).options(num_cpus=0.5, max_concurrency=4).remote(config.model_dump(mode="json"), 0.5)
    try:
        for replies, expected in ((family.oracle(task, random.Random(0)), 1.0), (["<answer>no such thing</answer>"], 0.0)):
            env = RemoteEnv(grader, lambda: None)
            env.reset(task)
            for reply in replies:
                if env.step(reply).done:
                    break
            assert env.score().value == expected
            env.close()
    finally:
        ray.kill(grader)


def test_a_bundle_no_node_can_hold_is_refused_at_once(local_ray, tiny_model_dir, tmp_path):
    config = ray_config(tiny_model_dir, tmp_path, "orchestrate.ray.learner_gpus=1")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"the learner actor asks for \{'CPU': 0.5, 'GPU': 1.0\}, more than any node"):
        train(config, tmp_path / "run")
    assert time.monotonic() - started < 30  # not the placement group's 600 s wait


def test_refused_with_an_openai_engine(tiny_model_dir, tmp_path):
    config = ray_config(tiny_model_dir, tmp_path, "rollout.engine=openai", "rollout.base_url=http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="the server already is the rollout fleet"):
        train(config, tmp_path / "run")


def test_a_learner_over_two_ranks_takes_the_single_learners_steps(local_ray, tiny_model_dir, tmp_path):
    """orchestrate.ray.learners=2: an FSDP2 learner over two actors (gloo on the CPU). Same seed,
    same rollouts: its losses, its rewards and its checkpointed adapter equal the one-process run's
    (backend local: Ray's one-rank run equals it to the last digit). Its step-2 checkpoint is
    gathered from both ranks. Resuming from such a checkpoint (sharded optimizer state scattered
    back) is test_fsdp.py's round trip, in one spawn instead of a second set of Ray actors."""
    import torch

    runs = {}
    for ranks in (1, 2):
        run_dir = tmp_path / f"ranks{ranks}"
        backend = "ray" if ranks == 2 else "local"
        config = ray_config(tiny_model_dir, run_dir, "model.lora.enabled=true", "model.lora.rank=4", "algo.lr=5e-2",
                            "eval.size=0", "orchestrate.ray.graders=0", "orchestrate.ray.rollout_workers=1",
                            f"orchestrate.ray.learners={ranks}", "orchestrate.ray.learner_cpus=0.5", "output.checkpoint_every=1",
                            f"orchestrate.backend={backend}", "train.steps=2")
        assert train(config, run_dir).steps == 2
        runs[ranks] = (check_run(run_dir, config, 2), torch.load(run_dir / "checkpoints" / "step_000002" / "weights.pt"))
    (one, one_weights), (two, two_weights) = runs[1], runs[2]
    for a, b in zip(one, two):
        assert b["reward/mean"] == pytest.approx(a["reward/mean"], abs=1e-6)  # step 2 sampled by equal weights
        for key in ("loss/policy", "loss/grad_norm", "train/tis_weight_mean"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
    assert one_weights.keys() == two_weights.keys()
    # Adam divides by sqrt(v): where a gradient is ~1e-10, rounding moves that entry by up to lr
    # (docs/fsdp.md), so the bound is on the mean and a fraction of lr on the largest
    diffs = torch.cat([(one_weights[k] - two_weights[k]).abs().flatten() for k in one_weights])
    print(f"[two ranks] adapter after 2 steps: max |diff| {float(diffs.max()):.2e}, mean {float(diffs.mean()):.2e}")
    assert float(diffs.max()) < 5e-4 and float(diffs.mean()) < 1e-6
    assert (tmp_path / "ranks2" / "checkpoints" / "step_000002" / "adapter" / "adapter_config.json").exists()
