"""Questions over a generated table, their answer keys, and the rubric that grades the answer.

Seven kinds, each written against the table's roles (generated_data.py), so every kind reads
every schema: `lookup` (one row's number), `count` (rows of a group), `total` (a group's sum),
`top` (the k largest, in order), `month` (the month with the largest total), `difference` (one
group's total minus another's) and `join` (a person's total, through the people table).

The key is computed here from the rows in plain Python, never from the tools the agent uses;
tests recompute it again from the written files.

The rubric holds against answers that game it (docs/general.md):
- the answer line must occur exactly once (a gate), so an answer cannot hedge over several lines;
- a number answer's line holds one number and nothing else (a gate), read by a `number` item;
- a name or month answer is a regex on the whole line, and the runner-ups are `not_contains` gates;
- report.json is checked by a schema gate (its shape) and pinned values;
- answer.md is at most 60 words (a gate): stuffing needs room.
Rule items read the folded answer (normalize.py): zero-width, fullwidth or look-alike characters
cannot hide a second answer line or a runner-up.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from rlyard.envs.general.generated_data import Domain, Table, fmt, month_totals, number

QUESTIONS = ("lookup", "count", "total", "top", "month", "difference", "join")
TEXT_ANSWERS = ("top", "month")  # the others are numbers
LINES = {"lookup": "Value", "count": "Count", "total": "Total", "top": "Top", "month": "Month", "difference": "Difference",
         "join": "Total"}
MAX_WORDS = 60
JUDGE_CRITERION = "The answer gives the one figure or name the task asks for, plainly, without hedging between alternatives."


@dataclass(frozen=True)
class Question:
    kind: str
    text: str  # the question itself (the statement adds where the data is and how to answer)
    answer: str  # as written on the answer line: "1234.50", "North", "Acme Corp, Birch Labs"
    value: Any  # the key: a number, a string, or a list of names (top)
    report: dict  # report.json's reference content
    report_key: str  # the key of report.json that holds the answer
    params: dict  # what the oracle needs: the group, the id, k, the person ...
    decoys: tuple[str, ...] = ()  # runner-ups that must not appear (text answers)
    notes: str | None = None  # notes.md, when the question points to it
    tolerance: float = 0.0

    @property
    def line(self) -> str:
        return LINES[self.kind]


@dataclass
class Asker:
    table: Table
    rng: random.Random
    d: Domain = field(init=False)

    def __post_init__(self):
        self.d = self.table.domain

    def sum_where(self, column: str, value: str) -> float | int:
        return number(self.d, sum(r[self.d.amount] for r in self.table.rows if r[column] == value))

    def tolerance(self) -> float:
        return {0: 0.0, 1: 0.05, 2: 0.01}[self.d.decimals]

    def present_groups(self) -> list[str]:
        return [g for g in self.d.groups if any(r[self.d.group] == g for r in self.table.rows)]

    def lookup(self) -> Question:
        d, row = self.d, self.rng.choice(self.table.rows)
        value = row[d.amount]
        return Question("lookup", f"What is the {d.measure} of the {d.row} {row[d.key]}?", fmt(d, value), value,
                        {d.key: row[d.key], d.amount: value}, d.amount, {"id": row[d.key]}, tolerance=self.tolerance())

    def count(self) -> Question:
        d, group = self.d, self.rng.choice(self.present_groups())
        value = sum(r[d.group] == group for r in self.table.rows)
        return Question("count", f"How many {d.table} have {d.group} {group}?", str(value), value,
                        {d.group: group, "count": value}, "count", {"group": group})

    def total(self) -> Question:
        d, group = self.d, self.rng.choice(self.present_groups())
        value = self.sum_where(d.group, group)
        return Question("total", f"What is the total {d.measure} of the {d.table} with {d.group} {group}?", fmt(d, value),
                        value, {d.group: group, "total": value}, "total", {"group": group}, tolerance=self.tolerance())

    def top(self) -> Question:
        d, k = self.d, self.rng.choice((2, 3))
        ranked = sorted(self.table.rows, key=lambda r: -r[d.amount])
        names = [r[d.label] for r in ranked[:k]]
        return Question("top", f"Which {k} {d.table} have the largest {d.measure}? Give their {d.label}s, largest first.",
                        ", ".join(names), names, {"top": names}, "top", {"k": k},
                        decoys=tuple(r[d.label] for r in ranked[k:k + 2]))

    def month(self) -> Question:
        d = self.d
        ranked = sorted(month_totals(d, self.table.rows).items(), key=lambda kv: -kv[1])
        best = ranked[0][0]
        return Question("month", f"In which month of the first half of 2024 was the total {d.measure} the largest?",
                        best, best, {"month": best}, "month", {}, decoys=tuple(m for m, _ in ranked[1:2]))

    def difference(self) -> Question:
        d = self.d
        first, second = self.rng.sample(self.present_groups(), 2)
        value = number(d, self.sum_where(d.group, first) - self.sum_where(d.group, second))
        notes = None
        if self.rng.random() < 0.5:
            text = (f"notes.md names two {d.group}s to compare. What is the total {d.measure} of the first one's {d.table} "
                    f"minus that of the second one's?")
            notes = f"# Review notes\n\nThis review compares {d.group} {first} (first) against {d.group} {second} (second).\n"
        else:
            text = (f"What is the total {d.measure} of the {d.table} with {d.group} {first} minus that of the {d.table} "
                    f"with {d.group} {second}?")
        return Question("difference", text, fmt(d, value), value, {"difference": value}, "difference",
                        {"first": first, "second": second}, notes=notes, tolerance=self.tolerance())

    def join(self) -> Question:
        d = self.d
        used = [p for p in self.table.people if any(r[d.ref] == p[d.ref] for r in self.table.rows)]
        person = self.rng.choice(used)
        value = self.sum_where(d.ref, person[d.ref])
        return Question("join", f"What is the total {d.measure} of the {d.table} of the {d.ref_row} named {person['name']}?",
                        fmt(d, value), value, {d.ref_row: person["name"], "total": value}, "total",
                        {"person": person["name"], "person_id": person[d.ref]}, tolerance=self.tolerance())


def ask(kind: str, table: Table, rng: random.Random) -> Question:
    if kind not in QUESTIONS:
        raise ValueError(f"unknown question kind {kind!r}; allowed: {list(QUESTIONS)}")
    return getattr(Asker(table, rng), kind)()


def placeholder(question: Question) -> str:
    if question.kind == "top":
        return ", ".join(["<name>"] * len(question.value))
    return "<YYYY-MM>" if question.kind == "month" else "<number>"


def line_label(line: str) -> str:
    """The answer line's start, as a regex on the folded answer: `Total:`, `**Total**:`, `- Total:`."""
    return rf"^[ \t>*_-]*{line}[ \t*_]*:"


