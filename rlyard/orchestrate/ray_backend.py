"""`orchestrate.backend=ray`: the run's parts as Ray actors, the loops unchanged (docs/cluster.md).

The driver (the `rlyard train` process) reserves one placement group: the learner's bundle
first, then one per rollout actor and one per grader actor, with `orchestrate.ray`'s CPUs and
GPUs and its placement strategy. It starts the grader actors (environments, sandboxes,
verifiers), the rollout actors (an engine each, playing whole groups through the agent loop,
their environments in the graders) and the learner actor, which runs the very sync or async
loop a local run does with a `RayFleet` over the rollout actors as its engine and writes the
run folder. Ray restarts a rollout or grader actor that dies; the fleet replays its groups.

`orchestrate.ray.address` unset starts a private local cluster for the run (and stops it
after); "auto" or an address joins a running one (`ray start --head` on the head node).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from rlyard.config import ConfigError, RunConfig

MIN_BUNDLE_CPUS = 0.01  # a bundle may not be empty: an actor given 0 CPUs and 0 GPUs still reserves this


def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("orchestrate.backend=ray needs Ray: pip install 'rlyard[ray]' (./scripts/setup.sh installs it)") from None
    return ray


def bundle(cpus: float, gpus: float) -> dict[str, float]:
    resources = {"CPU": cpus} if cpus > 0 else {}
    if gpus > 0:
        resources["GPU"] = gpus
    return resources or {"CPU": MIN_BUNDLE_CPUS}


def bundles(config: RunConfig) -> list[dict[str, float]]:
    """Learner ranks, rollout actors, grader actors: the placement group's bundles in that order."""
    r = config.orchestrate.ray
    return ([bundle(r.learner_cpus, r.learner_gpus)] * r.learners + [bundle(r.rollout_cpus, r.rollout_gpus)] * r.rollout_workers
            + [bundle(r.grader_cpus, 0.0)] * r.graders)


def role_of(config: RunConfig, index: int) -> str:
    r = config.orchestrate.ray
    return "learner" if index < r.learners else "rollout" if index < r.learners + r.rollout_workers else "grader"


def check_supported(config: RunConfig) -> None:
    r = config.orchestrate.ray
    if r.learners > 1 and config.algo.advantage == "gae":
        raise ConfigError("orchestrate.ray.learners > 1 with algo.advantage=gae: the critic is not sharded yet (docs/fsdp.md)")
    if config.rollout.engine == "openai":
        raise ConfigError("orchestrate.backend=ray with rollout.engine=openai: the server already is the rollout fleet; "
                          "use orchestrate.backend=local (docs/engines.md)")
    if config.rollout.engine == "vllm" and not config.model.lora.enabled:
        raise ConfigError("orchestrate.backend=ray with rollout.engine=vllm trains LoRA adapters only for now: full weights "
                          "would need vLLM's NCCL weight transfer between the actors (planned); set model.lora.enabled=true")


def check_fits(config: RunConfig, nodes: list[dict[str, float]]) -> None:
    """Refuse at once a bundle that no node of the cluster could ever hold (e.g. GPUs asked of a
    CPU-only cluster), rather than waiting for resources that will not come."""
    for index, wanted in enumerate(bundles(config)):
        if not any(all(node.get(key, 0.0) >= amount for key, amount in wanted.items()) for node in nodes):
            role = role_of(config, index)
            largest = {key: max(node.get(key, 0.0) for node in nodes) for key in ("CPU", "GPU")}
            raise ConfigError(f"orchestrate.ray: the {role} actor asks for {wanted}, more than any node of the cluster has "
                              f"(the largest has CPU {largest['CPU']:g}, GPU {largest['GPU']:g}); lower orchestrate.ray."
                              f"{role}_cpus / {role}_gpus or add such a node")


