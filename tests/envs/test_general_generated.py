"""Generated general tasks (`source: generated`): a sample validated, determinism, the split
disjoint by (schema, question) pair, every answer key recomputed from the written files by code
apart from the generator, the oracle's commands printing the answer, the task commands of the
bash_block format, and the attacks by class (number stuffing, keyword salad, format tricks) at 0.
The 300-task validation is run by hand (docs/general.md, "Generated tasks")."""
from __future__ import annotations

import csv
import io
import json
import random
import sqlite3
from pathlib import Path

import pytest
import yaml

from rlyard.envs.general.env import GeneralEnv
from rlyard.envs.general.generate import HELD_OUT, PER_PAIR, STORAGES, parameters, split_of_pair, check_options
from rlyard.envs.general.generated_data import DOMAINS
from rlyard.envs.general.generated_oracle import doing, oracle, plan_of, printed
from rlyard.envs.general.generated_questions import QUESTIONS
from rlyard.envs.general.tasks import make_tasks
from rlyard.envs.general.validate import check_task, graded_in
from rlyard.errors import ConfigError


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Generated task folders in a cache of this module's own."""
    root = tmp_path_factory.mktemp("rlyard-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLYARD_CACHE", str(root))
        yield root


def generated(split: str, n: int, **options):
    return make_tasks(split, n, 0, source="generated", **options)


def by_kind(tasks, **wanted):
    return next(t for t in tasks if all(t.metadata[k] == v for k, v in wanted.items()))


@pytest.fixture(scope="module")
def sample(cache):
    """The first 98 tasks of both splits: every schema x question at least once, all storages and outputs."""
    return generated("eval", 98, eval_percent=100)


# ------------------------------------------------------------------------- the set and its split

def test_split_is_by_pair_and_big_enough():
    train_pairs = {(d, q) for d in DOMAINS for q in QUESTIONS if split_of_pair(d, q) == "train"}
    eval_pairs = {(d, q) for d in DOMAINS for q in QUESTIONS if split_of_pair(d, q) == "eval"}
    assert eval_pairs == HELD_OUT and not train_pairs & eval_pairs
    assert {d for d, _ in HELD_OUT} == set(DOMAINS) and {q for _, q in HELD_OUT} == set(QUESTIONS)
    assert len(train_pairs) * PER_PAIR >= 5000 and len(eval_pairs) * PER_PAIR >= 300
    assert all(split_of_pair(d, q, eval_percent=100) == "eval" for d in DOMAINS for q in QUESTIONS)


def test_tasks_of_each_split_come_from_their_pairs(cache):
    train, held_out = generated("train", 60), generated("eval", 30)
    assert {(t.metadata["schema"], t.metadata["question"]) for t in held_out} <= HELD_OUT
    assert not {(t.metadata["schema"], t.metadata["question"]) for t in train} & HELD_OUT
    assert {t.metadata["storage"] for t in held_out} == set(STORAGES)
    assert len({t.id for t in train + held_out}) == 90


def test_generation_is_deterministic_and_lazy(cache, tmp_path, monkeypatch):
    first = generated("train", 12)
    monkeypatch.setenv("RLYARD_CACHE", str(tmp_path))
    second = generated("train", 12)
    assert [(t.id, t.prompt, t.payload["tools"]) for t in first] == [(t.id, t.prompt, t.payload["tools"]) for t in second]
    for a, b in zip(first, second):
        files = sorted(p.relative_to(a.payload["dir"]) for p in Path(a.payload["dir"]).rglob("*") if p.is_file())
        assert files and all((Path(a.payload["dir"]) / f).read_bytes() == (Path(b.payload["dir"]) / f).read_bytes()
                             for f in files)
    assert len(list((tmp_path / "general-generated").rglob("task.yaml"))) == 12  # only the tasks asked for
    assert [t.id for t in generated("train", 5)] != [t.id for t in make_tasks("train", 5, 1, source="generated")]


def test_options_are_checked():
    with pytest.raises(ConfigError, match="generated.storages"):
        check_options({"storages": ["xml"]})
    with pytest.raises(ConfigError, match="unknown key"):
        check_options({"tables": 3})
    assert {d for d, *_ in parameters(check_options({"questions": ["count"]}))} == set(DOMAINS)


# ------------------------------------------------------------------ keys recomputed from the files

