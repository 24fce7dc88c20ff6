"""The asynchronous loop: rollout threads generate continuously; the learner trains on groups as
they arrive, at most `orchestrate.max_staleness` policy versions old.

Per step the learner takes prompts_per_step complete groups from the buffer (dropping, and
re-queueing, any that are too stale; dropping groups whose every episode failed; with DAPO's
dynamic sampling, groups whose rewards are all equal), then runs the same score -> advantages ->
train_step as the sync loop and publishes the new weights to the shared engine without stopping
the workers. Off-policy data is corrected by algo.decoupled (AReaL's decoupled PPO) or
algo.tis_cap. Runs checkpoint and resume, but are not reproducible sample for sample: which
group lands in which step depends on thread timing. A checkpoint keeps the tasks handed out and
not yet trained (buffer.TaskSource.state_dict); a resumed run plays them first, so a killed run
neither loses a queued task nor trains one twice (tests/test_kill_resume.py). Every dropped
group's rows go to dropped.jsonl with the reason (`Run.record_dropped`): none vanishes unseen.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from rlyard.config import RunConfig
from rlyard.orchestrate.buffer import Group
from rlyard.orchestrate.run import Run, RunResult, rollout_metrics
from rlyard.orchestrate.sampling import informative_groups
from rlyard.orchestrate.setup import push_weights
from rlyard.orchestrate.targets import compute_advantages
from rlyard.orchestrate.workers import RolloutPool, SharedEngine


def train_async(config: RunConfig, run_dir: Path, resume: bool = False, engine=None, followers: list = ()) -> RunResult:
    with Run(config, run_dir, resume, engine, followers) as run:
        c = run.c
        if not hasattr(c.engine, "play_groups"):  # a Ray fleet's actors share their engines themselves
            c.engine = SharedEngine(c.engine)
        engine = c.engine
        samples = run.start_step * config.rollout.prompts_per_step * config.rollout.n  # trained trajectories so far
        pool = RolloutPool(c, config, engine, first_seq=c.stream.position)
        if "source" in run.resumed_state:  # before any worker takes a ticket
            pool.source.load_state_dict(run.resumed_state["source"])
        run.checkpoint_state = lambda: checkpoint_state(pool)
        with pool:
            for step in range(run.start_step, config.train.steps):
                step_started, version = time.perf_counter(), engine.policy_version
                # 1. wait for prompts_per_step complete groups that are fresh enough
                dropped: list[tuple[Group, str]] = []
                groups, metrics = collect_batch(pool, config, version, step, dropped)
                run.record_dropped(step + 1, dropped)
                waited = time.perf_counter() - step_started
                batch = [t for g in groups for t in g.trajectories]
                greedy = {gid: r for g in groups for gid, r in g.greedy.items()} or None
                # 2. score -> advantages -> one learner step, exactly as in sync mode
                scores = c.learner.score(batch)
                targets = compute_advantages(config, batch, scores, greedy)
                metrics |= rollout_metrics(batch) | targets.metrics | staleness_metrics(groups, version)
                metrics |= c.learner.train_step(batch, targets.advantages, step, scores, targets.returns)
                # 3. publish: waits for forward passes in flight, not for episodes
                push_weights(c, step + 1)
                pool.source.set_version(step + 1)
                pool.source.settle([g.ticket for g in groups])
                step_seconds = time.perf_counter() - step_started
                samples += len(batch)
                metrics |= {"time/step": step_seconds, "time/wait": waited, "progress/samples": samples,
                            "rollout/worker_restarts": float(pool.restarts), "rollout/requeued_total": float(pool.source.requeued_total),
                            "progress/finished_groups": float(pool.finished_groups)}
                versions = [{"policy_versions": sorted({v for v, m in zip(t.policy_versions, t.loss_mask) if m}),
                             "trained_at_version": version} for t in batch]
                run.record(step + 1, batch, metrics, step_seconds, versions, targets.advantages)
    return run.result


def checkpoint_state(pool: RolloutPool) -> dict:
    """The task source's state, its stream position taken under the same lock as its pending tasks."""
    source = pool.source.state_dict()
    return {"stream": source["stream"], "source": source}


