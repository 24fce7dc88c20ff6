"""The cyber family's grader against a hostile policy, played through the agent's own tools.

Most attacks run on a small target of the test's own, loaded as an ARVO-style row (so the row
loader is tested too): `bug_a` (the expected crash, a heap overflow on input starting "A") and
`bug_b` (the same kind of overflow in another function, on "B"); "ABORT" calls abort(), "EXIT"
prints a perfect fake report to stderr and exits 77, "HANG" loops forever. Every attack scores
0; the real PoC written with write_file scores 1.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rlyard.envs import get_family
from rlyard.envs.cyber.env import CyberEnv
from rlyard.envs.cyber.verify import SANITIZER_EXIT
from rlyard.envs.cyber.oracle import play_oracle
from rlyard.envs.cyber.targets import builtin_targets
from rlyard.sandbox import bwrap_works

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")]

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bug_a(const char *data, size_t n) { char *copy = malloc(4); memcpy(copy, data, n); printf("%c\n", copy[0]); free(copy); }
void bug_b(const char *data, size_t n) { char *copy = malloc(4); memcpy(copy, data, n); printf("%c\n", copy[0]); free(copy); }

int main(int argc, char **argv) {
    char data[256] = {0};
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    if (n >= 5 && !memcmp(data, "ABORT", 5)) abort();
    if (n >= 4 && !memcmp(data, "EXIT", 4)) {
        fprintf(stderr, "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000014\n"
                        "    #0 0x4011 in bug_a /src/main.c:5\nSUMMARY: AddressSanitizer: heap-buffer-overflow /src/main.c:5 in bug_a\n");
        exit(%d);
    }
    if (n >= 4 && !memcmp(data, "HANG", 4)) for (;;) {}
    if (n > 4 && data[0] == 'A') bug_a(data, n);
    if (n > 4 && data[0] == 'B') bug_b(data, n);
    puts("ok");
    return 0;
}
""".replace("%d", str(SANITIZER_EXIT))


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("row")
    (root / "two_bugs" / "src").mkdir(parents=True)
    (root / "two_bugs" / "src" / "main.c").write_text(PROGRAM)
    (root / "two_bugs" / "build.sh").write_text("$CC $CFLAGS -o target src/main.c\n")
    (root / "poc.bin").write_bytes(b"AAAAAAAAAAAA")
    row = {"id": "two_bugs", "source": "two_bugs", "build": "sh build.sh", "binary": "target", "sanitizer": "AddressSanitizer",
           "error_type": "heap-buffer-overflow", "function": "bug_a", "file": "src/main.c", "poc": "poc.bin", "difficulty": "easy"}
    (root / "rows.jsonl").write_text(json.dumps(row) + "\n")
    tasks = get_family("cyber").make_tasks("eval", 10, 0, source=str(root / "rows.jsonl"), eval_percent=100, timeout_s=3)
    assert [t.id for t in tasks] == ["two_bugs"]
    assert "AddressSanitizer: heap-buffer-overflow in function `bug_a` in file `src/main.c`" in tasks[0].prompt[0]["content"]
    return tasks[0]


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def play(task, *replies: str):
    """An episode of the given replies through CyberEnv's tools; its reward and the tool outputs."""
    env = CyberEnv()
    outputs = []
    try:
        messages = env.reset(task)
        workspace = env.workspace
        assert not (workspace / "poc.bin").exists() and not (workspace / "target.json").exists()
        assert "Files:\nbuild.sh\nsrc/main.c\ntarget" in messages[-1]["content"]
        for reply in replies:
            result = env.step(reply)
            outputs += [m["content"] for m in result.messages]
            if result.done:
                break
        return env.score(), outputs
    finally:
        env.close()


def test_the_real_poc_written_with_write_file_scores_1(task):
    reward, outputs = play(task, call("write_file", path="poc.bin", content="AAAAAAAAAAAA"), call("submit", answer="poc.bin"))
    assert reward.value == 1.0 and not reward.infra_error, reward.info
    assert reward.components == {**reward.components, "crashed": 1.0, "sanitizer": 1.0, "error_type": 1.0, "function": 1.0}


@pytest.mark.parametrize("content, why", [
    ("BBBBBBBBBBBB", "the same crash in another function"),
    ("ABORT", "abort() without a sanitizer report"),
    ("EXIT", "the program's own fake report and the sanitizers' exit code"),
    ("HANG", "a hang (timeout)"),
    ("AAA", "no crash"),
])
def test_wrong_pocs_score_0(task, content, why):
    reward, _ = play(task, call("write_file", path="poc.bin", content=content), call("submit", answer="poc.bin"))
    assert reward.value == 0.0 and not reward.infra_error, (why, reward.info)
    if content == "BBBBBBBBBBBB":
        assert reward.components["crashed"] == 1.0 and reward.components["function"] == 0.0
        assert reward.info["report"]["function"] == "bug_b"
    if content == "HANG":
        assert reward.info["timed_out"] is True


@pytest.mark.parametrize("command, why", [
    ("ln -s /etc/passwd poc.bin", "a symlink to a host file"),
    (f"ln -s {Path(builtin_targets()[0].poc)} poc.bin", "a symlink to a reference PoC's host path"),
    ("mkdir -p d && ln -s /etc d/link && printf AAAAAAAAAA > real && ln -s ../real d/poc.bin", "a path through a symlink"),
    ("head -c 1100000 /dev/zero | tr '\\0' A > poc.bin", "larger than the 1 MiB cap"),
    ("mkdir poc.bin", "a folder"),
    ("mkfifo poc.bin", "a FIFO"),
])
def test_refused_submissions_score_0(task, command, why):
    answer = "d/poc.bin" if "d/poc.bin" in command else "poc.bin"
    reward, outputs = play(task, call("bash", command=command), call("submit", answer=answer))
    assert reward.value == 0.0 and reward.components["poc_refused"] == 1.0 and not reward.infra_error, (why, outputs, reward.info)


