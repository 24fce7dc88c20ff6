"""Generated code tasks (`source: generated`): the catalogue, determinism, the split disjoint by
(family, bug kind), the counts, statements that never hold the fix, test ids as pytest collects
them, and a sample graded through the real environment and grader (base 0, reference 1, the
oracle's episode 1). The 300-task validation is run by hand (docs/code.md, "Generated tasks");
RLYARD_CODE_GENERATED_SAMPLE=50 widens the graded sample to the 50 tasks the issue asks for."""
from __future__ import annotations

import itertools
import os
import random
import re
from collections import Counter

from rlyard.demos.collect import play
from rlyard.envs import get_family
from rlyard.envs.code.collect import collect_node_ids
from rlyard.envs.code.gen_catalogue import FAMILIES, HELD_OUT, KINDS, TEMPLATES
from rlyard.envs.code.gen_oracle import oracle as generated_oracle
from rlyard.envs.code.generate import COMBOS, build, catalogue_problems, draw_params, split_of_combo
from rlyard.envs.code.payload import runner_command
from rlyard.envs.code.repo import apply_patch
from rlyard.envs.code.tasks import make_tasks

BASH_BLOCK = {"source": "generated", "tool_format": "bash_block", "arm_weights": {"bash": 1}}


def test_the_catalogue_is_sound_and_covers_every_family_and_kind():
    assert catalogue_problems() == []
    assert {t.family for t in TEMPLATES} == set(FAMILIES) and {k for t in TEMPLATES for k in t.bugs} == set(KINDS)
    assert len({t.key for t in TEMPLATES}) == len(TEMPLATES)


def test_held_out_combinations_are_the_eval_split_and_every_family_and_kind_still_trains():
    eval_combos = {c for c in COMBOS if split_of_combo(*c) == "eval"}
    train_combos = {c for c in COMBOS if split_of_combo(*c) == "train"}
    assert eval_combos == set(HELD_OUT) and not eval_combos & train_combos
    assert {f for f, _ in train_combos} == set(FAMILIES) and {k for _, k in train_combos} == set(KINDS)
    assert {f for f, _ in HELD_OUT} == set(FAMILIES) and {k for _, k in HELD_OUT} == set(KINDS)


def test_counts_determinism_and_disjoint_splits():
    train, held_out = draw_params("train", 5000, 0), draw_params("eval", 300, 0)
    assert len({p.task_id() for p in train}) == 5000 and len({p.task_id() for p in held_out}) == 300
    assert all((p.family, p.kind) not in HELD_OUT for p in train) and all((p.family, p.kind) in HELD_OUT for p in held_out)
    assert not {p.task_id() for p in train} & {p.task_id() for p in held_out}
    assert draw_params("train", 40, 7) == draw_params("train", 40, 7) and draw_params("train", 40, 7) != draw_params("train", 40, 8)
    assert build(train[0]) == build(train[0])
    tasks = make_tasks("train", 30, 7, source="generated")
    assert [t.id for t in tasks] == [t.id for t in make_tasks("train", 30, 7, source="generated")]
    assert all(t.metadata["split"] == "train" and (t.metadata["bug_family"], t.metadata["bug_kind"]) not in HELD_OUT for t in tasks)


def test_draws_go_round_the_units_so_a_first_n_holds_each_evenly():
    """A template's tasks pass or fail together, so held-out success is a mean over (template,
    kind) units: the first 3 x units held-out tasks are 3 of each, and the held-out side holds
    the most units a split of one pair per family and per kind can (docs/code.md, "Split")."""
    for split, rounds in (("eval", 3), ("train", 2)):
        units = {(t.key, kind) for t in TEMPLATES for kind in t.bugs if split_of_combo(t.family, kind) == split}
        drawn = Counter((p.template, p.kind) for p in draw_params(split, rounds * len(units), 5))
        assert set(drawn) == units and set(drawn.values()) == {rounds}, split
    held_units = sum(kind in t.bugs and (t.family, kind) in HELD_OUT for t in TEMPLATES for kind in KINDS)
    best = max(sum(kind in t.bugs and (t.family, kind) in set(zip(FAMILIES, order)) for t in TEMPLATES for kind in KINDS)
               for order in itertools.permutations(KINDS))
    assert held_units == best == 21