def collect_batch(pool: RolloutPool, config: RunConfig, version: int, step: int | None = None,
                  dropped: list[tuple[Group, str]] | None = None) -> tuple[list[Group], dict[str, float]]:
    """prompts_per_step complete groups trainable at `version`, and what was dropped on the way
    (each dropped group with its reason, "stale", "all_infra" or "uninformative", appended to `dropped`).

    Too stale (version - oldest token version > max_staleness): dropped, its task played again.
    Every episode an infra failure: dropped (a broken environment, not the policy's fault).
    Dynamic sampling: groups with equal rewards are dropped; after max_sampling_tries x
    prompts_per_step tries the batch keeps what it has, or if empty the last uninformative groups
    (the sync loop's rule).

    Every dropped group is settled at once, so that under staleness_policy=wait its slot goes to
    a new group: a rejected group that kept its slot would hold the producers back while the
    learner waits for them (a deadlock once the rejected groups fill the limit). A fallback group
    trained after all is settled again after the step, which the task source ignores.
    """
    want, max_staleness = config.rollout.prompts_per_step, config.orchestrate.max_staleness
    kept: list[Group] = []
    uninformative: list[Group] = []
    stale = failed = 0
    buffered = pool.buffer.qsize()

    def waiting_for() -> str:  # what the learner waits for, for the pool's too-long-a-wait warning
        label = f"step {step + 1}" if step is not None else "the batch"
        rejected = f"{stale} too stale, {failed} all failed" + (f", {len(uninformative)} uninformative" if config.algo.dynamic_sampling else "")
        return f"{label} at policy version {version} has {len(kept)} of {want} groups kept, rejected so far: {rejected}"

    def note(group: Group, reason: str) -> None:
        if dropped is not None:
            dropped.append((group, reason))

    while len(kept) < want:
        group = pool.get(waiting_for=waiting_for)
        if version - group.min_version > max_staleness:
            stale += 1
            note(group, "stale")
            pool.source.settle([group.ticket], requeue=True)
        elif all(t.infra_error for t in group.trajectories):
            failed += 1
            note(group, "all_infra")
            pool.source.settle([group.ticket])
        elif config.algo.dynamic_sampling and not any(informative_groups(config, group.trajectories)):
            uninformative.append(group)
            pool.source.settle([group.ticket])  # its slot is free now, even if the fallback below trains it
            if len(kept) + len(uninformative) >= want * config.algo.max_sampling_tries:
                if not kept:
                    kept, uninformative = uninformative[-want:], uninformative[:-want]
                break
        else:
            kept.append(group)
    for group in uninformative:  # those the fallback did not train after all
        note(group, "uninformative")
    metrics = {"rollout/stale_groups_dropped": float(stale), "rollout/failed_groups_dropped": float(failed),
               "rollout/buffered_groups": float(buffered)}
    if config.algo.dynamic_sampling:
        metrics["rollout/dropped_groups"] = float(len(uninformative))
    return kept, metrics


def staleness_metrics(groups: list[Group], version: int) -> dict[str, float]:
    """How old the trained tokens are (in policy versions), and how many episodes span a weight update."""
    per_token = [version - v for g in groups for t in g.trajectories for v, m in zip(t.policy_versions, t.loss_mask) if m]
    spans = [len({v for v, m in zip(t.policy_versions, t.loss_mask) if m}) > 1 for g in groups for t in g.trajectories]
    return {
        "rollout/staleness_mean": statistics.fmean(per_token) if per_token else 0.0,
        "rollout/staleness_max": float(max(per_token, default=0)),
        "rollout/partial_fraction": sum(spans) / max(1, len(spans)),
    }
