"""Sandboxes under load: eight hostile sandboxes at once (two fork bombs, two memory bombs,
two disk fills, two output floods) while a small torch training loop trains next to them.
Each bomb is contained with its own reason, the training finishes, and a trivial host command
keeps starting quickly. Run once with the sandbox's own cgroup (where this machine has one)
and once with the fallback (rlimits per process + watchdogs).

Also: memory and process limits are per sandbox under a cgroup (three processes that each fit
RLIMIT_AS together pass the sandbox's memory.max), and the workspace quota.
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rlyard.sandbox import Limits, Sandbox
from rlyard.sandbox import cgroups, mounts
from rlyard.sandbox.sandbox import bwrap_works, unshare_available

pytestmark = pytest.mark.skipif(not (bwrap_works() or unshare_available()), reason="no sandbox can start here")
CGROUP = cgroups.backend()
needs_cgroup = pytest.mark.skipif(CGROUP is None, reason=f"no usable cgroup: {cgroups.fallback_reason() if CGROUP is None else ''}")

HOSTILE = Limits(wall_s=20, cpu_s=20, memory_bytes=256 << 20, group_memory_bytes=256 << 20, nproc=48,
                 fsize_bytes=16 << 20, output_bytes=64 << 10, output_kill_bytes=8 << 20, tmp_bytes=8 << 20,
                 workspace_bytes=48 << 20)
PAYLOADS = {
    "fork_bomb": "bomb() { bomb | bomb & }; bomb; sleep 60",  # runs to its wall time (FORK_BOMB_WALL_S)
    # four processes that each grow without end: the cgroup's OOM kill, or each one's MemoryError at RLIMIT_AS
    "memory_bomb": "for i in 1 2 3 4; do python3 -c 'b = []\nwhile True: b.append(bytearray(8 << 20))' & done; wait; exit 1",
    # the workspace's tmpfs says ENOSPC (the run then ends by itself); the walk's fallback kills it ("disk")
    "disk_fill": "cat /dev/zero > /tmp/fill; i=0; while head -c 8000000 /dev/zero > w$i; do i=$((i+1)); done; "
                 "[ -e w1 ] && exit 1; sleep 60",
    "output_flood": "yes 'flood flood flood flood'",
}
FORK_BOMB_WALL_S = 5.0
# a fork bomb runs to its wall time, or its shell ends at once when even `sleep` cannot fork (then exit != 0)
EXPECTED = {"fork_bomb": {"wall_time", None}, "memory_bomb": {"memory", None}, "disk_fill": {"disk", None}, "output_flood": {"output_limit"}}

TRAINER = r"""
import json, select, sys, time
import torch
torch.set_num_threads(1)
x = torch.linspace(-1, 1, 256).unsqueeze(1)
y = 3 * x - 1


def fresh():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), [], None, time.perf_counter()


model, opt, gaps, first, last = fresh()
print("ready", flush=True)
while True:  # a line on stdin: report this training run and start a fresh one; EOF: stop
    if select.select([sys.stdin], [], [], 0)[0]:
        if not sys.stdin.readline():
            break
        print(json.dumps({"first_loss": first, "final_loss": loss.item(), "max_step_s": max(gaps), "steps": len(gaps)}), flush=True)
        model, opt, gaps, first, last = fresh()
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    first = loss.item() if first is None else first
    now = time.perf_counter(); gaps.append(now - last); last = now
    time.sleep(0.005)
"""


@pytest.fixture(scope="module")
def trainer():
    """A small torch training loop in its own process (torch imported once for the module)."""
    proc = subprocess.Popen([sys.executable, "-c", TRAINER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def host_latency(stop: threading.Event, samples: list[float]) -> None:
    """Wall time of a trivial host command, every 0.2 s: the host's responsiveness."""
    while not stop.is_set():
        started = time.perf_counter()
        subprocess.run(["/bin/true"], check=True)
        samples.append(time.perf_counter() - started)
        stop.wait(0.2)


def leftover_cgroups() -> list[Path]:
    if CGROUP is None:
        return []
    return [p for parent in CGROUP.parents.values() for p in parent.glob(f"rlyard-{os.getpid()}-*")]