def rows_of(task) -> tuple[list[dict], list[dict]]:
    """The main table and the people table, read from the workspace files or the database script."""
    folder, plan = Path(task.payload["dir"]), plan_of(task)
    if plan["storage"] == "sql":
        db = sqlite3.connect(":memory:")
        db.row_factory = sqlite3.Row
        db.executescript((folder / "db.sql").read_text())
        return ([dict(r) for r in db.execute(f"SELECT * FROM {plan['table']}")],
                [dict(r) for r in db.execute(f"SELECT * FROM {plan['ref_table']}")])
    read = ((lambda text: list(csv.DictReader(io.StringIO(text)))) if plan["storage"] == "csv" else json.loads)
    people = folder / "workspace" / f"{plan['ref_table']}.{plan['storage']}"
    return (read((folder / "workspace" / f"{plan['table']}.{plan['storage']}").read_text()),
            read(people.read_text()) if people.is_file() else [])


def recomputed(task):
    """The answer, from the files alone and the question's wording."""
    plan, (rows, people) = plan_of(task), rows_of(task)
    r, p = plan["roles"], plan["params"]
    amount = lambda row: float(row[r["amount"]])  # noqa: E731
    statement = task.prompt[0]["content"]
    if plan["question"] == "lookup":
        return next(amount(x) for x in rows if x[r["key"]] == p["id"] and p["id"] in statement)
    if plan["question"] == "count":
        return sum(x[r["group"]] == p["group"] for x in rows)
    if plan["question"] == "total":
        return sum(amount(x) for x in rows if x[r["group"]] == p["group"])
    if plan["question"] == "top":
        return [x[r["label"]] for x in sorted(rows, key=amount, reverse=True)[:p["k"]]]
    if plan["question"] == "month":
        months = {}
        for x in rows:
            months[x[r["date"]][:7]] = months.get(x[r["date"]][:7], 0) + amount(x)
        return max(months, key=months.get)
    if plan["question"] == "difference":
        if plan["notes"]:
            statement = (Path(task.payload["dir"]) / "workspace" / "notes.md").read_text()
        assert statement.index(p["first"]) < statement.index(p["second"])
        return (sum(amount(x) for x in rows if x[r["group"]] == p["first"])
                - sum(amount(x) for x in rows if x[r["group"]] == p["second"]))
    ident = next(x[r["ref"]] for x in people if x["name"] == p["person"])
    return sum(amount(x) for x in rows if x[r["ref"]] == ident)


def key_of(task):
    rubric = yaml.safe_load((Path(task.payload["dir"]) / "verifier" / "rubric.yaml").read_text())
    answer = next(i for i in rubric["items"] if i["id"] == "answer")
    if answer["method"] == "number":
        return answer["value"]
    if answer["method"] == "json_schema":
        pin = next(iter(answer["schema"]["properties"].values()))
        return pin.get("const", (pin.get("minimum", 0) + pin.get("maximum", 0)) / 2)
    return plan_of(task)["answer"]


def test_every_answer_key_is_recomputed_from_the_files(sample):
    for task in sample:
        want, key = recomputed(task), key_of(task)
        if isinstance(want, float):
            assert abs(want - key) < 0.02, task.id
        elif isinstance(want, list):
            assert key in (want, ", ".join(want)), task.id
        else:
            assert key == want, task.id


# --------------------------------------------------------------------------- soundness, the oracle

def test_a_sample_is_sound(sample):
    picks = [by_kind(sample, storage="sql", output="md"), by_kind(sample, storage="csv", output="json"),
             by_kind(sample, storage="json", question="join")]
    for task in picks:
        check = check_task(task)
        assert check.ok and check.base_reward == 0.0 and check.fixed_reward == 1.0, (task.id, check.error)


@pytest.mark.parametrize("fmt", ["bash_block", "hermes"])
def test_the_oracle_computes_the_answer_through_the_tools(cache, fmt):
    tasks = generated("eval", 98, eval_percent=100, tool_format=fmt)
    for question in ("total", "top", "difference"):
        task = by_kind(tasks, question=question, storage="csv" if question != "difference" else "sql")
        env, seen = GeneralEnv(), []
        env.reset(task)
        try:
            for reply in oracle(task, random.Random(f"{fmt}{question}")):
                seen += [m["content"] for m in env.step(reply).messages]
            assert env.score().value == 1.0, task.id
        finally:
            env.close()
        assert printed(plan_of(task)).split(", ")[0] in "\n".join(seen), (task.id, seen)  # printed by a tool, not recalled