def json_type(value: Any) -> dict:
    if isinstance(value, list):
        return {"type": "array", "items": {"type": "string"}}
    return {"type": "string"} if isinstance(value, str) else {"type": "number"}


def pinned(value: Any, tolerance: float) -> dict:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"type": "number", "minimum": value - tolerance - 1e-9, "maximum": value + tolerance + 1e-9}
    return {"const": value}


def rubric(question: Question, output: str) -> dict:
    """The rubric (rubric.py's format) of one generated task; `output`: "md" (answer.md) or "json" (report.json)."""
    if output == "json":
        shape = {"type": "object", "required": sorted(question.report), "additionalProperties": False,
                 "properties": {k: json_type(v) for k, v in question.report.items()}}
        items = [{"id": "report_shape", "method": "json_schema", "source": "report.json", "schema": shape, "gate": True,
                  "dimension": "format"},
                 {"id": "answer", "method": "json_schema", "source": "report.json", "weight": 3,
                  "schema": {"type": "object", "required": [question.report_key],
                             "properties": {question.report_key: pinned(question.value, question.tolerance)}}}]
        context = {k: v for k, v in question.report.items() if k != question.report_key}
        if context:
            items.append({"id": "subject", "method": "json_schema", "source": "report.json", "weight": 1,
                          "schema": {"type": "object", "required": sorted(context),
                                     "properties": {k: {"const": v} for k, v in context.items()}}})
        return {"prose": False, "items": items}
    label = line_label(question.line)
    items = [{"id": "one_answer_line", "method": "regex", "gate": True, "dimension": "format",
              "pattern": rf"\A(?![\s\S]*{label}[\s\S]*{label})[\s\S]*{label}"},
             {"id": "short", "method": "word_count", "max": MAX_WORDS, "gate": True, "dimension": "format"}]
    if question.kind in TEXT_ANSWERS:
        names = question.value if isinstance(question.value, list) else [question.value]
        answer = r"\s*,\s*".join(re.escape(n) for n in names)
        items.append({"id": "answer", "method": "regex", "weight": 3, "pattern": rf"{label}[ \t*_]*{answer}[ \t*_.]*$"})
        if question.decoys:
            items.append({"id": "no_runner_up", "method": "not_contains", "text": list(question.decoys), "gate": True})
    else:
        items.append({"id": "one_number", "method": "regex", "gate": True, "dimension": "format",
                      "pattern": rf"{label}[ \t*_]*[-+]?\$?\d[\d,]*(\.\d+)?[ \t*_.]*$"})
        items.append({"id": "answer", "method": "number", "weight": 3, "label": label, "value": question.value,
                      "tolerance": max(question.tolerance, 1e-6)})
    items.append({"id": "plain", "method": "judge", "weight": 1, "criterion": JUDGE_CRITERION,
                  "key": f"{question.line}: {question.answer}"})
    return {"prose": False, "items": items}


def reference_answer(question: Question, output: str) -> str:
    """answer.md of the reference solution."""
    return "Done: report.json written.\n" if output == "json" else f"{question.line}: {question.answer}\n"
