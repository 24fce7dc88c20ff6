"""The built-in `code` task set: its shape, `rlyard envs validate code` (every task fails at its
base and passes when an oracle plays the reference fix through each arm's tools), a training run."""
import json
import re
import shutil
from collections import Counter

import pytest

from rlyard.cli import main
from rlyard.envs import get_family
from rlyard.envs.code.repo import make_patch
from rlyard.envs.checks import check_tasks
from rlyard.envs.code.tasks import BUILTIN, builtin_records, load_tasks
from rlyard.envs.code.validate import check_task

ARMS = ("bash", "edit")


def test_the_builtin_set_spans_repositories_difficulties_and_splits():
    records = builtin_records()
    repos = Counter(r["repo"] for r in records)
    assert len(records) >= 30 and len(repos) >= 5 and min(repos.values()) >= 5, repos
    assert set(Counter(r["difficulty"] for r in records)) == {"easy", "medium", "hard"}
    for r in records:
        assert r["patch"] and r["problem_statement"] and r["timeout_s"] > 0
        assert any(p.startswith("tests/") for p in r["hidden_paths"]) and ".rlyard/grade.py" in r["hidden_paths"]
    family = get_family("code")
    train, evals = family.make_tasks("train", 1000, 0), family.make_tasks("eval", 1000, 0)
    assert train and evals and not {t.id for t in train} & {t.id for t in evals}
    assert len(train) + len(evals) == len(records)


def test_hidden_tests_are_never_in_the_base_workspace():
    for r in builtin_records():
        new_files = [p for p in r["hidden_paths"] if r["source"]["files"].get(p) is None]
        assert new_files and not set(new_files) & set(r["source"]["files"]), r["instance_id"]


def test_every_builtin_task_is_a_bug_patch_on_its_clean_repository():
    tasks = sorted(p for p in BUILTIN.glob("*/tasks/*") if p.is_dir())
    assert tasks and all((t / "bug.patch").is_file() and not (t / "base").exists() for t in tasks)


@pytest.mark.parametrize("breakage, message", [
    ("context", "patch does not apply"),
    ("stray", "toklex/missing.py is not a file of toklex/repo"),
    ("empty", "the patch touches no file"),
    ("deletes", "deletes toklex/tokens.py"),
    ("absent", "missing; every built-in task needs a bug.patch"),
])
def test_a_broken_bug_patch_is_refused_naming_the_file(tmp_path, breakage, message):
    shutil.copytree(BUILTIN / "toklex", tmp_path / "toklex", ignore=shutil.ignore_patterns("__pycache__"))
    bug = tmp_path / "toklex" / "tasks" / "toklex-2" / "bug.patch"
    tokens = (tmp_path / "toklex" / "repo" / "toklex" / "tokens.py").read_text()
    text = {"context": bug.read_text().replace("\n ", "\n #not-in-the-file ", 1),
            "stray": bug.read_text().replace("toklex/tokens.py", "toklex/missing.py"), "empty": "",
            "deletes": make_patch({"toklex/tokens.py": tokens}, {"toklex/tokens.py": None})}.get(breakage)
    if text is None:
        bug.unlink()
    else:
        bug.write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{bug}: ") + ".*" + re.escape(message)):
        builtin_records(root=tmp_path)


def test_every_builtin_task_fails_at_its_base_and_passes_with_its_reference_fix():
    """Each task graded at its base (expect 0) and with its reference fix (expect 1) played through
    one arm, the arms alternating down the list, so each arm's way of applying a fix (git apply in
    bash, write_file) is proven on half the set. `rlyard envs validate code` plays both arms on
    every task (~100 s on 2 cores); the test below runs that command on two tasks."""
    tasks = load_tasks("eval", 10**9, 0, [], eval_percent=100)
    arms = {task.id: ARMS[i % 2] for i, task in enumerate(sorted(tasks, key=lambda t: t.id))}
    checks = check_tasks(tasks, None, lambda task: check_task(task, (arms[task.id],)), jobs=2)
    assert len(checks) == len(builtin_records()) >= 30 and set(arms.values()) == set(ARMS)
    assert [c.task_id for c in checks if not c.ok] == [], "\n".join(f"{c.task_id}: {c.error}" for c in checks if not c.ok)


def test_envs_validate_code_plays_both_arms(capsys):
    assert main(["envs", "validate", "code", "--task", "toklex-2", "--task", "datewise-5", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "2/2 tasks sound" in out and "FAIL" not in out


def test_envs_validate_reports_a_broken_task(tmp_path, capsys):
    rows = [{"image": "", "workdir": str(tmp_path), "instance_id": "passes-already", "problem_statement": "nothing is wrong",
             "test_patch": "diff --git a/t.py b/t.py\nnew file mode 100644\n--- /dev/null\n+++ b/t.py\n@@ -0,0 +1 @@\n+print('ok')\n",
             "test_command": "python3 t.py", "timeout": 30, "patch": ""}]
    (tmp_path / "rows.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert main(["envs", "validate", "code", "-o", f"source={tmp_path / 'rows.jsonl'}"]) == 1
    assert "0/1 tasks sound" in capsys.readouterr().out


def test_a_short_training_run_on_code(tiny_model_dir, tmp_path):
    from rlyard.config import load_config
    from rlyard.orchestrate.entry import train

    config = load_config("configs/code.yaml", [f"model.name={tiny_model_dir}", "train.steps=2", "eval.size=2", "rollout.n=2",
                                               "agent.max_tokens_per_turn=8", "agent.max_turns=2", "output.progress=false"])
    result = train(config, tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert result.steps == 2 and len(rows) == 2 * 2 * 2 and not any(r["finish_reason"] == "infra_error" for r in rows)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step_rows = [m for m in metrics if "reward/mean" in m]
    assert [m["step"] for m in step_rows] == [1, 2]
    assert all("reward/passed" in m and "reward/testbed_corrupted" in m for m in step_rows)
    assert all(abs(m.get("reward/arm_bash", 0) + m.get("reward/arm_edit", 0) - 1) < 1e-9 for m in step_rows)