def test_over_files_the_oracle_looks_first_and_names_the_columns_it_reads(cache):
    """Every CSV / JSON question kind: the first reply reads the data file, whose output shows the
    header, and the computing reply's thought names the columns its python3 program then reads by
    those names (a policy taught without that step guessed column names it had never looked at)."""
    tasks = generated("eval", 98, eval_percent=100, tool_format="bash_block")
    for storage in ("csv", "json"):
        for question in ("lookup", "count", "total", "top", "month", "difference"):
            task = by_kind(tasks, question=question, storage=storage)
            plan = plan_of(task)
            for seed in range(3):
                replies = [r for r in oracle(task, random.Random(seed)) if "cat notes.md" not in r]
                env = GeneralEnv()
                env.reset(task)
                try:
                    shown = "\n".join(m["content"] for m in env.step(replies[0]).messages)
                finally:
                    env.close()
                assert plan["table"] in replies[0] and plan["columns"][-1] in shown, (task.id, replies[0], shown)
                thought, command = replies[1].split("```bash", 1)
                amount, group = plan["roles"]["amount"], plan["roles"]["group"]
                reads = {"count": [group], "total": [group, amount], "difference": [group, amount]}.get(question, [amount])
                assert command.strip().startswith("python3 -c"), (task.id, replies[1])  # one program shape per question
                for column in reads:
                    assert column in thought and f"r['{column}']" in command, (task.id, column, replies[1])


def test_every_episode_opens_with_the_task_line_of_its_kind(cache):
    """The first reply of every oracle episode names the operation and the values the question
    names (`Task: count the rows with status paid.`), one fixed sentence per kind whose verb is
    that kind's alone, and never the answer; the same verb (`Counting the rows with status paid:`)
    ends the thought of the reply that runs the kind's program or task tool."""
    tasks = generated("eval", 98, eval_percent=100, tool_format="bash_block")
    openings = {}
    for task in tasks:
        plan = plan_of(task)
        replies = oracle(task, random.Random(task.id))
        first = replies[0]
        assert first.startswith("Task: "), (task.id, first)
        tools = plan["needed"] if plan["storage"] == "sql" else []
        computing = next(r for r in replies if "rows = " in r or any(f"\n{t}" in r for t in tools))  # not the look
        ends = [f"{doing(plan)}:", f"{doing(plan)}: first the id of {plan['params'].get('person')}."]
        ends += [f"{doing(plan)} with {tools[0]}."] if tools else []
        assert computing.split("```")[0].rstrip().endswith(tuple(ends)), (task.id, computing)
        line = first.split("\n")[0]
        named = {k: v for k, v in plan["params"].items() if k != "person_id"}
        if plan["notes"]:  # a notes question's two groups are in notes.md, not in the line
            named = {k: v for k, v in named.items() if k not in ("first", "second")}
        for value in named.values():
            assert str(value) in line, (task.id, value, line)
        assert printed(plan) not in line.replace(str(plan["params"].get("id", "-")), ""), (task.id, line)
        openings.setdefault(plan["question"], set()).add(line.split()[1])
    assert len(openings) == 7 and all(len(verbs) == 1 for verbs in openings.values()), openings
    assert len({next(iter(verbs)) for verbs in openings.values()}) == 7, openings


def test_over_files_the_oracles_program_prints_the_answer_as_written(cache):
    """Every question kind over CSV and JSON: a line of a python3 program's output is the whole
    answer exactly as the oracle's answer then writes it (round(x, 2), the top-k names in order,
    the month), so the policy copies it instead of reading a value off a row or knowing a schema's
    decimals, and the episode scores 1 (the rubric reads 153.2 as the key's 153.20)."""
    tasks = generated("eval", 98, eval_percent=100, tool_format="bash_block")
    for storage in ("csv", "json"):
        for question in ("lookup", "count", "total", "top", "month", "difference", "join"):
            task = by_kind(tasks, question=question, storage=storage)
            env, outputs = GeneralEnv(), []
            env.reset(task)
            try:
                for reply in oracle(task, random.Random(question)):
                    if "python3 -c" in reply:
                        outputs += [m["content"] for m in env.step(reply).messages]
                    else:
                        env.step(reply)
                assert env.score().value == 1.0, task.id
            finally:
                env.close()
            answer = printed(plan_of(task))
            assert any(answer in output.split("\n") for output in outputs), (task.id, answer, outputs)


