"""kill -9 and resume: the trainer (`python -m rlyard.cli train`) is SIGKILLed at every point of
rlyard/testing/kill.py and resumed with --resume.

Sync: one run killed six times, at a different point each time, ends bit-identical to an
uninterrupted run (every weight and optimizer tensor, the RNG state, the data position and
trajectories.jsonl). Async: a run killed twice trains every task it handed out exactly once, and
the tasks in flight at a checkpoint are played after the resume (none lost).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from rlyard.config import load_run_config
from rlyard.data import train_stream
from rlyard.testing import faults
from rlyard.testing.kill import KILL_ENV, KILL_POINTS

pytestmark = pytest.mark.timeout(300)


def overrides(model_dir: Path, run_dir: Path, *more: str) -> list[str]:
    return [f"model.name={model_dir}", "env.name=rlyard.testing.faults:SINGLE", "env.train_size=8", "rollout.prompts_per_step=2",
            "rollout.n=4", "rollout.max_new_tokens=6", "eval.size=0", "output.progress=false", "output.plot=false",
            f"output.run_dir={run_dir}", "model.lora.enabled=false", "algo.lr=1e-2", "train.threads=1", "train.steps=6",
            "output.checkpoint_every=2", *more]


# A zygote: one process that imports torch, transformers and rlyard once, then forks a trainer
# per run (a fresh process each, as `rlyard train` would be, without 5 s of imports each time).
# It never runs a torch op itself, so forking it is safe.
ZYGOTE = r"""
import json, os, sys, time
import rlyard.cli, rlyard.orchestrate.entry, rlyard.orchestrate.sync_loop, rlyard.orchestrate.async_loop, transformers
from transformers import LlamaForCausalLM
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.environ.update(job["env"])
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1); os.dup2(log, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1); sys.stderr = os.fdopen(2, "w", buffering=1)
        try:
            code = rlyard.cli.main(job["args"])
        except BaseException:
            import traceback; traceback.print_exc(); code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code or 0)
    started, watch, deadline = time.monotonic(), job.get("kill_when"), None
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if watch and deadline is None and os.path.exists(watch["path"]) and os.path.getsize(watch["path"]) >= watch["bytes"]:
            deadline = time.monotonic() + watch["then_s"]
        if deadline is not None and time.monotonic() >= deadline:  # a SIGKILL from outside, whatever the trainer is doing
            os.kill(pid, 9)
            done = os.waitpid(pid, 0)
            break
        time.sleep(0.002)
    status = done[1]
    print(json.dumps({"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, "seconds": time.monotonic() - started,
                      "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}), flush=True)
"""


@pytest.fixture(scope="module")
def zygote():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop(KILL_ENV, None)
    process = subprocess.Popen([sys.executable, "-u", "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout.readline().strip() == "ready"
    yield process
    process.stdin.close()
    process.terminate()  # idle between jobs: nothing to finish, and an interpreter holding torch is slow to exit
    process.wait(timeout=60)


KILLED_AT: list[str] = []  # the points the sync test killed at


def trainer(zygote, run_dir: Path, kill_at: str | None, args: list[str] | None = None, kill_when: dict | None = None) -> dict:
    """`rlyard train` in a fresh (forked) process: with `args`, else `--resume run_dir`; SIGKILLed at
    `kill_at` (RLYARD_FAULT_KILL_AT), or from outside `kill_when["then_s"]` seconds after the file
    `kill_when["path"]` has reached `kill_when["bytes"]`. Returns its exit (signal, code, seconds)
    and what it printed."""
    log = run_dir.parent / f"{run_dir.name}-{len(list(run_dir.parent.glob(run_dir.name + '-*.log')))}.log"
    job = {"args": ["train", *(args if args is not None else ["--resume", str(run_dir)])], "log": str(log),
           "env": {KILL_ENV: kill_at} if kill_at else {}} | ({"kill_when": kill_when} if kill_when else {})
    zygote.stdin.write(json.dumps(job) + "\n")
    zygote.stdin.flush()
    status = json.loads(zygote.stdout.readline())
    if kill_at:
        KILLED_AT.append(kill_at.partition(":")[0])
    status["printed"] = printed = log.read_text()
    if kill_when:
        assert status["signal"] == 9 or status["code"] == 0, (status, printed[-3000:])
    elif kill_at:
        assert status["signal"] == 9, (kill_at, status, printed[-3000:])
        assert f"SIGKILL at {kill_at.replace(':', ' #')}" in printed
    else:
        assert status["code"] == 0, (status, printed[-3000:])
    return status


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def latest(run_dir: Path) -> str:
    return (run_dir / "checkpoints" / "latest").read_text().strip()


def assert_same_tensors(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and where.endswith("train_seconds"):
        pass  # wall time
    else:
        assert type(a) is type(b) and (a == b if not hasattr(a, "shape") else (a == b).all()), where


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir, zygote) -> tuple[Path, float]:
    """The uninterrupted run, and how long its process took."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    return run_dir, trainer(zygote, run_dir, None, overrides(tiny_model_dir, run_dir))["seconds"]


def assert_same_run(killed: Path, reference: Path) -> None:
    """Bit-identical: rows, metrics but for time/*, and every tensor of the final checkpoint."""
    assert read_jsonl(killed / "trajectories.jsonl") == read_jsonl(reference / "trajectories.jsonl")
    metrics_ref, metrics_killed = read_jsonl(reference / "metrics.jsonl"), read_jsonl(killed / "metrics.jsonl")
    assert [m["step"] for m in metrics_killed] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(metrics_ref, metrics_killed):
        assert {k: v for k, v in a.items() if not k.startswith("time/")} == {k: v for k, v in b.items() if not k.startswith("time/")}
    for name in ("weights.pt", "optimizer.pt", "state.pt"):
        a = torch.load(reference / "checkpoints" / "step_000006" / name, weights_only=False)
        b = torch.load(killed / "checkpoints" / "step_000006" / name, weights_only=False)
        assert_same_tensors(a, b, name)
    state = torch.load(killed / "checkpoints" / "step_000006" / "state.pt", weights_only=False)
    assert state["stream"]["position"] == 12 and state["policy_version"] == 6


def test_sync_run_killed_at_every_point_resumes_bit_identical(tmp_path, tiny_model_dir, zygote, reference):
    killed = tmp_path / "killed"
    KILLED_AT.clear()

    trainer(zygote, killed, "after_checkpoint:1", overrides(tiny_model_dir, killed))  # steps 1-2, checkpoint 2
    assert latest(killed) == "step_000002"
    trainer(zygote, killed, "update:2")  # step 3 trained and logged; killed inside step 4's update
    assert {r["step"] for r in read_jsonl(killed / "trajectories.jsonl")} == {1, 2, 3}
    trainer(zygote, killed, "checkpoint:1")  # killed while step 4's checkpoint is in its staging folder
    assert (killed / "checkpoints" / ".staging-step_000004").is_dir() and latest(killed) == "step_000002"
    trainer(zygote, killed, "checkpoint_pointer:1")  # step_000004 in place, the pointer still names step 2
    assert (killed / "checkpoints" / "step_000004" / "manifest.json").exists() and latest(killed) == "step_000002"
    trainer(zygote, killed, "rollout:2")  # resumes from step 4 (the newest complete one); killed in step 6's rollout
    trainer(zygote, killed, "logged:2")  # steps 5 and 6 logged; killed before step 6's checkpoint
    assert max(p.name for p in (killed / "checkpoints").glob("step_*")) == "step_000004"
    assert {r["step"] for r in read_jsonl(killed / "trajectories.jsonl")} == {1, 2, 3, 4, 5, 6}
    printed = trainer(zygote, killed, None)["printed"]
    assert sorted(KILLED_AT) == sorted(KILL_POINTS)  # every point of rlyard/testing/kill.py, once
    assert "step_000004 at step 4" in printed
    assert not list((killed / "checkpoints").glob(".staging-*"))
    assert_same_run(killed, reference[0])


def test_sync_run_killed_at_random_instants_resumes_bit_identical(tmp_path, tiny_model_dir, zygote, reference):
    """SIGKILL from outside at seeded random instants: a random time (0-150 ms) after
    trajectories.jsonl reaches a random fraction of its final size, wherever the trainer then is
    (a checkpoint, a half-written line, a rollout). Three kills, then the run to its end."""
    killed, final_bytes = tmp_path / "killed", (reference[0] / "trajectories.jsonl").stat().st_size
    rng = random.Random(0)
    for i, fraction in enumerate(sorted(rng.uniform(0.15, 0.95) for _ in range(3))):
        when = {"path": str(killed / "trajectories.jsonl"), "bytes": int(fraction * final_bytes), "then_s": rng.uniform(0.0, 0.15)}
        exit_ = trainer(zygote, killed, None, overrides(tiny_model_dir, killed) if i == 0 else None, kill_when=when)
        assert exit_["signal"] == 9, exit_["printed"][-2000:]
    trainer(zygote, killed, None)
    assert_same_run(killed, reference[0])


def trained_tasks(run_dir: Path) -> list[str]:
    """The task of each trained group (a group's rows share its group id)."""
    rows = read_jsonl(run_dir / "trajectories.jsonl")
    return [task for task, _ in {(r["task_id"], r["group_id"]) for r in rows}]


def test_async_run_killed_twice_trains_each_task_once_and_loses_none(tmp_path, tiny_model_dir, zygote):
    run_dir = tmp_path / "async"
    args = overrides(tiny_model_dir, run_dir, "orchestrate.mode=async", "orchestrate.workers=2", "env.train_size=40", "rollout.n=2")
    trainer(zygote, run_dir, "after_checkpoint:1", args)
    at_kill = torch.load(run_dir / "checkpoints" / "step_000002" / "state.pt", weights_only=False)["source"]
    assert at_kill["pending_tasks"], "workers had tasks in flight at the checkpoint"
    trainer(zygote, run_dir, "update:2")  # step 3 trained and logged, killed in step 4: step 3 is redone after the resume
    trainer(zygote, run_dir, None)

    trained = trained_tasks(run_dir)
    assert len(trained) == 6 * 2
    assert not [t for t, count in Counter(trained).items() if count > 1]  # no task trained twice (40 tasks: no epoch repeats)
    final = torch.load(run_dir / "checkpoints" / "step_000006" / "state.pt", weights_only=False)["source"]
    config = load_run_config(run_dir, [])
    handed_out = train_stream(faults.make_tasks("train", 40, config.env.seed), config.env.seed, config.train.seed).next(final["stream"]["position"])
    # every task the stream handed out is trained or still pending: none lost, none twice
    assert Counter(trained) + Counter(final["pending_tasks"]) == Counter(t.id for t in handed_out)
    assert set(at_kill["pending_tasks"]) <= set(trained) | set(final["pending_tasks"])  # in flight at the kill: played after it
