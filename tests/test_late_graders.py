"""Process-global state of a run (issue 37, item 8): the run folder goes to the families with each
task, not through os.environ, and a grader past env.grader_timeout_s is stopped, not left running."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from rlyard.agent.loop import AgentLimits, run_episodes
from rlyard.config import load_config
from rlyard.engines import HFEngine
from rlyard.environment.deadline import GraderTimeout, within
from rlyard.environment import StepResult
from rlyard.types import Reward, SamplingParams, Task

pytestmark = pytest.mark.timeout(120)


def looping_grader(threads: list, swallow: bool):
    """A grader stuck in a Python loop (for at most 60 s, so that a failing run ends too)."""

    def score():
        threads.append(threading.current_thread())
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                sum(range(1000))
            except Exception:  # a grader that swallows its errors is stopped too
                if not swallow:
                    raise
        return Reward(1.0)

    return score


@pytest.mark.parametrize("swallow", [False, True], ids=["plain", "swallows-exceptions"])
def test_a_late_grader_looping_in_python_is_stopped(swallow):
    threads: list = []
    started = time.monotonic()
    with pytest.raises(GraderTimeout, match="stopped"):
        within(0.3, looping_grader(threads, swallow))
    [thread] = threads
    thread.join(timeout=10)
    assert not thread.is_alive() and time.monotonic() - started < 15


class BlockedGraderEnv:
    """Its grader waits on a process of the episode (as a sandboxed test run does); close() kills it."""

    def __init__(self):
        self.process, self.threads = None, []

    def reset(self, task):
        return list(task.prompt)

    def step(self, reply):
        return StepResult(done=True, reason="submitted")

    def score(self):
        self.threads.append(threading.current_thread())
        self.process = subprocess.Popen(["sleep", "60"])
        self.process.wait()
        return Reward(1.0)

    def close(self):
        if self.process is not None:
            self.process.kill()


def test_a_late_grader_blocked_on_the_episode_is_stopped_when_the_loop_closes_it(tiny_model, tokenizer):
    env = BlockedGraderEnv()
    task = Task(id="t", prompt=[{"role": "user", "content": "Hi"}], env="blocked")
    params = SamplingParams(temperature=1.0, max_new_tokens=2, stop_token_ids=tuple(range(len(tokenizer))), seed=0)
    limits = AgentLimits(max_turns=1, max_tokens_per_turn=2, max_total_tokens=256, grader_timeout_s=0.5)
    (traj,) = run_episodes(HFEngine(tiny_model, tokenizer.pad_token_id), tokenizer, [env], [task], ["g"], params, limits)
    assert traj.infra_error and "GraderTimeout" in traj.completion_text
    [thread] = env.threads
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_two_runs_in_one_process_keep_their_own_run_folder(tiny_model_dir, tmp_path):
    from rlyard.orchestrate.setup import build

    before = os.environ.get("RLYARD_RUN_DIR")
    config = load_config(None, [f"model.name={tiny_model_dir}", "env.name=toy", "env.train_size=4", "eval.size=2",
                                "model.lora.enabled=false"])
    first, second = (build(config, run_dir=tmp_path / name) for name in ("first", "second"))
    for c, name in ((first, "first"), (second, "second")):
        folder = str((tmp_path / name).resolve())
        assert {t.metadata["run_dir"] for t in c.stream.next(4)} == {folder}
        assert {t.metadata["run_dir"] for t in c.eval_tasks} == {folder}
    assert os.environ.get("RLYARD_RUN_DIR") == before  # nothing process-global was set