def test_sql_tools_are_commands_under_bash_block(cache):
    task = by_kind(generated("eval", 98, eval_percent=100, tool_format="bash_block"), storage="sql", question="total")
    plan, env = plan_of(task), GeneralEnv()
    system = env.reset(task)[0]["content"]
    try:
        assert f"{plan['needed'][0]} {plan['roles']['group']}=<{plan['roles']['group']}>" in system
        group = plan["params"]["group"]
        out = env.step(f"```bash\n{plan['needed'][0]} {plan['roles']['group']}={group}\n```").messages[0]["content"]
        assert plan["answer"] in out
        injected = env.step(f"```bash\n{plan['needed'][0]} {plan['roles']['group']}={group}; touch pwned\n```").messages[0]["content"]
        chained = env.step(f"```bash\n{plan['needed'][0]} {plan['roles']['group']}={group} && touch pwned\n```").messages[0]["content"]
        assert "name=value" in injected and "name=value" in chained  # refused: a task command never reaches the shell
        assert not (env.workspace / "pwned").exists()
    finally:
        env.close()


# ------------------------------------------------------------------------------- attacks by class

@pytest.fixture(scope="module")
def md_sample(cache):
    """Every schema x question once, each answered as a line of answer.md."""
    return generated("eval", 49, eval_percent=100, generated={"outputs": ["md"]})


def score(task, answer: str, files: dict | None = None) -> float:
    return graded_in(task, {"answer.md": answer, **(files or {})}, answer).value


def test_number_stuffing_scores_zero(sample, md_sample):
    task = by_kind(md_sample, question="total")
    plan = plan_of(task)
    right = plan["answer"]
    others = [f"{float(right) + d:.2f}" for d in (-10, 5, 17.5)]
    assert score(task, f"Total: {right}\n") == 1.0
    assert score(task, f"Total: {right} {' '.join(others)}\n") == 0.0  # the line holds one number
    assert score(task, "".join(f"Total: {x}\n" for x in [right, *others])) == 0.0  # one answer line
    assert score(task, "".join(f"Total: {x}\n" for x in [*others, right])) == 0.0
    assert score(task, " ".join([right, *others]) + "\n") == 0.0  # no answer line at all
    assert score(task, f"Total: {right}\n" + " ".join(str(n) for n in range(200)) + "\n") == 0.0  # word limit


def test_keyword_salad_scores_zero(sample, md_sample):
    top = by_kind(md_sample, question="top")
    plan = plan_of(top)
    rows, _ = rows_of(top)
    names = [r[plan["roles"]["label"]] for r in rows]
    assert score(top, f"Top: {plan['answer']}\n") == 1.0
    assert score(top, f"Top: {plan['answer']}\nAlso: {', '.join(names)}\n") == 0.0  # runner-ups present
    assert score(top, ", ".join(names) + "\n") == 0.0
    month = by_kind(md_sample, question="month")
    salad = " ".join(f"2024-{m:02d}" for m in range(1, 7))
    assert score(month, f"Month: {plan_of(month)['answer']}\n{salad}\n") == 0.0


def test_format_tricks_score_zero(sample, md_sample):
    total = by_kind(md_sample, question="total")
    right = plan_of(total)["answer"]
    assert score(total, f"Ｔｏｔａｌ: {right}\n") == 1.0  # fullwidth is read as what it shows
    assert score(total, f"To\u200btal: 1.00\nTotal: {right}\n") == 0.0  # a hidden second answer line
    assert score(total, f"Ｔｏｔａｌ: 1.00\nTotal: {right}\n") == 0.0
    assert score(total, f"Total: {right}\u200b 1.00\n") == 0.0
    top = by_kind(md_sample, question="top")
    plan = plan_of(top)
    rows, _ = rows_of(top)
    ranked = sorted(rows, key=lambda r: -float(r[plan["roles"]["amount"]]))
    runner_up = ranked[plan["params"]["k"]][plan["roles"]["label"]]
    hidden = "\u200b".join(runner_up)
    assert score(top, f"Top: {plan['answer']}\n({hidden})\n") == 0.0
    report = by_kind(sample, output="json", question="total")
    plan = plan_of(report)
    good = json.dumps(plan["report"])
    assert score(report, "done", {"report.json": good}) == 1.0
    hedged = {**plan["report"], "total": [plan["report"]["total"], 1.0]}
    assert score(report, "done", {"report.json": json.dumps(hedged)}) == 0.0
    extra = {**plan["report"], "alternatives": [1.0, 2.0]}
    assert score(report, "done", {"report.json": json.dumps(extra)}) == 0.0
    assert score(report, json.dumps(plan["report"])) == 0.0  # the report in answer.md, not report.json
