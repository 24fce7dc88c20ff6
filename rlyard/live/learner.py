"""The learner of a live run: rewarded sessions in, new weights out, while the server keeps serving.

It reuses the pieces of `rlyard train`: a `Run` (the run folder: config.yaml, metrics.jsonl,
trajectories.jsonl, dropped.jsonl, checkpoints, resume), the learner's `score` and `train_step`,
`compute_advantages` (GRPO over groups), `push_weights`. What differs is where the data comes
from: rewarded sessions, journaled (journal.py) before their reward is acknowledged.

A learner step (its thread) waits for `live.sessions_per_step` ready episodes: lone rewarded
sessions, and the members of complete groups (every session registered under the group is
rewarded, or `live.group_timeout_s` passed since its first reward; a group replayed from the
journal after a restart is complete). Episodes sampled more than `orchestrate.max_staleness`
versions before the learner's are dropped (to dropped.jsonl, counted in `live/stale_dropped`);
the rest train: groups with the config's advantage (grpo / dr_grpo / rloo), lone sessions with
reward less the baseline (baselines.py). The update is pushed between two engine calls, and
logged and checkpointed as step = the new policy version. A rollback (`rollback`) loads an
older version's checkpoint and publishes its weights as a new version.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlyard.config import ConfigError, RunConfig
from rlyard.live.baselines import Baseline, prompt_key
from rlyard.live.journal import Entry, RewardJournal
from rlyard.orchestrate.run import Run, rollout_metrics
from rlyard.orchestrate.setup import push_weights
from rlyard.orchestrate.workers import SharedEngine
from rlyard.orchestrate.targets import compute_advantages
from rlyard.train import load_checkpoint, save_checkpoint

SEQUENCE_ADVANTAGES = ("grpo", "dr_grpo", "rloo")


class Unit:
    """What trains together: one lone session, or a whole group."""

    def __init__(self, entries: list[Entry], group: str | None):
        self.entries, self.group = entries, group

    @property
    def trajectories(self) -> list:  # Run.record_dropped reads groups' trajectories
        return [t for e in self.entries for t in e.trajectories]

    def min_version(self, default: int) -> int:
        versions = [v for t in self.trajectories for v, m in zip(t.policy_versions, t.loss_mask) if m]
        return min(versions) if versions else default


class LiveLearner:
    def __init__(self, config: RunConfig, run_dir: Path):
        if config.algo.advantage not in SEQUENCE_ADVANTAGES:
            raise ConfigError(f"algo.advantage={config.algo.advantage}: rlyard serve --learn trains one advantage per "
                              f"session; use one of {', '.join(SEQUENCE_ADVANTAGES)}")
        if config.rollout.engine != "hf" or config.rollout.coalesce:
            raise ConfigError("rlyard serve --learn serves from the hf engine (rollout.engine=hf, rollout.coalesce=false)")
        # the engine gets its own copy of the weights (full fine-tuning too): it samples while the learner steps
        # and the held-out eval runs at start and every eval.every versions, not when the server stops
        config = config.model_copy(update={"orchestrate": config.orchestrate.model_copy(update={"mode": "async"}),
                                           "eval": config.eval.model_copy(update={"at_end": False})})
        self.config, self.run_dir = config, Path(run_dir)
        self.run = Run(config, self.run_dir, resume=True)  # the newest checkpoint of the folder, if any
        self.c = c = self.run.c
        c.engine = SharedEngine(c.engine)
        self.journal = RewardJournal(self.run_dir)
        state = self.run.resumed_state.get("live", {})
        self.consumed: set[int] = set(state.get("consumed", []))
        self.baseline = Baseline(config.live.baseline, config.live.baseline_window, config.live.baseline_alpha)
        self.baseline.load_state_dict(state.get("baseline", {}))
        self.counters: dict[str, float] = {"stale_dropped": 0.0, "rolled_back_dropped": 0.0, "trained_sessions": 0.0,
                                           "rollbacks": 0.0, **state.get("counters", {})}
        self.duplicates = 0
        self.version = self.started_at = c.engine.policy_version
        self.pending: list[Entry] = self.journal.unconsumed(self.consumed)  # replayed after a restart
        self.replayed = len(self.pending)
        self.complete_groups = {e.group for e in self.pending if e.group}  # their other members died with the process
        self.members: dict[str, set[str]] = {}  # group -> sessions registered under it
        self.first_reward: dict[str, float] = {}  # group -> monotonic time of its first reward
        self.tasks = {t.id: t for t in [*(c.stream.tasks if c.stream is not None else []), *c.eval_tasks]}
        self.cond = threading.Condition()
        self.step_lock = threading.Lock()  # a train step and a rollback never overlap
        self.stopped = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="rlyard-live-learner", daemon=True)
        self.run.checkpoint_state = lambda: {"live": self.state_dict()}
        if not (self.run_dir / "checkpoints").is_dir():  # version 0 kept too: a rollback can return to the base policy
            self._save(self.version)

    # ------------------------------------------------------------------ what the server tells it
    def register(self, session_id: str, metadata: dict[str, str]) -> None:
        group = metadata.get("group")
        if group:
            with self.cond:
                self.members.setdefault(group, set()).add(session_id)

    def rewarded(self, entry: Entry) -> None:
        with self.cond:
            if entry.group and entry.group not in self.first_reward:
                self.first_reward[entry.group] = time.monotonic()
            self.pending.append(entry)
            self.cond.notify_all()

    # ------------------------------------------------------------------ choosing what trains
    def _ready_units(self) -> list[Unit]:
        """Lone sessions and complete groups, oldest first (called under self.cond)."""
        units: list[Unit] = []
        by_group: dict[str, list[Entry]] = {}
        for e in self.pending:
            if e.group is None:
                units.append(Unit([e], None))
            else:
                by_group.setdefault(e.group, []).append(e)
        now, timeout = time.monotonic(), self.config.live.group_timeout_s
        for group, entries in by_group.items():
            everyone_rewarded = all(self.journal.get(s) is not None for s in self.members.get(group, ()))
            if group in self.complete_groups or everyone_rewarded or now - self.first_reward.get(group, now) >= timeout:
                units.append(Unit(entries, group))
        return sorted(units, key=lambda u: min(e.seq for e in u.entries))

    def _take(self) -> list[Unit] | None:
        want = self.config.live.sessions_per_step
        with self.cond:
            units = self._ready_units()
            if sum(len(u.entries) for u in units) < want:
                return None
            taken, count = [], 0
            for unit in units:
                if count >= want:
                    break
                taken.append(unit)
                count += len(unit.entries)
            seqs = {e.seq for u in taken for e in u.entries}
            self.pending = [e for e in self.pending if e.seq not in seqs]
            return taken

    # ------------------------------------------------------------------ the learner thread
    def start(self) -> "LiveLearner":
        self.thread.start()
        return self

    def _loop(self) -> None:
        try:
            self.run.__enter__()  # the base model's held-out eval (eval.at_start), here: the server is up meanwhile
            while not self.stopped:
                if self.version >= self.config.train.steps:  # train.steps versions: the server goes on serving
                    time.sleep(0.2)
                    continue
                units = self._take()
                if units is None:
                    with self.cond:
                        self.cond.wait(timeout=0.5)
                    continue
                with self.step_lock:
                    self.train_on(units)
        except BaseException as error:  # noqa: BLE001 - said on /admin/status and raised at close
            self.error = error
            print(f"[rlyard] live learner stopped: {type(error).__name__}: {error}", flush=True)

    def train_on(self, units: list[Unit]) -> None:
        c, config, started, version = self.c, self.config, time.perf_counter(), self.version
        fresh = [u for u in units if version - u.min_version(version) <= config.orchestrate.max_staleness]
        stale = [u for u in units if u not in fresh]
        self.run.record_dropped(version + 1, [(u, "stale") for u in stale])
        self.counters["stale_dropped"] += sum(len(u.entries) for u in stale)
        self.consumed |= {e.seq for u in units for e in u.entries}
        metrics: dict[str, float] = {"live/stale_dropped_step": float(sum(len(u.entries) for u in stale))}
        if not fresh:
            self.run.logger.log(version, metrics | self.totals())
            return
        batch, owners = [], []  # owners[i]: index of the entry of batch[i] in `entries`
        entries = [e for u in fresh for e in u.entries]
        for k, e in enumerate(entries):
            for t in e.trajectories:
                text = t.completion_text or c.tokenizer.decode([i for i, m in zip(t.token_ids, t.loss_mask) if m], skip_special_tokens=True)
                batch.append(replace(t, reward=e.reward, components=dict(e.components), group_id=e.group or e.session,
                                     episode_id=e.session, task_id=e.extra.get("task", e.session), completion_text=text))
                owners.append(k)
        scores = c.learner.score(batch)
        targets = compute_advantages(config, batch, scores)
        advantages = list(targets.advantages)
        lone = [k for k, e in enumerate(entries) if e.group is None]
        if lone:
            first = {k: owners.index(k) for k in lone}
            values = self.baseline.advantages([entries[k].reward for k in lone], [prompt_key(batch[first[k]]) for k in lone])
            per_entry = dict(zip(lone, values))
            advantages = [per_entry.get(k, a) for k, a in zip(owners, advantages)]
        metrics |= rollout_metrics(batch) | targets.metrics
        per_token = [version - v for t in batch for v, m in zip(t.policy_versions, t.loss_mask) if m]
        metrics |= {"rollout/staleness_mean": sum(per_token) / max(1, len(per_token)), "rollout/staleness_max": float(max(per_token, default=0)),
                    "live/sessions": float(len(entries)), "live/lone_sessions": float(len(lone)),
                    "live/groups": float(sum(1 for u in fresh if u.group)), "live/baseline": self.baseline.mean()}
        metrics |= c.learner.train_step(batch, advantages, version, scores, targets.returns)
        new = version + 1
        push_weights(c, new)  # waits for the engine call in flight; the next one samples from `new`
        self.version = new
        self.counters["trained_sessions"] += len(entries)
        seconds = time.perf_counter() - started
        extra = [{"session": entries[k].session, "policy_versions": sorted({v for v, m in zip(t.policy_versions, t.loss_mask) if m}),
                  "trained_at_version": version} for k, t in zip(owners, batch)]
        self.run.record(new, batch, metrics | self.totals() | {"time/step": seconds}, seconds, extra,
                        [float(a) for a in advantages])

    def totals(self) -> dict[str, float]:
        return {"live/version": float(self.version), "live/rewards_posted": float(len(self.journal)),
                "live/stale_dropped": self.counters["stale_dropped"], "live/trained_sessions": self.counters["trained_sessions"],
                "live/duplicates": float(self.duplicates), "live/rollbacks": self.counters["rollbacks"]}

    # ------------------------------------------------------------------ versions
    def checkpoints(self) -> dict[int, Path]:
        """Policy version -> its checkpoint folder (checkpoints are named by version)."""
        root = self.run_dir / "checkpoints"
        return {int(p.name.removeprefix("step_")): p for p in sorted(root.glob("step_*")) if (p / "state.pt").exists()}

    def rollback(self, target: int) -> dict[str, Any]:
        """Serve (and train on from) version `target`'s weights again, published as a new version;
        pending sessions sampled by the abandoned versions (after `target`) are dropped."""
        with self.step_lock:
            kept = self.checkpoints()
            if target not in kept:
                raise KeyError(f"no checkpoint of policy version {target}; kept: {sorted(kept)}")
            c, old = self.c, self.version
            state = load_checkpoint(kept[target], c.model, c.learner.optimizer, c.learner.critic)
            new = old + 1
            push_weights(c, new)
            self.version = new
            with self.cond:
                abandoned = [e for e in self.pending if any(target < v <= old for t in e.trajectories for v in t.policy_versions)]
                self.pending = [e for e in self.pending if e not in abandoned]
            self.consumed |= {e.seq for e in abandoned}
            self.run.record_dropped(new, [(Unit([e], e.group), "rolled_back") for e in abandoned])
            self.counters["rolled_back_dropped"] += len(abandoned)
            self.counters["rollbacks"] += 1
            self._save(new, {"stream": state["stream"], "rolled_back_to": target})
            self.run.logger.log(new, {"live/rollback_to": float(target), "live/rolled_back_dropped": float(len(abandoned))} | self.totals())
            return {"version": new, "weights_of": target, "dropped_sessions": len(abandoned)}

    def _save(self, version: int, more: dict | None = None) -> None:
        c = self.c
        state = {"stream": c.stream.state_dict() if c.stream is not None else {}, "policy_version": version,
                 "base_accuracy": self.run.base_accuracy, "train_seconds": self.run.train_seconds, "live": self.state_dict()}
        save_checkpoint(self.run_dir, version, c.model, c.learner.optimizer, state | (more or {}),
                        keep=self.config.output.keep_checkpoints, critic=c.learner.critic)

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": sorted(self.consumed), "baseline": self.baseline.state_dict(), "counters": dict(self.counters)}

    def status(self) -> dict[str, Any]:
        with self.cond:
            pending, groups = len(self.pending), len({e.group for e in self.pending if e.group})
        return {"policy_version": self.version, "rewards_posted": len(self.journal), "pending_sessions": pending,
                "pending_groups": groups, "started_at_version": self.started_at, "replayed_at_start": self.replayed, "duplicates": self.duplicates,
                **{k: int(v) for k, v in self.counters.items()}, "checkpoints": sorted(self.checkpoints()),
                "learner_error": None if self.error is None else f"{type(self.error).__name__}: {self.error}"}

    def close(self) -> None:
        self.stopped = True
        with self.cond:
            self.cond.notify_all()
        if self.thread.is_alive():
            self.thread.join(timeout=60)
        self.run.__exit__(None, None, None)  # closes the logs; the reward plot