def wait_for(ray, group, config: RunConfig, timeout_s: float = 600.0, every_s: float = 30.0) -> None:
    """Wait for the placement group (a cluster may be scaling up or busy), saying so every 30 s."""
    waited = 0.0
    while waited < timeout_s:
        ready, _ = ray.wait([group.ready()], timeout=every_s)
        if ready:
            return
        waited += every_s
        print(f"[rlyard] ray: waiting {waited:.0f} s for the placement group {bundles(config)} "
              f"(strategy {config.orchestrate.ray.placement_strategy}); the cluster has {ray.available_resources()} free", flush=True)
    raise ConfigError(f"orchestrate.ray: the cluster did not grant the placement group {bundles(config)} "
                      f"(strategy {config.orchestrate.ray.placement_strategy}) within {timeout_s:.0f} s")


RUN_DIR_VARIABLE = "RLYARD_RUN_DIR"


def train_on_ray(config: RunConfig, run_dir: Path, resume: bool = False):
    """Launch the actors, run the loop in the learner actor, and take everything down after."""
    ray = import_ray()
    check_supported(config)
    r = config.orchestrate.ray
    namespace = r.namespace or f"rlyard-{config.name}-{os.getpid()}"
    started_here = not ray.is_initialized()
    if started_here:
        if r.address is None:
            wanted = sum(b.get("CPU", 0.0) for b in bundles(config))
            # logical CPUs are Ray's bookkeeping: a laptop may host a bigger reservation than it has cores
            ray.init(address="local", num_cpus=max(os.cpu_count() or 1, math.ceil(wanted)), include_dashboard=False, namespace=namespace,
                     log_to_driver=True)
        else:
            ray.init(address=r.address, namespace=namespace, log_to_driver=True)
    actors: list = []
    group = None
    try:
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        check_fits(config, [node["Resources"] for node in ray.nodes() if node["Alive"]])
        group = placement_group(bundles(config), strategy=r.placement_strategy, name=f"{namespace}-run")
        wait_for(ray, group, config)

        def place(index: int, resources: dict[str, float], name: str, cls, restarts: int, concurrency: int):
            options = {"num_cpus": resources.get("CPU", 0.0), "num_gpus": resources.get("GPU", 0.0), "name": name,
                       "namespace": namespace, "max_restarts": restarts, "max_task_retries": 0,
                       "max_concurrency": concurrency,
                       # families write artefacts (webdev screenshots) under the run folder: on one machine, or a shared one
                       "runtime_env": {"env_vars": {RUN_DIR_VARIABLE: str(Path(run_dir).resolve())}},
                       "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)}
            return ray.remote(cls).options(**options)

        from rlyard.orchestrate.ray_actors import GraderActor, LearnerActor, RolloutActor

        data = config.model_dump(mode="json")
        layout = bundles(config)
        first_rollout, first_grader = r.learners, r.learners + r.rollout_workers
        concurrency = max(4, config.orchestrate.workers + 2)  # the learner's rollout threads, plus updates and probes
        graders = [place(first_grader + k, layout[first_grader + k], f"grader-{k}", GraderActor, r.max_actor_restarts,
                         16 * concurrency).remote(data, r.grader_cpus) for k in range(r.graders)]
        rollouts = [place(first_rollout + k, layout[first_rollout + k], f"rollout-{k}", RolloutActor, r.max_actor_restarts,
                          concurrency).remote(data, r.rollout_cpus, graders) for k in range(r.rollout_workers)]
        learners = [place(k, layout[k], "learner" if k == 0 else f"learner-{k}", LearnerActor, 0, 1).remote(
            data, rollouts, graders, namespace, k, r.learners) for k in range(r.learners)]
        actors = [*learners, *rollouts, *graders]
        if r.learners > 1:  # the FSDP2 process group: every rank joins at once
            address, port = ray.get(learners[0].rendezvous.remote())
            ray.get([learner.join.remote(address, port) for learner in learners])
        print(f"[rlyard] ray: {r.rollout_workers} rollout actor(s), {r.graders} grader actor(s) and the learner"
              f"{f' over {r.learners} ranks' if r.learners > 1 else ''} in namespace {namespace} "
              f"(placement {r.placement_strategy}); the learner writes {run_dir}", flush=True)
        return ray.get(learners[0].train.remote(str(run_dir.resolve()), resume, learners[1:]))
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        if group is not None:
            remove_placement_group(group)
        if started_here:
            ray.shutdown()
