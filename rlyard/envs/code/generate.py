"""Generated code tasks: small Python repositories with one injected bug each (`source: generated`).

Each task is drawn from `gen_catalogue.py`: one helper of a family (string, list, dict, number,
date, interval) with one bug of a kind (off-by-one, comparison, boolean, swapped arguments,
missing edge case, wrong constant), beside a few correct helpers of the same family, under
varied function, parameter, package and module names and layouts. The issue states the symptom
only (a call, what it gave, what was expected); the hidden tests are the calls whose result the
bug changes (FAIL_TO_PASS; the issue shows one or two of them, never all where there are several,
so special-casing the shown inputs fails) beside the visible tests of every helper (PASS_TO_PASS); the
reference fix is the correct helper. Which calls fail is found by running both versions of the
module here, on the host: it is the catalogue's own trusted code, never the policy's.

The split is a function of the task's parameters: the combinations (family, bug kind) in
`HELD_OUT` are the eval split and every other one the train split, so success on eval is a
bug kind fixed in a family where training never saw it. A task's id is a stable hash of its
parameters (the canonical string). `make_generated` draws only the `n` tasks asked for; the
test ids are computed (every test is a plain function, as pytest collects it).

The payload has the very shape of a built-in task's (`tasks.builtin_records`), so the same
environment, grader (sandbox, hidden tests reset at grading, runner canaries) and oracle serve
it; `payload["generated"]` only records the parameters, for reading and for the oracle's words.
"""
from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import asdict, dataclass, fields
from string import Template as Substitution
from typing import Any

from rlyard.envs.code.gen_catalogue import HELD_OUT, KINDS, MODULES, PACKAGES, TEMPLATES, Template
from rlyard.envs.code.payload import RUNNER, RUNNER_PATH, payload, runner_command, trusted_test_paths
from rlyard.envs.code.repo import make_patch

GENERATED = "generated"  # the reserved env.options.source value (a file of that name: pass ./generated)
BY_KEY = {t.key: t for t in TEMPLATES}
COMBOS = sorted({(t.family, kind) for t in TEMPLATES for kind in t.bugs})
BY_FAMILY = {family: [t for t in TEMPLATES if t.family == family] for family, _ in COMBOS}
VISIBLE_PER_HELPER = 2  # visible (PASS_TO_PASS) tests per helper
MAX_TRIES = 200  # draws per task asked for before the space is called exhausted


def split_of_combo(family: str, kind: str) -> str:
    return "eval" if (family, kind) in HELD_OUT else "train"


@dataclass(frozen=True)
class Params:
    """Everything that decides a generated task; its canonical JSON is the task's identity."""

    template: str  # catalogue key of the buggy helper
    kind: str  # bug kind
    names: tuple[tuple[str, str], ...]  # (placeholder, name) for the buggy helper, "f" included
    others: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # the correct helpers beside it: (key, names)
    package: str  # "" for a module at the top level
    module: str
    shown_calls: tuple[int, ...]  # indices into the template's calls that the issue shows (of those the bug changes)
    style: int  # which statement wording
    show_import: bool

    @property
    def family(self) -> str:
        return self.template.split(".")[0]

    def canonical(self) -> str:
        return json.dumps([getattr(self, f.name) for f in fields(self)])  # tuples as lists, in field order

    def task_id(self) -> str:
        digest = hashlib.sha256(f"rlyard/code-generated/{self.canonical()}".encode()).hexdigest()[:10]
        return f"gen-{self.template.replace('.', '-')}-{self.kind}-{digest}"


def render(template: Template, names: dict[str, str], kind: str | None = None) -> str:
    """The helper's source under `names`, with the bug of `kind` injected (None: correct)."""
    source = template.source
    if kind is not None:
        good, bad = template.bugs[kind]
        if source.count(good) != 1:
            raise ValueError(f"{template.key}/{kind}: the correct fragment must occur once, found {source.count(good)}")
        source = source.replace(good, bad)
    return Substitution(source).substitute(names)


def module(source: str) -> dict[str, Any]:
    """The namespace of a module of `source`, run here: the catalogue's code, never the policy's."""
    namespace: dict[str, Any] = {"__name__": "generated"}
    exec(compile(source, "<generated>", "exec"), namespace)
    return namespace


def outcome(source: str | dict[str, Any], fname: str, args: str) -> tuple[bool, str]:
    """(True, repr of the result) or (False, 'ExcType: message') of `fname(args)` in a module of
    `source` (or an already run module's namespace)."""
    namespace = module(source) if isinstance(source, str) else source
    try:
        return True, repr(eval(f"{fname}({args})", namespace))
    except Exception as e:  # the buggy version may raise: that is the symptom
        return False, f"{type(e).__name__}: {e}"


def draw_names(rng: random.Random, template: Template, taken: set[str]) -> tuple[tuple[str, str], ...] | None:
    fname = rng.choice([n for n in template.names if n not in taken] or [""])
    if not fname:
        return None
    return (("f", fname), *sorted((key, rng.choice(choices)) for key, choices in template.params.items()))


