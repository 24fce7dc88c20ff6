"""Faults on purpose: environments that crash, hang, lie or cannot start, and SIGKILL points.

Used by tests/test_faults.py, tests/test_kill_resume.py and bench/faults.py to show that a run
survives what real environments do (docs/reliability.md). Two families, both loadable as
`env.name=rlyard.testing.faults:SINGLE` (or `:MULTI`) in a subprocess:

- SINGLE: one prompt, one reply; reward 1 when the reply contains TARGET ("A"), as tests' toy.
- MULTI: two turns (the env answers the first reply with "Go on."), reward 1 when a reply holds TARGET.

With `env.options.fault_rate=r` every episode draws, seeded (`fault_seed`), each fault kind with
probability r; it fires when the episode reaches that call (a multi-turn reply cut at the turn's
token limit ends its episode before any step) and only then enters `LEDGER`: crash_reset, crash_step, crash_score (raise in that call), sandbox (reset raises
SandboxUnavailable), garbage (score returns NaN, inf, a str, None, a NaN component or no Reward
at all), hang (score sleeps `hang_s`, then answers correctly: a slow grader, unless `hang_s` passes
env.grader_timeout_s, which makes it an infra episode).
Every injected fault leaves its tag, "[fault N: kind]", in the episode's row (the traceback in the
completion, or the Reward's info), and `LEDGER` lists them in the process that injected them.

The trainer's SIGKILL points (RLYARD_FAULT_KILL_AT=name:n) are in rlyard/testing/kill.py.
"""
from __future__ import annotations

import math
import random
import re
import threading
import time
from dataclasses import dataclass, field

from rlyard.environment import Family, StepResult
from rlyard.sandbox import SandboxUnavailable
from rlyard.testing.kill import KILL_ENV, KILL_POINTS, kill_point  # noqa: F401 - one import for tests
from rlyard.types import Message, Reward, Task

TARGET = "A"
KINDS = ("crash_reset", "crash_step", "crash_score", "sandbox", "garbage", "hang")
INFRA_KINDS = frozenset(KINDS) - {"hang"}  # every kind but a slow grader must end as an infra episode
GARBAGE = ("nan", "inf", "str", "none", "nan_component", "not_a_reward")
TAG = re.compile(r"\[fault (\d+): (\w+)\]")



class FaultInjected(RuntimeError):
    """What an injected crash raises."""


@dataclass
class FaultPlan:
    """Seeded draws of which fault (if any) each new episode gets; `ledger` keeps every one drawn."""

    rate: float = 0.0
    seed: int = 0
    hang_s: float = 0.2
    ledger: dict[int, str] = field(default_factory=dict)  # fault id -> kind
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate * len(KINDS) <= 1.0:
            raise ValueError(f"fault_rate {self.rate} x {len(KINDS)} kinds must be between 0 and 1")
        self._rng = random.Random(self.seed)

    def draw(self) -> tuple[str, str] | None:
        """(kind, garbage variant) for the next episode, or None (no fault)."""
        with self._lock:
            u, variant = self._rng.random(), self._rng.choice(GARBAGE)
            return (KINDS[int(u / self.rate)], variant) if u < self.rate * len(KINDS) else None

    def fire(self, kind: str) -> int:
        """A drawn fault happens now (an episode that ends before its step never reaches a step fault): its id."""
        with self._lock:
            fault_id = len(self.ledger)
            self.ledger[fault_id] = kind
            return fault_id


_plans: dict[tuple, FaultPlan] = {}
_plans_lock = threading.Lock()
LEDGER: dict[int, str] = {}  # the faults of the default plan (the one tasks' options name)


def plan_for(rate: float, seed: int, hang_s: float) -> FaultPlan:
    """One plan per (rate, seed, hang_s) in this process, so that fault ids are unique in a run."""
    key = (rate, seed, hang_s)
    with _plans_lock:
        if key not in _plans:
            _plans[key] = FaultPlan(rate, seed, hang_s, ledger=LEDGER)
        return _plans[key]


def reset_ledger() -> None:
    """Forget every plan and fault (a test's fresh start)."""
    with _plans_lock:
        _plans.clear()
        LEDGER.clear()


def hit_reward(replies: list[str]) -> Reward:
    hit = float(any(TARGET in reply for reply in replies))
    return Reward(hit, {"hit": hit})


class FaultyEnv:
    """An episode that may carry one injected fault (drawn at reset from the task's plan).

    Its Reward's info holds the replies it graded ("graded"): a multi-turn episode's last reply,
    cut at the turn's token limit, is never sent to step, so the completion may hold more."""

    def __init__(self, turns: int = 1):
        self.turns, self.replies, self.drawn, self.tag = turns, [], None, ""
        self.plan: FaultPlan | None = None

    def reset(self, task: Task) -> list[Message]:
        p = task.payload
        self.plan = plan_for(p.get("fault_rate", 0.0), p.get("fault_seed", 0), p.get("hang_s", 0.2))
        self.drawn, self.replies, self.tag = self.plan.draw(), [], ""
        if self._fires("crash_reset"):
            raise FaultInjected(f"{self.tag} reset crashed")
        if self._fires("sandbox"):
            raise SandboxUnavailable(f"{self.tag} the sandbox failed to start")
        return list(task.prompt)

    def _fires(self, kind: str) -> bool:
        if not self.drawn or self.drawn[0] != kind:
            return False
        self.tag = f"[fault {self.plan.fire(kind)}: {kind}]"
        return True

    def step(self, reply: str) -> StepResult:
        if self._fires("crash_step"):
            raise FaultInjected(f"{self.tag} step crashed")
        self.replies.append(reply)
        if len(self.replies) < self.turns:
            return StepResult([{"role": "user", "content": "Go on."}], done=False)
        return StepResult(done=True)

    def score(self):
        if self._fires("crash_score"):
            raise FaultInjected(f"{self.tag} the grader crashed")
        if self._fires("hang"):
            time.sleep(self.plan.hang_s)
        if self._fires("garbage"):
            return garbage(self.drawn[1], self.tag)
        honest = hit_reward(self.replies)
        return Reward(honest.value, honest.components, {"graded": self.replies} | ({"fault": self.tag} if self.tag else {}))

    def close(self) -> None:
        pass