def test_statements_show_the_symptom_never_the_fix():
    for p in draw_params("train", 150, 1) + draw_params("eval", 150, 1):
        record = build(p)
        statement, function = record["problem_statement"], record["generated"]["function"]
        assert f"{function}(" in statement, statement
        added = [line[1:].strip() for line in record["patch"].splitlines() if line.startswith("+") and not line.startswith("+++")]
        removed = [line[1:].strip() for line in record["patch"].splitlines() if line.startswith("-") and not line.startswith("---")]
        assert added and all(line not in statement for line in added + removed), (statement, added)
        assert not re.search(r"\b(off.by.one|swapped|comparison|boolean|constant|edge case)\b", statement, re.I), statement
        hidden = [path for path in record["hidden_paths"] if path.startswith("tests/")]
        assert hidden and all(path not in record["source"]["files"] for path in hidden)
        failing = [node for node in record["expected_tests"] if node.startswith(hidden[0])]
        shown = statement.count(f"{function}(")
        assert shown < len(failing) or len(failing) == 1, (statement, failing)  # special-casing what is shown fails


def test_expected_test_ids_are_what_pytest_collects():
    for p in draw_params("train", 2, 3):
        record = build(p)
        gold = {path: text for path, text in {**record["source"]["files"], **record["graded_files"]}.items() if text is not None}
        path = record["generated"]["path"]
        gold[path] = apply_patch({path: record["source"]["files"][path]}, record["patch"])[path]
        tests = sorted({node.split("::")[0] for node in record["expected_tests"]})
        collected = collect_node_ids(gold, tests, runner_command(["--collect", *tests]))
        assert sorted(collected) == sorted(record["expected_tests"])


def sample_size() -> int:
    return int(os.environ.get("RLYARD_CODE_GENERATED_SAMPLE", "2"))


def test_a_sample_is_sound_through_validate():
    """`validate(n=)`: half the tasks from each split, base 0 and the reference fix 1 on both arms."""
    n = sample_size()
    checks = get_family("code").validate({"source": "generated"}, None, 2, None, n=n)
    assert len(checks) == n and all(c.ok for c in checks), [(c.task_id, c.base_reward, c.fixed_reward, c.error[:500])
                                                            for c in checks if not c.ok]
    expected = make_tasks("train", n - n // 2, 0, source="generated") + make_tasks("eval", n // 2, 0, source="generated")
    assert [c.task_id for c in checks] == [t.id for t in expected]


def test_the_oracle_fixes_through_bash_blocks_and_varies_its_plan():
    tasks = make_tasks("train", 40, 5, **BASH_BLOCK)
    plans = [generated_oracle(t, random.Random(t.id)) for t in tasks]
    assert all(reply.count("```bash") == 1 for replies in plans for reply in replies)
    assert all(replies[-1].split("```bash\n")[1].startswith("submit ") for replies in plans)
    first = {replies[0].split("```bash\n")[1].split()[0] for replies in plans}
    edits = {"sed" if "sed -i" in "".join(r) else "python3" for r in plans}
    assert {"cat", "grep"} <= first and edits == {"sed", "python3"}, (first, edits)
    family = get_family("code")
    picked = [next(t for t, r in zip(tasks, plans) if "sed -i" in "".join(r)),
              next(t for t, r in zip(tasks, plans) if "sed -i" not in "".join(r) and "\\n" in "".join(r))]
    for task in picked:
        replies = generated_oracle(task, random.Random(task.id))
        messages, reward = play(family, task, replies)
        assert reward.value == 1.0 and not reward.infra_error, (task.id, reward)
        assert messages[0]["content"].count("```bash") == 1 and "submit <summary>" in messages[0]["content"]


def test_a_reply_that_does_nothing_scores_0():
    task = make_tasks("eval", 1, 2, **BASH_BLOCK)[0]
    _, reward = play(get_family("code"), task, ["```bash\nsubmit looks fine to me\n```"])
    assert reward.value == 0.0 and not reward.infra_error


def test_the_oracle_names_the_function_and_quotes_its_wrong_line_before_every_edit():
    """A 135M model taught edits without this step copied a line of another helper (docs/code.md)."""
    from rlyard.envs.code.gen_oracle import replacement

    for task in make_tasks("train", 60, 3, **BASH_BLOCK) + make_tasks("eval", 30, 3, **BASH_BLOCK):
        g, files = task.payload["generated"], task.payload["source"]["files"]
        before = files[g["path"]]
        found = replacement(before, apply_patch({g["path"]: before}, task.payload["patch"])[g["path"]])
        if found is None:
            continue
        edit = next(r for r in generated_oracle(task, random.Random(task.id)) if "python3 - <<" in r or "sed -i" in r)
        thought = edit.split("```", 1)[0]
        first_line = next(line.strip() for line in found[0].splitlines() if line.strip())
        assert g["function"] in thought and f"`{first_line}`" in thought, (thought, first_line)