def draw(rng: random.Random, template: Template, kind: str) -> Params | None:
    """One task's parameters with `template`'s bug of `kind`; None when the draw cannot work."""
    family = template.family
    names = draw_names(rng, template, set())
    fails = [i for i, args in enumerate(template.calls) if differs(template, kind, dict(names), args)]
    if not fails:
        raise ValueError(f"{template.key}/{kind}: no call shows the bug")
    # the issue shows one or two of the calls the bug changes, never all of them where there are
    # several: the hidden tests hold every one, so special-casing the shown inputs does not pass
    picked = tuple(sorted(rng.sample(fails, max(1, min(len(fails) - 1, rng.choice((1, 1, 2)))))))
    others, taken = [], {dict(names)["f"]}
    for other in rng.sample([t for t in BY_FAMILY[family] if t is not template], rng.choice((1, 2, 2, 3))):
        other_names = draw_names(rng, other, taken)
        if other_names is None:
            return None
        taken.add(dict(other_names)["f"])
        others.append((other.key, other_names))
    package = rng.choice(PACKAGES) if rng.random() < 0.7 else ""
    return Params(template.key, kind, names, tuple(others), package, rng.choice(MODULES[family]), picked,
                  rng.randrange(len(STYLES)), rng.random() < 0.75)


_DIFFERS: dict[tuple, bool] = {}


def differs(template: Template, kind: str, names: dict[str, str], args: str) -> bool:
    """Whether the bug changes this call's result (names do not change behaviour: cached without them)."""
    key = (template.key, kind, args)
    if key not in _DIFFERS:
        plain = {k: v[0] for k, v in template.params.items()} | {"f": template.names[0]}
        fname = plain["f"]
        _DIFFERS[key] = outcome(render(template, plain), fname, args) != outcome(render(template, plain, kind), fname, args)
    return _DIFFERS[key]


def draw_params(split: str, n: int, seed: int) -> list[Params]:
    """`n` distinct tasks' parameters of `split`, in a seeded order (the same for the same seed).

    Round by round, each (template, kind) unit of the split gives one task, in a seeded order, so
    any first n tasks hold the units evenly (n = 63 on the held-out side: 3 of each of its 21).
    Drawn by (family, kind) pair instead, the one template of a pair that has one got as many
    tasks as the four of another together, and a single template could decide a quarter of a
    held-out score."""
    units = [(t, kind) for t in TEMPLATES for kind in t.bugs if split_of_combo(t.family, kind) == split]
    rng = random.Random(f"rlyard-code-generated|{split}|{seed}")
    out: dict[str, Params] = {}
    round_left: list[tuple[Template, str]] = []
    tries = 0
    while len(out) < n:
        if not round_left:
            round_left = rng.sample(units, len(units))
        tries += 1
        if tries > MAX_TRIES * max(n, 1):
            raise ValueError(f"code source=generated: only {len(out)} distinct {split} tasks found, {n} asked")
        params = draw(rng, *round_left[-1])
        if params is not None and params.task_id() not in out:
            out[params.task_id()] = params
            round_left.pop()
    return list(out.values())


STYLES = (
    "`{f}` returns the wrong result\n\n```python\n>>> from {imp} import {f}\n>>> {call}\n{got}\n```\n\nExpected `{want}`.",
    "Calling `{call}` gives `{got}`, but it should give `{want}`.{where}",
    "{call} returns {got}; I expected {want}.{where}",
    "Wrong result from {f}\n\n{where_line}`{call}` should be `{want}`, it is `{got}`.",
)
RAISES = (
    "`{f}` raises on valid input\n\n```python\n>>> from {imp} import {f}\n>>> {call}\n{got}\n```\n\nExpected `{want}`.",
    "Calling `{call}` raises `{got}`; it should return `{want}`.{where}",
    "{call} fails with {got}; I expected {want}.{where}",
    "Crash in {f}\n\n{where_line}`{call}` should be `{want}`, but it raises `{got}`.",
)


def statement(p: Params, imp: str, examples: list[tuple[str, bool, str, str]]) -> str:
    """The issue: the first failing call's symptom (a second one may follow). Never the fix."""
    fname = dict(p.names)["f"]
    call, ok, got, want = examples[0]
    where = f" (`from {imp} import {fname}`)" if p.show_import else ""
    where_line = f"In `{imp}`: " if p.show_import else ""
    text = (STYLES if ok else RAISES)[p.style].format(f=fname, imp=imp, call=call, got=got, want=want, where=where,
                                                      where_line=where_line)
    for call, ok, got, want in examples[1:]:
        text += f"\n\nAlso `{call}` {'gives' if ok else 'raises'} `{got}` instead of `{want}`."
    return text


