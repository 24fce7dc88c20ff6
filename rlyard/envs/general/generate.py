"""Generated general tasks (`env.options.source: generated`): small business tables, one question each.

A task's parameters are (schema, question kind, storage, output, index): one of seven table
schemas (generated_data.py), one of seven question kinds (generated_questions.py), the data as
CSV, JSON or a SQLite database behind the task's SQL tools, the answer as a line of answer.md or
as report.json, and an index that seeds the rows. The held-out (eval) split is a fixed set of
seven (schema, question) pairs, one per schema and one per kind, so no held-out pair is ever
trained on: success there is a question asked of a schema in a way never seen together. All the
other pairs are train. (`eval_percent: 100`, as validate asks, puts every task in eval.)

Tasks are materialised lazily: only the `n` asked are written, each as a task folder of the
family's own shape (task.yaml, workspace/, db.sql, verifier/rubric.yaml, verifier/reference.md,
verifier/plan.json for the oracle) under the rlyard cache, once (atomically) per task; the
grader is the family's one rubric grader, with no special case. The judge item of each rubric is
off (`rules_only`) unless `judge.base_url` names an endpoint.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml

from rlyard.errors import ConfigError
from rlyard.envs.general.generated_data import DOMAINS, Table, csv_text, fmt, make_table, sql_script
from rlyard.envs.general.generated_questions import QUESTIONS, Question, ask, placeholder, reference_answer, rubric
from rlyard.types import Task

VERSION = "v1"  # part of every task folder's path: a change of the generator writes new folders
STORAGES = ("csv", "json", "sql")
OUTPUTS = ("md", "json")
PER_PAIR = 2000  # indices per (schema, question) pair: 42 train pairs x 2000 = 84,000 train tasks, 14,000 eval
HELD_OUT = frozenset({("sales", "difference"), ("tickets", "month"), ("inventory", "top"), ("staff", "join"),
                      ("invoices", "count"), ("shipments", "total"), ("expenses", "lookup")})
GENERATED_DEFAULTS: dict[str, Any] = {
    "storages": list(STORAGES),  # keep only some: e.g. [csv, sql]
    "outputs": list(OUTPUTS),
    "questions": list(QUESTIONS),
    "rows": [8, 14],  # rows per table, inclusive
}


def generated_root() -> Path:
    from rlyard.cache import cache_dir

    return cache_dir() / "general-generated" / VERSION


def check_options(options: dict | None) -> dict[str, Any]:
    """env.options.generated over its defaults; errors name the key and the allowed values."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(GENERATED_DEFAULTS))
    if unknown:
        raise ConfigError(f"env.options.generated: unknown key(s) {unknown}; allowed: {sorted(GENERATED_DEFAULTS)}")
    opts = {**GENERATED_DEFAULTS, **options}
    for key, allowed in (("storages", STORAGES), ("outputs", OUTPUTS), ("questions", QUESTIONS)):
        values = opts[key]
        if not isinstance(values, list) or not values or any(v not in allowed for v in values):
            raise ConfigError(f"env.options.generated.{key} must be a non-empty list of {list(allowed)}, got {values!r}")
    rows = opts["rows"]
    if not (isinstance(rows, list) and len(rows) == 2 and all(isinstance(r, int) for r in rows) and 4 <= rows[0] <= rows[1] <= 14):
        raise ConfigError(f"env.options.generated.rows must be [low, high] with 4 <= low <= high <= 14, got {rows!r}")
    return opts


def split_of_pair(domain: str, question: str, eval_percent: int = 20) -> str:
    """eval for a held-out (schema, question) pair, train for every other; `eval_percent` 100
    (validate's "every task") puts all in eval. A pair's split never depends on the index or seed."""
    return "eval" if eval_percent >= 100 or (domain, question) in HELD_OUT else "train"


