"""Demonstrations as JSONL conversations: oracle episodes played through the real env, or sessions.

One conversation per line, the format `rlyard sft` reads (docs/collect.md):
    {"messages": [{"role": "system" | "user" | "assistant" | "tool", "content": ...}, ...],
     "metadata": {"env", "task_id", "reward", "turns", "source": "oracle" | "session", "seed", ...}}
An assistant message's content is the exact reply text (tool-call markup included); a tool
message is exactly what the env's `step` returned. There is no "tools" key: every rlyard
conversation already carries its tool specs in the system message, rendered as the policy saw
them, and passing them to a chat template again would show them twice.

Oracle demonstrations come from the train split only: a held-out task in supervised data would
make every later eval number a measure of memory.
"""
from __future__ import annotations

import json
import random
import traceback
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from rlyard.envs import get_family
from rlyard.environment import Family
from rlyard.observe.store import write_atomic
from rlyard.types import Task


class NoOracle(ValueError):
    """The family has no oracle (Family.oracle is None): nothing to collect from it."""


@dataclass
class Report:
    """What a collection did: the demonstrations, and the tasks that gave none, with why."""

    demos: list[dict[str, Any]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (task id, why): the oracle scored < 1
    infra: list[tuple[str, str]] = field(default_factory=list)  # (task id, why): the env or grader broke (not a 0)
    unplayable: list[tuple[str, str]] = field(default_factory=list)  # (task id, why): the oracle cannot play it

    @property
    def mean_turns(self) -> float:
        return sum(d["metadata"]["turns"] for d in self.demos) / len(self.demos) if self.demos else 0.0


def oracle_family(name: str) -> Family:
    family = get_family(name)
    if family.oracle is None:
        raise NoOracle(f"environment {name!r} has no oracle, so there is nothing to collect from it "
                       "(families with one set Family.oracle; `rlyard collect --sessions` converts recorded sessions instead)")
    return family


def train_tasks(family: Family, n: int, seed: int, options: dict[str, Any]) -> list[Task]:
    """`n` train-split tasks; refuses a family that hands back a task marked for eval."""
    tasks = family.make_tasks("train", n, seed, **options)
    leaked = [t.id for t in tasks if t.metadata.get("split", "train") != "train"]
    if leaked:
        raise RuntimeError(f"{family.name}.make_tasks('train') returned held-out tasks {leaked[:3]}: refusing to "
                           "turn eval tasks into demonstrations")
    return tasks


class Unfinished(Exception):
    """The oracle's replies and the episode disagree: replies left after the end, or none left before it."""


def play(family: Family, task: Task, replies: list[str]) -> tuple[list[dict], Any]:
    """Play `replies` through a fresh env: (the conversation, the env's Reward). Raises
    `Unfinished` when the replies end before the episode does or go on after it ended; any other
    exception is the env's (sandbox, grader)."""
    env = family.make_env()
    try:
        messages = list(env.reset(task))
        for k, reply in enumerate(replies, 1):
            result = env.step(reply)
            messages.append({"role": "assistant", "content": reply})
            messages += [dict(m) for m in result.messages]
            if result.done:
                if k < len(replies):
                    raise Unfinished(f"the episode ended ({result.reason}) after reply {k} of {len(replies)}")
                break
        else:
            raise Unfinished(f"the episode was not over after the oracle's {len(replies)} replies")
        return messages, env.score()
    finally:
        env.close()


def demonstrate(family: Family, task: Task, rng: random.Random) -> tuple[str, Any]:
    """One oracle episode: ("demo", (messages, turns, reward)), or ("failed" | "infra" | "unplayable", why).
    A demonstration reaches the family's `demo_min_reward` (1 unless its reward is a graded score)."""
    try:
        replies = family.oracle(task, rng)
    except Exception as e:  # an oracle with no route for this task (an arm it cannot play ...)
        return "unplayable", f"{type(e).__name__}: {e}"
    try:
        messages, reward = play(family, task, replies)
    except Unfinished as e:
        return "failed", str(e)
    except Exception as e:
        return "infra", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=2)}"
    if reward.infra_error:
        return "infra", str(reward.info.get("error", "the grader reported an infrastructure failure"))
    if reward.value < family.demo_min_reward:
        return "failed", (f"reward {reward.value} < {family.demo_min_reward}: "
                          f"{reward.info.get('error') or reward.components}")
    return "demo", (messages, len(replies), reward.value)


def collect_oracle(env_name: str, options: dict[str, Any] | None = None, n: int = 100, seed: int = 0, per_task: int = 1,
                   progress: Callable[[int, int], None] | None = None) -> Report:
    """Play the family's oracle on `n` train tasks (`per_task` variants each) and keep the episodes
    that score 1. A task scored below 1 is counted in `failed`; one whose env, sandbox or grader
    broke goes to `infra` (an infrastructure failure is not the oracle's 0). `progress(done, total)`
    after each episode."""
    family = oracle_family(env_name)
    report, tasks = Report(), train_tasks(family, n, seed, dict(options or {}))
    for i, task in enumerate(tasks):
        for variant in range(per_task):
            kind, result = demonstrate(family, task, random.Random(f"rlyard-collect|{seed}|{task.id}|{variant}"))
            if kind == "demo":
                messages, turns, reward = result
                metadata = {"env": env_name, "task_id": task.id, "reward": reward, "turns": turns,
                            "source": "oracle", "seed": seed, **({"variant": variant} if per_task > 1 else {})}
                report.demos.append({"messages": messages, "metadata": metadata})
            else:
                getattr(report, kind).append((task.id, result))
            if progress:
                progress(i * per_task + variant + 1, len(tasks) * per_task)
    return report


def session_documents(source: str) -> list[dict[str, Any]]:
    """The session exports at `source`: a `rlyard serve` URL (GET /sessions, then each
    /sessions/<id>/messages), a folder of <id>.json exports (`record_dir`, or saved with curl), or one file."""
    if source.startswith(("http://", "https://")):
        base = source.rstrip("/").removesuffix("/v1")
        ids = json.loads(urllib.request.urlopen(f"{base}/sessions", timeout=60).read())["sessions"]
        return [json.loads(urllib.request.urlopen(f"{base}/sessions/{i}/messages", timeout=60).read()) for i in ids]
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if not p.name.startswith("."))
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"--sessions {source}: no such folder or file, and not an http(s) URL")
    return [json.loads(p.read_text()) for p in files]


def collect_sessions(source: str, env_name: str | None = None) -> Report:
    """Every recorded conversation at `source` as a demonstration. Its reward is null: the server
    does not know how an outside harness scored the session."""
    report = Report()
    for doc in session_documents(source):
        for k, conversation in enumerate(doc.get("conversations", [])):
            metadata = {"env": env_name, "task_id": doc["session"], "reward": None, "turns": conversation["turns"],
                        "source": "session", "segment": k, "finish_reason": conversation.get("finish_reason", "")}
            report.demos.append({"messages": conversation["messages"], "metadata": metadata})
    return report


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line, atomically (`write_atomic`): a killed run never leaves half
    a file that sft would read. Returns the number of lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(record, ensure_ascii=False) + "\n" for record in records]
    write_atomic(path, "".join(lines).encode())
    return len(lines)