def test_file(imp: str, functions: list[str], cases: list[tuple[str, str, str]]) -> str:
    """A test module of plain functions: (test name, call, expected repr) each."""
    head = f"from {imp} import {', '.join(sorted(set(functions)))}\n"
    return head + "".join(f"\n\ndef {name}():\n    assert {call} == {want}\n" for name, call, want in cases)


def build(p: Params) -> dict[str, Any]:
    """The task's payload (the shape of tasks.builtin_records'), with `generated` recording the parameters."""
    template, names = BY_KEY[p.template], dict(p.names)
    fname = names["f"]
    helpers = [(template, names, True)] + [(BY_KEY[key], dict(n), False) for key, n in p.others]
    order = sorted(helpers, key=lambda h: hashlib.sha256(f"{p.canonical()}|{h[1]['f']}".encode()).digest())
    header = f'"""{p.family.capitalize()} helpers."""\n'
    clean_src = header + "".join("\n\n" + render(t, n) for t, n, _ in order)
    buggy_src = header + "".join("\n\n" + render(t, n, p.kind if bug else None) for t, n, bug in order)
    clean_module, buggy_module = module(clean_src), module(buggy_src)
    imp = f"{p.package}.{p.module}" if p.package else p.module
    path = f"{p.package}/{p.module}.py" if p.package else f"{p.module}.py"
    visible, hidden_cases, examples = [], [], []  # (test name, call, expected repr); the symptoms
    for t, n, bug in helpers:
        shown = 0
        for i, args in enumerate(t.calls):
            call = f"{n['f']}({args})"
            ok, want = outcome(clean_module, n["f"], args)
            if not ok:
                raise ValueError(f"{p.template}: the correct {t.key} raises on {args}: {want}")
            bad = outcome(buggy_module, n["f"], args)
            if bug and bad != (True, want):  # a call the bug changes: a hidden FAIL_TO_PASS test
                hidden_cases.append((f"test_{n['f']}_{len(hidden_cases) + 1}", call, want))
                if i in p.shown_calls:
                    examples.append((call, *bad, want))
            elif shown < VISIBLE_PER_HELPER and bad == (True, want):
                shown += 1
                visible.append((f"test_{n['f']}_{shown}", call, want))
    visible_path, hidden_path = f"tests/test_{p.module}.py", f"tests/test_{fname}_issue.py"
    clean = {path: clean_src, visible_path: test_file(imp, [c[1].split("(")[0] for c in visible], visible)}
    if p.package:
        clean[f"{p.package}/__init__.py"] = ""
    hidden = {hidden_path: test_file(imp, [fname], hidden_cases)}
    base = {**clean, path: buggy_src}
    tests = sorted([visible_path, hidden_path])
    guarded = trusted_test_paths(tests, sorted(base))
    test_patch = runner_patch() + make_patch({hidden_path: None}, hidden)  # as make_patch of both: paths in order
    expected = [f"{visible_path}::{name}" for name, _, _ in visible] + [f"{hidden_path}::{name}" for name, _, _ in hidden_cases]
    expected = sorted(expected, key=lambda node: tests.index(node.split("::")[0]))
    record = payload(instance_id=p.task_id(), repo=f"generated-{p.family}", source={"files": base},
                     problem_statement=statement(p, imp, examples), test_patch=test_patch,
                     patch=make_patch({path: buggy_src}, {path: clean_src}), test_command=runner_command(tests),
                     timeout_s=60.0, base_files={q: base.get(q) for q in [*hidden, RUNNER_PATH, visible_path, *guarded]},
                     difficulty="easy", extra_reset=[visible_path, *guarded], expected_tests=expected,
                     graded_files={RUNNER_PATH: RUNNER, **hidden})
    return {**record, "generated": {**asdict(p), "family": p.family, "path": path, "function": fname,
                                    "split": split_of_combo(p.family, p.kind)}}


@functools.cache
def runner_patch() -> str:
    """The test patch's part that adds the runner: the same for every task (and the slow part to diff)."""
    return make_patch({RUNNER_PATH: None}, {RUNNER_PATH: RUNNER})


def generated_records(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """The payloads of `n` generated tasks of `split` (only those are built)."""
    return [build(p) for p in draw_params(split, n, seed)]


def catalogue_problems() -> list[str]:
    """What is wrong with the catalogue (empty when every bug shows in some call and every
    correct fragment occurs once): for the tests and for whoever adds a template."""
    problems = []
    for t in TEMPLATES:
        plain = {k: v[0] for k, v in t.params.items()} | {"f": t.names[0]}
        for kind, (good, _) in t.bugs.items():
            if kind not in KINDS:
                problems.append(f"{t.key}: unknown bug kind {kind!r}")
            elif t.source.count(good) != 1:
                problems.append(f"{t.key}/{kind}: correct fragment found {t.source.count(good)} times")
            elif not any(differs(t, kind, plain, args) for args in t.calls):
                problems.append(f"{t.key}/{kind}: no call shows the bug")
    return problems