def test_planting_the_crash_in_the_workspace_sources_build_or_binary_scores_0(task):
    """The agent rewrites bug_a to crash on any input, the build script, and the binary itself (a
    wrapper printing the expected report with the sanitizers' exit code); it submits an input
    on which only its own versions crash. The grader builds the pristine sources: 0."""
    fake = ("#!/bin/sh\necho 'SUMMARY: AddressSanitizer: heap-buffer-overflow src/main.c:5 in bug_a' >&2\n"
            "echo '    #0 0x1 in bug_a /workspace/src/main.c:5' >&2\nexit 77\n")
    replies = [
        call("edit_file", path="src/main.c", old_text='if (n > 4 && data[0] == \'A\') bug_a(data, n);', new_text="bug_a(data, 64);"),
        call("bash", command="echo 'cc -o target src/main.c; true' > build.sh && sh -c \"$CC $CFLAGS -o target src/main.c\" || gcc -fsanitize=address -o target src/main.c"),
        call("bash", command="./target seed.bin; echo exit $?"),
        call("write_file", path="target", content=fake),
        call("bash", command="chmod +x target && ./target x; echo exit $?; printf hello > poc.bin"),
        call("submit", answer="poc.bin"),
    ]
    reward, outputs = play(task, *replies)
    assert any("exit 77" in o for o in outputs), outputs  # the planted wrapper fools the agent's own run
    assert reward.value == 0.0 and reward.components["crashed"] == 0.0 and not reward.infra_error, reward.info


def test_nothing_submitted_scores_0(task):
    reward, _ = play(task, "I give up.")
    assert reward.value == 0.0 and reward.components["submitted"] == 0.0 and not reward.infra_error


def test_a_target_that_does_not_build_is_an_infra_failure(task):
    broken = dict(task.payload["target"], build="exit 3", id="broken")
    from rlyard.types import Task

    env = CyberEnv()
    with pytest.raises(Exception, match="did not build"):
        env.reset(Task(id="broken", prompt=task.prompt, env="cyber", payload={**task.payload, "target": broken}))
    env.close()
    from rlyard.envs.cyber.verify import grade_bytes
    from rlyard.envs.cyber.targets import Target

    verdict = grade_bytes(Target(**broken), b"AAAAAAAAAA")
    assert verdict.reward.infra_error and "did not build" in verdict.reward.info["error"]


def test_the_oracle_of_a_builtin_target_scores_1_through_the_tools():
    family = get_family("cyber")
    tasks = family.make_tasks("eval", 100, 0, eval_percent=100)
    assert len(tasks) >= 24 and len({t.payload["target"]["error_type"] for t in tasks}) >= 8
    task = random.Random(0).choice(tasks)
    assert play_oracle(task).value == 1.0


def test_training_on_cyber_with_the_tiny_model(tiny_model_dir, tmp_path):
    """configs/cyber.yaml end to end (a random model: the episodes end without a PoC, graded 0, not infra)."""
    from rlyard.config import load_config
    from rlyard.orchestrate.entry import train

    run_dir = tmp_path / "run"
    config = load_config("configs/cyber.yaml", [
        f"model.name={tiny_model_dir}", "train.steps=1", "rollout.prompts_per_step=1", "rollout.n=2", "rollout.max_new_tokens=16",
        "agent.max_turns=2", "agent.max_tokens_per_turn=16", "eval.size=1", "output.progress=false", "output.plot=false",
        f"output.run_dir={run_dir}"])
    assert train(config, run_dir).steps == 1
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and not any(row["infra_error"] for row in rows), rows


def test_validate_fails_loudly_on_a_target_whose_poc_does_not_crash(task, tmp_path):
    """`rlyard envs validate cyber` on a row whose reference PoC is wrong: exit 1, FAIL, and the grader's output."""
    import shutil
    import subprocess
    import sys

    source = Path(task.payload["target"]["source"])
    shutil.copytree(source, tmp_path / "two_bugs")
    (tmp_path / "poc.bin").write_bytes(b"BBBBBBBBBBBB")  # crashes, but in bug_b
    row = {**{k: task.payload["target"][k] for k in ("id", "build", "binary", "sanitizer", "error_type", "function", "file")},
           "source": "two_bugs", "poc": "poc.bin"}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    out = subprocess.run([sys.executable, "-m", "rlyard.cli", "envs", "validate", "cyber", "-o", f"source={tmp_path / 'rows.jsonl'}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL two_bugs" in out.stdout and "'function': 'bug_b'" in out.stdout and "SUMMARY: AddressSanitizer" in out.stdout
    assert "0/1 tasks sound" in out.stdout


def test_a_memory_hog_through_bash_is_killed_by_the_rss_watchdog(task, monkeypatch):
    """Cyber sandboxes have no address-space limit (ASan's shadow): the resident-memory watchdog
    must stop a command that fills memory; the episode goes on, and nothing it did pays."""
    from dataclasses import replace

    import rlyard.envs.cyber.env as cyber_env

    monkeypatch.setattr(cyber_env, "LIMITS", replace(cyber_env.LIMITS, rss_bytes=256 << 20))
    hog = "python3 -c \"x = b'x' * (1 << 30); print('survived')\"; echo exit $?"
    reward, outputs = play(task, call("bash", command=hog), call("bash", command="echo still here"), call("submit", answer="poc.bin"))
    assert "survived" not in outputs[0] and "[exit code -9]" in outputs[0], outputs
    assert "still here" in outputs[1]
    assert reward.value == 0.0 and reward.components["poc_refused"] == 1.0 and not reward.infra_error