def parameters(opts: dict[str, Any], start: int = 0) -> Iterator[tuple[str, str, str, str, int]]:
    """(schema, question, storage, output, index), every pair at one index before the next index;
    storage and output rotate with the index, so any prefix mixes them."""
    storages, outputs = opts["storages"], opts["outputs"]
    for index in range(start, start + PER_PAIR):
        index %= PER_PAIR
        for question in opts["questions"]:
            for domain in DOMAINS:
                storage = storages[(index + len(domain)) % len(storages)]
                output = outputs[(index // len(storages) + len(question)) % len(outputs)]
                yield domain, question, storage, output, index


def task_id(domain: str, question: str, storage: str, output: str, index: int) -> str:
    return f"gen_{domain}_{question}_{storage}_{output}_{index:04d}"


def family_kind(storage: str, output: str) -> str:
    """The family's task kind (tasks.KINDS) a generated task counts as."""
    return "sql_tool" if storage == "sql" else "json_report" if output == "json" else "csv_compute"


def make_generated(split: str, n: int, seed: int, opts: dict[str, Any], settings: dict[str, Any]) -> list[Task]:
    """The first `n` tasks of `split` (seed rotates where the enumeration starts), their folders written."""
    gen = check_options(opts.get("generated"))
    rules_only = bool(settings["rules_only"]) or not (opts["judge"] or {}).get("base_url")
    start = (seed * 7919) % PER_PAIR if seed else 0
    tasks: list[Task] = []
    for domain, question, storage, output, index in parameters(gen, start):
        if len(tasks) >= n:
            break
        if split_of_pair(domain, question, int(opts["eval_percent"])) != split:
            continue
        kind = family_kind(storage, output)
        if opts["kind"] not in (None, kind):
            continue
        built = build(domain, question, storage, output, index, tuple(gen["rows"]))
        tasks.append(Task(
            id=built["id"], prompt=[{"role": "user", "content": built["statement"]}], env="general",
            payload={"dir": str(built["dir"]), "tools": built["tools"], "database": built["database"],
                     **settings, "rules_only": rules_only},
            metadata={"split": split, "kind": kind, "source": "generated", "schema": domain, "question": question,
                      "storage": storage, "output": output}))
    return tasks


def build(domain: str, question: str, storage: str, output: str, index: int, rows: tuple[int, int]) -> dict[str, Any]:
    """One task: its statement, tools and folder (written if it is not there yet)."""
    ident = task_id(domain, question, storage, output, index)
    rng = random.Random(f"rlyard/general-generated/{domain}|{question}|{storage}|{output}|{index}|{rows}")
    table = make_table(DOMAINS[domain], rng, rng.randint(*rows))
    q = ask(question, table, rng)
    tools = sql_tools(table, question, rng) if storage == "sql" else []
    files = workspace_files(table, q, storage)
    statement = write_statement(table, q, storage, output, files)
    folder = generated_root() / (ident if rows == (8, 14) else f"{ident}_r{rows[0]}-{rows[1]}")
    if not (folder / "task.yaml").is_file():
        write_folder(folder, {
            "task.yaml": yaml.safe_dump({"id": folder.name, "kind": family_kind(storage, output), "statement": statement,
                                         **({"tools": tools, "database": "db.sql"} if tools else {})}, sort_keys=False),
            **({"db.sql": sql_script(table)} if tools else {}),
            **{f"workspace/{name}": text for name, text in files.items()},
            "verifier/rubric.yaml": yaml.safe_dump(rubric(q, output), sort_keys=False),
            "verifier/reference.md": reference_answer(q, output),
            **({"verifier/reference_files/report.json": json.dumps(q.report) + "\n"} if output == "json" else {}),
            "verifier/plan.json": json.dumps(plan(table, q, storage, output, tools), indent=1),
        })
    return {"id": folder.name, "statement": statement, "tools": tools, "database": "db.sql" if tools else None, "dir": folder}


def write_folder(folder: Path, files: dict[str, str]) -> None:
    """All files into a fresh folder, renamed into place: a reader never sees half a task."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    for name, text in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(text)
    try:
        os.rename(staging, folder)
    except OSError:  # another process wrote it first: theirs is the same task
        shutil.rmtree(staging, ignore_errors=True)


def workspace_files(table: Table, q: Question, storage: str) -> dict[str, str]:
    d = table.domain
    files: dict[str, str] = {}
    if storage == "csv":
        files[f"{d.table}.csv"] = csv_text(d.columns, table.rows)
        if q.kind == "join":
            files[f"{d.ref_table}.csv"] = csv_text((d.ref, "name"), table.people)
    elif storage == "json":
        files[f"{d.table}.json"] = json.dumps([{c: r[c] for c in d.columns} for r in table.rows], indent=1) + "\n"
        if q.kind == "join":
            files[f"{d.ref_table}.json"] = json.dumps(list(table.people), indent=1) + "\n"
    if q.notes:
        files["notes.md"] = q.notes
    return files


def write_statement(table: Table, q: Question, storage: str, output: str, files: dict[str, str]) -> str:
    d = table.domain
    if storage == "sql":
        where = f"The {d.table} ({d.measure}) are in a database; query it with the task tools."
    else:
        data = f"{d.table}.{storage}"
        where = f"{data} lists the {d.table} of the first half of 2024 ({d.amount}: {d.measure})."
        if q.kind == "join":
            where += f" {d.ref_table}.{storage} gives the name of each {d.ref_row} ({d.ref})."
    if output == "json":
        shape = ", ".join(f'"{k}": ' + ("<number>" if not isinstance(v, (str, list)) else "[<name>, ...]" if isinstance(v, list)
                                         else '"<text>"') for k, v in q.report.items())
        how = f"Write report.json, the JSON object {{{shape}}}, then reply done."
    else:
        how = f"Answer with the line `{q.line}: {placeholder(q)}` (in answer.md, or as your reply)."
    return f"{where} {q.text} {how}"


def sql_tools(table: Table, question: str, rng: random.Random) -> list[dict]:
    """The task's SQL tools: the ones its question needs and one or two others of the schema, shuffled."""
    d = table.domain
    money = f"printf('%.{d.decimals}f', SUM({d.amount}))"
    every = {
        f"get_{d.row}": (f"One {d.row} by its {d.key}.", {d.key: "string"}, f"SELECT * FROM {d.table} WHERE {d.key} = :{d.key}"),
        f"count_{d.table}": (f"How many {d.table} have a given {d.group}.", {d.group: "string"},
                             f"SELECT COUNT(*) AS {d.table} FROM {d.table} WHERE {d.group} = :{d.group}"),
        f"total_{d.amount}": (f"The total {d.amount} of the {d.table} with a given {d.group}.", {d.group: "string"},
                              f"SELECT {money} AS total_{d.amount} FROM {d.table} WHERE {d.group} = :{d.group}"),
        f"top_{d.table}": (f"The five {d.table} with the largest {d.amount}, largest first.", {},
                           f"SELECT {d.label}, {d.amount} FROM {d.table} ORDER BY {d.amount} DESC LIMIT 5"),
        f"monthly_{d.amount}": (f"The total {d.amount} of each month, largest first.", {},
                                f"SELECT substr({d.date}, 1, 7) AS month, {money} AS total FROM {d.table} "
                                f"GROUP BY month ORDER BY SUM({d.amount}) DESC"),
        f"find_{d.ref_row}": (f"A {d.ref_row}'s {d.ref} by name.", {"name": "string"},
                              f"SELECT {d.ref}, name FROM {d.ref_table} WHERE name = :name"),
        f"total_for_{d.ref_row}": (f"The total {d.amount} of the {d.table} of one {d.ref_row} ({d.ref}).", {d.ref: "string"},
                                   f"SELECT {money} AS total_{d.amount} FROM {d.table} WHERE {d.ref} = :{d.ref}"),
    }
    needed = needed_tools(table, question)
    others = sorted(set(every) - set(needed))
    names = needed + rng.sample(others, rng.randint(1, 2))
    rng.shuffle(names)
    return [{"name": name, "description": every[name][0], "sql": every[name][2],
             "parameters": {p: {"type": t} for p, t in every[name][1].items()}} for name in names]


def needed_tools(table: Table, question: str) -> list[str]:
    d = table.domain
    return {"lookup": [f"get_{d.row}"], "count": [f"count_{d.table}"], "total": [f"total_{d.amount}"],
            "top": [f"top_{d.table}"], "month": [f"monthly_{d.amount}"], "difference": [f"total_{d.amount}"],
            "join": [f"find_{d.ref_row}", f"total_for_{d.ref_row}"]}[question]


def plan(table: Table, q: Question, storage: str, output: str, tools: list[dict]) -> dict[str, Any]:
    """What the oracle (generated_oracle.py) needs: the schema's roles, the question's parameters and the answer."""
    d = table.domain
    return {"schema": d.name, "question": q.kind, "storage": storage, "output": output, "params": q.params,
            "line": q.line, "answer": q.answer, "report": q.report, "notes": bool(q.notes),
            "tools": [t["name"] for t in tools], "needed": needed_tools(table, q.kind) if tools else [],
            "columns": list(d.columns), "roles": {"key": d.key, "label": d.label, "group": d.group, "amount": d.amount,
                                                  "date": d.date, "ref": d.ref},
            "table": d.table, "ref_table": d.ref_table, "decimals": d.decimals,
            "totals": [fmt(d, sum(r[d.amount] for r in table.rows if r[d.group] == q.params[g])) for g in ("first", "second")]
            if q.kind == "difference" else []}