def garbage(variant: str, tag: str):
    """What a broken grader returns instead of a verdict."""
    info = {"fault": tag}
    return {
        "nan": Reward(math.nan, {}, info), "inf": Reward(math.inf, {}, info), "str": Reward("1.0", {}, info),  # type: ignore[arg-type]
        "none": Reward(None, {}, info), "nan_component": Reward(1.0, {"hit": math.nan}, info),  # type: ignore[arg-type]
        "not_a_reward": f"{tag} a str where a Reward belongs",
    }[variant]


def make_tasks(split: str, n: int, seed: int, fault_rate: float = 0.0, fault_seed: int = 0, hang_s: float = 0.2) -> list[Task]:
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}")
    payload = {"fault_rate": float(fault_rate), "fault_seed": int(fault_seed), "hang_s": float(hang_s)}
    return [Task(id=f"faulty-{split}-{i}", prompt=[{"role": "user", "content": "Say something."}], env="faulty", payload=payload)
            for i in range(n)]


def _verify(reply: str, task: Task) -> Reward:
    return hit_reward([reply])


SINGLE = Family(name="faulty", make_tasks=make_tasks, make_env=lambda: FaultyEnv(1), verify=_verify,
                description="test family: reward 1 when the reply contains 'A'; env.options.fault_rate injects faults")
MULTI = Family(name="faulty_multi", make_tasks=make_tasks, make_env=lambda: FaultyEnv(2), verify=None, multi_turn=True,
               description="test family: two turns, reward 1 when a reply contains 'A'; env.options.fault_rate injects faults")


@dataclass
class Audit:
    """What a run's trajectories.jsonl says about the faults injected into it."""

    episodes: int = 0  # rows
    injected: int = 0  # faults drawn (the ledger)
    infra_flagged: int = 0  # rows flagged infra_error
    survived: int = 0  # injected faults whose row is where it belongs: infra flagged, or (hang) scored honestly
    lost: int = 0  # injected faults with no row
    duplicated: int = 0  # injected faults in more than one row
    mis_scored: int = 0  # rows scored as what they are not (see `audit`)
    by_kind: dict[str, int] = field(default_factory=dict)  # injected per kind
    problems: list[str] = field(default_factory=list)  # the first few rows that went wrong, said

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "problems"} | {"problems": self.problems[:10]}


def audit(rows: list[dict], ledger: dict[int, str], drawn_elsewhere: set[int] = frozenset()) -> Audit:
    """Match every row to the fault it carries (its tag) and the ledger.

    Mis-scored: a row with an infra kind's tag that is not flagged infra_error; a row without an
    infra fault (a hang, or no fault) that is flagged, or whose reward is not the honest verdict of
    its replies (1.0 when TARGET is in them); a reward that is not a finite number.
    `drawn_elsewhere`: fault ids whose episode has no row for a known reason (async: a group
    still in flight when the run ended, abandoned); they are not counted as lost.
    """
    result = Audit(episodes=len(rows), injected=len(ledger))
    for kind in ledger.values():
        result.by_kind[kind] = result.by_kind.get(kind, 0) + 1
    seen: dict[int, int] = {}
    for row in rows:
        tags = {int(i): kind for i, kind in TAG.findall(f"{row['completion']}\n{row.get('info')}")}
        for fault_id in tags:
            seen[fault_id] = seen.get(fault_id, 0) + 1
        kind = next(iter(tags.values()), None)
        result.infra_flagged += bool(row["infra_error"])
        reward = row["reward"]
        wrong = None
        if len(tags) > 1:
            wrong = f"carries {len(tags)} faults"
        elif not isinstance(reward, (int, float)) or not math.isfinite(reward):
            wrong = f"reward {reward!r}"
        elif kind in INFRA_KINDS:
            wrong = None if row["infra_error"] and row["finish_reason"] == "infra_error" else "an infra fault trained as a score"
        elif row["infra_error"]:
            wrong = "flagged infra without an infra fault"
        elif reward != hit_reward(row.get("info", {}).get("graded", [row["completion"]])).value:
            wrong = f"reward {reward} is not the honest verdict"
        if wrong:
            result.mis_scored += 1
            result.problems.append(f"{row['group_id']} ({kind or 'no fault'}): {wrong}")
        elif kind is not None:
            result.survived += 1
    for fault_id, kind in ledger.items():
        if seen.get(fault_id, 0) > 1:
            result.duplicated += 1
        elif fault_id not in seen and fault_id not in drawn_elsewhere:
            result.lost += 1
            result.problems.append(f"fault {fault_id} ({kind}): no row")
    return result
