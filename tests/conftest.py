"""Shared fixtures: the real SmolLM2 tokenizer, a tiny random llama, and toy environment families.

Everything is real (tokenizer, transformers model, engine, learner); only the model is tiny.
The suite runs in parallel (scripts/run_tests.py); the hooks at the end keep each module on one
worker and start the slowest modules first, and `--durations-json` records where the time goes.
"""
from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import pytest
import torch

from rlyard.envs import Family, SingleTurnEnv, register
from rlyard.types import Reward, Task

# Tiny models on a small, possibly busy CPU: one thread avoids OpenMP spin-waiting, which made
# each step ~10x slower next to a background job. RLYARD_TEST_THREADS overrides it. The processes
# tests start (the CLI, harnesses, spawned ranks) inherit it too: each xdist worker already has
# a core, and a child spinning two OpenMP threads beside it only takes turns with itself.
TEST_THREADS = os.environ.get("RLYARD_TEST_THREADS", "1")
torch.set_num_threads(int(TEST_THREADS))
os.environ.setdefault("OMP_NUM_THREADS", TEST_THREADS)


@pytest.fixture(autouse=True)
def one_torch_thread_after_each_test():
    """A run in this process (`rlyard.cli.main`, `train`) sets torch's threads from `train.threads`;
    the worker's next tests must not inherit them."""
    yield
    if torch.get_num_threads() != int(TEST_THREADS):
        torch.set_num_threads(int(TEST_THREADS))

# --------------------------------------------------------------------------- toy environments
# "toy": one prompt, reward 1 when the reply contains TOY_TARGET. Measured on the tiny random
# llama below (temperature 1, 8 new tokens): about a quarter of the replies contain a capital
# "A", so the reward starts low but not at zero, and GRPO can push it up.
TOY_TARGET = "A"
TOY_PROMPT = "Say something."


def toy_tasks(split: str, n: int, seed: int, **options) -> list[Task]:
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}")
    target = options.get("target", TOY_TARGET)
    return [
        Task(id=f"toy-{split}-{i}", prompt=[{"role": "user", "content": TOY_PROMPT}], env="toy", payload={"target": target})
        for i in range(n)
    ]


def toy_verify(reply: str, task: Task) -> Reward:
    hit = float(task.payload["target"] in reply)
    return Reward(value=hit, components={"hit": hit})


def broken_verify(reply: str, task: Task) -> Reward:
    """Raises for replies of even length (about half of them): a grader bug, not the policy's."""
    if len(reply) % 2 == 0:
        raise RuntimeError("grader crashed")
    return toy_verify(reply, task)


TOY = register(Family(name="toy", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(toy_verify), verify=toy_verify,
                      description="test family: reward 1 when the reply contains a target character"))
TOY_BROKEN = register(Family(name="toy_broken", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(broken_verify),
                             verify=broken_verify, description="test family whose verifier raises on half the replies"))


# --------------------------------------------------------------------------- model fixtures
@pytest.fixture(scope="session")
def tokenizer():
    from rlyard.models import load_tokenizer

    return load_tokenizer("embedded")


def make_tiny_llama(vocab_size: int):
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    model.eval()
    return model


@pytest.fixture
def tiny_model(tokenizer):
    """A fresh tiny random llama (function scope: tests may train or overwrite it)."""
    return make_tiny_llama(len(tokenizer))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """The tiny model + the real tokenizer saved with save_pretrained: a valid `model.name` path."""
    path = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_llama(len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def chat_prompt(tokenizer):
    """The toy task's prompt rendered with the chat template, as the rollout does."""
    from rlyard.orchestrate.rollout import render_prompt

    return render_prompt(tokenizer, [{"role": "user", "content": TOY_PROMPT}])


@pytest.fixture(scope="session")
def script_module():
    """Loads a file of scripts/ (not a package) as a module, so a recipe script's arithmetic is
    tested directly: `script_module("learn.py")`."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(Path(name).stem, Path(__file__).resolve().parent.parent / "scripts" / name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


# --------------------------------------------------------------------------- parallel runs
# Under pytest-xdist (`--dist loadscope`, as scripts/run_tests.py runs it) each module is one unit
# of work, so its module-scoped fixtures are built once, except the modules below, whose tests
# share nothing costly and spread over the workers. The scheduler is our own because xdist's
# `loadgroup` marks no longer take effect under pytest 9.2 (xdist 3.8 rewrites `_nodeid`, which
# pytest no longer reads). The slowest modules start first so that no long module is left to run
# alone at the end; their seconds come from the last committed run (bench/results/test_durations.json).
DURATIONS_FILE = Path(__file__).resolve().parent.parent / "bench" / "results" / "test_durations.json"
SPREAD_MODULES = {"tests/envs/test_general_tasks.py", "tests/envs/test_cyber_targets.py", "tests/envs/test_code_builtin.py"}


def pytest_addoption(parser):
    parser.addoption("--durations-json", default=None, metavar="PATH",
                     help="write every test's seconds, per module and in all, to PATH (bench/test_durations.py)")


def _unit_seconds() -> dict[str, float]:
    """Seconds of each unit of work in the last committed run: a module, or a test of SPREAD_MODULES
    (sorted by its module's sum instead, a 50 to 100-second test there could start last and run
    alone at the end)."""
    try:
        record = json.loads(DURATIONS_FILE.read_text())
        return {**record["module_seconds"], **record.get("spread_test_seconds", {})}
    except (OSError, ValueError, KeyError):
        return {}


def _unit(nodeid: str) -> str:
    return nodeid if _module(nodeid) in SPREAD_MODULES else _module(nodeid)


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):
        return
    seconds = _unit_seconds()
    unknown = max(seconds.values(), default=0.0)  # a new unit: assume it is slow, start it early
    items.sort(key=lambda item: -seconds.get(_unit(item.nodeid), unknown))


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        """A module per unit of work (a test per unit in SPREAD_MODULES), in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return ModuleScheduling(config, log)


class _DurationRecorder:
    """Collects each test's setup + call + teardown seconds on the controller (xdist or not)."""

    def __init__(self, path: str):
        self.path, self.seconds, self.outcomes, self.start = Path(path), {}, {}, time.monotonic()

    def pytest_runtest_logreport(self, report):
        nodeid = report.nodeid
        self.seconds[nodeid] = self.seconds.get(nodeid, 0.0) + report.duration
        if report.when == "call" or report.outcome != "passed":
            self.outcomes.setdefault(nodeid, report.outcome)

    def pytest_sessionfinish(self, session, exitstatus):
        modules: dict[str, float] = {}
        for nodeid, sec in self.seconds.items():
            modules[nodeid.split("::")[0]] = modules.get(nodeid.split("::")[0], 0.0) + sec
        counts: dict[str, int] = {}
        for outcome in self.outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        slowest = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:30]
        record = {"pytest_seconds": round(time.monotonic() - self.start, 1), "exit_status": int(exitstatus),
                  "tests": len(self.outcomes), "outcomes": counts,
                  "slowest": [{"test": t, "seconds": round(s, 2)} for t, s in slowest],
                  "module_seconds": {m: round(s, 2) for m, s in sorted(modules.items(), key=lambda kv: -kv[1])},
                  "spread_test_seconds": {t: round(s, 2) for t, s in sorted(self.seconds.items(), key=lambda kv: -kv[1])
                                          if _module(t) in SPREAD_MODULES}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(self.path)


def pytest_configure(config):
    path = config.getoption("--durations-json", default=None)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_DurationRecorder(path), "rlyard-durations")