@pytest.mark.parametrize("use_cgroup", [pytest.param(True, marks=needs_cgroup, id="cgroup"), pytest.param(False, id="rlimits")])
def test_eight_hostile_sandboxes_while_training(tmp_path, trainer, use_cgroup):
    limits = Limits(**{**HOSTILE.__dict__, "cgroup": use_cgroup})
    # cgroups this process already holds (a browser worker of an earlier module lives on) are not ours
    held_before = set(leftover_cgroups())
    jobs = [(name, index) for name in PAYLOADS for index in range(2)]
    boxes = {}
    for name, index in jobs:
        workspace = tmp_path / f"{name}-{index}"
        workspace.mkdir()
        boxes[name, index] = Sandbox(workspace, limits)
    trainer.stdin.write("report\n")  # a fresh training run starts now
    trainer.stdin.flush()
    trainer.stdout.readline()
    stop, latencies = threading.Event(), []
    watcher = threading.Thread(target=host_latency, args=(stop, latencies))
    watcher.start()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(len(jobs)) as pool:
            results = dict(zip(jobs, pool.map(lambda job: boxes[job].run(
                PAYLOADS[job[0]], timeout_s=FORK_BOMB_WALL_S if job[0] == "fork_bomb" else None), jobs)))
        hostile_s = time.monotonic() - started
    finally:
        stop.set()
        watcher.join()
    trainer.stdin.write("report\n")
    trainer.stdin.flush()
    training = json.loads(trainer.stdout.readline())
    mechanism = f"cgroup {CGROUP.version}" if use_cgroup else "rlimits"
    figures = {"mechanism": mechanism, "hostile_s": round(hostile_s, 1), "host_true_median_s": round(statistics.median(latencies), 3),
               "host_true_max_s": round(max(latencies), 3), "trainer_steps": training["steps"], "trainer_max_step_s": round(training["max_step_s"], 3),
               "reasons": {f"{n}-{i}": r.killed_reason for (n, i), r in results.items()},
               "forks_refused": sum(r.forks_refused for r in results.values())}
    print("\nsandbox load figures:", json.dumps(figures))

    for (name, _), result in results.items():
        assert result.limited_by == mechanism
        assert result.killed_reason in EXPECTED[name], (name, result.killed_reason, result.text[-300:])
        if name == "fork_bomb" and result.killed_reason is None:
            assert b"Cannot fork" in result.stderr, result.text[-300:]
        assert result.exit_code != 0, name
        assert result.duration_s < limits.wall_s + 5, (name, result.duration_s)
    assert all(results["fork_bomb", i].duration_s < FORK_BOMB_WALL_S + 5 for i in range(2))
    for index in range(2):
        assert len(results["output_flood", index].stdout) <= limits.output_bytes
        assert b"No space left" in results["disk_fill", index].stderr  # /tmp is a tmpfs of tmp_bytes
    if use_cgroup:
        assert all(results["memory_bomb", i].killed_reason == "memory" for i in range(2))
        # forks are refused by RLIMIT_NPROC (each run has its own pool uid as root) or pids.max (nproc + 2)
        assert all(results["fork_bomb", i].limited_by == mechanism for i in range(2))
    # kept training beside the bombs: its loss falls tenfold within 10 steps when nothing starves it;
    # a count of steps, not a rate (the window's steps follow the host's speed: 91 on a slow day)
    assert training["steps"] >= 20 and training["final_loss"] < training["first_loss"] / 10
    assert max(latencies) < 10.0, latencies  # generous: 2 shared cores; the figures above are what to read
    assert set(leftover_cgroups()) - held_before == set()


@needs_cgroup
def test_memory_is_counted_for_the_whole_sandbox(tmp_path):
    """Three processes of 96 MiB each: each fits RLIMIT_AS of 160 MiB, so under rlimits alone
    all three live (288 MiB in one sandbox); the sandbox's memory.max of 192 MiB ends the run."""
    three = ("for i in 1 2 3; do python3 -c 'import time; b = bytearray(96 << 20); b[::4096] = b\"x\" * len(b[::4096]); "
             "time.sleep(1.5)' & done; ok=0; for job in 1 2 3; do wait %$job && ok=$((ok+1)); done; echo alive=$ok")
    base = Limits(wall_s=15, memory_bytes=160 << 20, group_memory_bytes=192 << 20)
    capped = Sandbox(tmp_path, base).run(three)
    per_process = Sandbox(tmp_path, Limits(**{**base.__dict__, "cgroup": False})).run(three)
    assert per_process.stdout.strip() == b"alive=3" and per_process.limited_by == "rlimits"
    assert capped.killed_reason == "memory" and capped.exit_code == -9 and capped.limited_by == f"cgroup {CGROUP.version}"
    assert b"alive" not in capped.stdout


@pytest.mark.parametrize("how", ["tmpfs", "walk"])
def test_workspace_quota(tmp_path, monkeypatch, how):
    """Many files each under RLIMIT_FSIZE: the workspace's own tmpfs refuses them at its quota
    (tests/test_sandbox_quota.py has the rest); where none can be mounted, the walk stops the
    run's growth near it."""
    if how == "tmpfs" and not mounts.can_mount():
        pytest.skip("mounting a tmpfs needs root")
    if how == "walk":
        monkeypatch.setattr(mounts, "_can_mount", [False])
    limits = Limits(wall_s=20, fsize_bytes=8 << 20, workspace_bytes=32 << 20)
    box = Sandbox(tmp_path, limits)
    assert box.quota == how
    result = box.run("i=0; while head -c 4000000 /dev/zero > f$i; do i=$((i+1)); done")
    written = sum(p.stat().st_size for p in tmp_path.iterdir())
    small = box.run("head -c 1000000 /dev/zero > small && echo ok")
    if how == "tmpfs":
        assert b"No space left on device" in result.stderr and result.killed_reason is None
        assert 28 << 20 < written <= 32 << 20  # exactly the quota
        assert small.stdout == b""  # the quota holds across calls
    else:
        assert result.killed_reason == "disk"
        assert 32 << 20 < written < 1 << 30  # polled: stopped past the quota, far from filling the disk
        assert small.stdout == b"ok\n"  # the walk's quota is the run's growth, not the workspace's size
    box.close()


@needs_cgroup
def test_cgroups_of_a_killed_rlyard_are_removed():
    """SIGKILL skips a run's cleanup: the next rlyard removes cgroups whose process is gone."""
    dead = subprocess.Popen(["/bin/true"])
    dead.wait()
    orphans = [parent / f"rlyard-{dead.pid}-0" for parent in set(CGROUP.parents.values())]
    mine = [parent / f"rlyard-{os.getpid()}-999999" for parent in set(CGROUP.parents.values())]
    for folder in orphans + mine:
        folder.mkdir()
    try:
        cgroups._remove_orphans(CGROUP)
        assert not any(folder.exists() for folder in orphans)
        assert all(folder.exists() for folder in mine)  # a live process's cgroups stay
    finally:
        for folder in orphans + mine:
            if folder.exists():
                folder.rmdir()
