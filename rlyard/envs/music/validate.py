"""Prove the grader and the data agree, with the grader training uses.

Each prompt: its reference tune meets every constraint and scores at least `REFERENCE_MIN`
before novelty, and the same tune broken (a blank line after the header, which ends an ABC
tune) scores 0. The references are corpus tunes (so each prompt has a known good answer), and
a copy of the corpus must pay nothing: so the reference's novelty is checked apart, and must
be 0 (it is found in `builtin/corpus_ngrams.bin`): a reference proves both that real music
scores well and that the same music handed back as a copy does not.
Each tune of `builtin/corpus_sample.abc` passes the gate, is caught as a copy (novelty 0), and
broken scores 0. The bands
are checked over the sample (`corpus-bands`), since a 5-95 band leaves some tunes outside by
design: the mean share of features in band must reach `SAMPLE_INSIDE_MIN`, and at most
`OUTLIERS_MAX` of the tunes may have fewer than `CORPUS_INSIDE_MIN` of theirs in band.

Generated prompts (`source: generated`) have no stored reference: the oracle composes one
(`oracle.compose`, seeded by the task id), which is no corpus tune, so it must meet every
constraint and score at least `REFERENCE_MIN` *after* novelty, and broken score 0.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from rlyard.envs.checks import check_tasks
from rlyard.envs.music.corpus import SAMPLE_PATH, split_tunes
from rlyard.envs.music.oracle import compose
from rlyard.envs.music.tasks import DEFAULTS, load_rows, make_tasks
from rlyard.envs.music.verify import grade
from rlyard.types import Task

REFERENCE_MIN = 0.6
CORPUS_INSIDE_MIN = 0.6
SAMPLE_INSIDE_MIN = 0.85
OUTLIERS_MAX = 0.1
GENERATED_N = 300  # generated prompts validated when no n is given (the set is unbounded)


@dataclass
class Check:
    task_id: str
    base_reward: float | None  # the broken tune (expect 0)
    fixed_reward: float | None  # the reference tune before novelty (expect >= REFERENCE_MIN, every constraint met)
    error: str = ""
    seconds: float = 0.0
    inside: float | None = None  # corpus tunes: the share of features in band

    @property
    def ok(self) -> bool:
        return not self.error


def broken(tune: str) -> str:
    """The tune with a blank line after its K: line, so it ends before its first note."""
    head, _, body = tune.partition("\nK:")
    key, _, rest = body.partition("\n")
    return f"{head}\nK:{key}\n\n{rest}"


def check_prompt(task: Task, reference: str | None) -> Check:
    started = time.perf_counter()
    if not reference:
        return Check(task.id, None, None, "the row has no reference tune to validate", 0.0)
    constraints = task.payload["constraints"]
    good, bad = grade(f"```abc\n{reference}\n```", constraints), grade(broken(reference), constraints)
    errors = []
    if good.infra_error or bad.infra_error:
        errors.append(f"grader: {good.info.get('error') or bad.info.get('error')}")
    elif good.info.get("reject"):
        errors.append(f"the reference is rejected: {good.info['reject']}: {good.info['detail']}")
    else:
        if good.info["unmet"]:
            errors.append(f"the reference misses constraints: {good.info['unmet']}")
        before = good.info["reward_before_novelty"]
        if before < REFERENCE_MIN:
            errors.append(f"the reference scores {before:.3f} < {REFERENCE_MIN} before novelty: {good.components}")
        if good.value != 0.0:
            errors.append(f"the reference, a corpus tune, is not caught as a copy: novelty {good.components['novelty']:.3f} "
                          f"(copied {good.components['copied']:.2f}, run {good.info['copied_run_bars']} bars)")
    if bad.value != 0.0:
        errors.append(f"the broken reference scores {bad.value:.3f}, expected 0")
    fixed = good.info.get("reward_before_novelty", good.value)
    return Check(task.id, bad.value, round(fixed, 4), "\n".join(errors), time.perf_counter() - started)


def check_composed(task: Task) -> Check:
    """A generated prompt: the oracle's tune meets every constraint and scores in band, broken it scores 0."""
    started, constraints = time.perf_counter(), task.payload["constraints"]
    try:
        tune = compose(constraints, random.Random(task.id))
    except ValueError as error:
        return Check(task.id, None, None, f"the oracle cannot compose for it: {error}", time.perf_counter() - started)
    good, bad = grade(f"```abc\n{tune}\n```", constraints), grade(broken(tune), constraints)
    errors = []
    if good.infra_error or bad.infra_error:
        errors.append(f"grader: {good.info.get('error') or bad.info.get('error')}")
    elif good.info.get("reject"):
        errors.append(f"the oracle's tune is rejected: {good.info['reject']}: {good.info['detail']}\n{tune}")
    else:
        if good.info["unmet"]:
            errors.append(f"the oracle's tune misses constraints: {good.info['unmet']}\n{tune}")
        if good.value < REFERENCE_MIN:
            errors.append(f"the oracle's tune scores {good.value:.3f} < {REFERENCE_MIN}: {good.components}\n{tune}")
    if bad.value != 0.0:
        errors.append(f"the broken tune scores {bad.value:.3f}, expected 0")
    return Check(task.id, bad.value, round(good.value, 4), "\n".join(errors), time.perf_counter() - started)


def check_corpus_tune(task: Task) -> Check:
    started, tune = time.perf_counter(), task.payload["tune"]
    good, bad = grade(tune, {}), grade(broken(tune), {})
    errors = []
    if good.info.get("reject") or good.infra_error:
        errors.append(f"the corpus tune is rejected: {good.info.get('reject') or good.info.get('error')}: {good.info.get('detail')}")
    elif good.components["novelty"] != 0.0:
        errors.append(f"the corpus tune is not caught as a copy: novelty {good.components['novelty']:.3f}")
    if bad.value != 0.0:
        errors.append(f"the broken tune scores {bad.value:.3f}, expected 0")
    return Check(task.id, bad.value, round(good.info.get("reward_before_novelty", good.value), 4), "\n".join(errors),
                 time.perf_counter() - started, good.components.get("band_inside"))


def corpus_tasks() -> list[Task]:
    tunes = split_tunes(SAMPLE_PATH.read_text())
    return [Task(id=f"corpus-{i:02d}", prompt=[], env="music", payload={"tune": t}) for i, t in enumerate(tunes, 1)]


def validate(options: dict[str, Any] | None = None, task_ids: list[str] | None = None, jobs: int = 2,
             progress: Callable[[Check], None] | None = None, n: int | None = None) -> list[Check]:
    """Every prompt of both splits and every corpus sample tune (or only `task_ids`), `jobs` at a time;
    `n`: only the first n prompts. Generated prompts: the first n (default `GENERATED_N`), half of
    them eval and half train, each checked with the oracle's tune."""
    if (options or {}).get("source") == "generated":
        size = GENERATED_N if n is None else n
        tasks = (make_tasks("eval", math.ceil(size / 2), 0, **options) + make_tasks("train", size // 2, 0, **options))
        return check_tasks(tasks, task_ids, check_composed, jobs, progress)
    options = {**(options or {}), "eval_percent": 100}
    references = {row["id"]: row.get("reference") for row in load_rows({**DEFAULTS, **options}["source"])}
    tasks = make_tasks("eval", 10**9 if n is None else n, 0, **options) + corpus_tasks()

    def check(task: Task) -> Check:
        if task.id.startswith("corpus-") and "tune" in task.payload:
            return check_corpus_tune(task)
        return check_prompt(task, references.get(task.id))

    checks = check_tasks(tasks, task_ids, check, jobs, progress)
    corpus = [c.inside for c in checks if c.inside is not None]
    if corpus:
        mean, outliers = sum(corpus) / len(corpus), sum(c < CORPUS_INSIDE_MIN for c in corpus) / len(corpus)
        errors = [f"the sample's mean share of features in band is {mean:.3f} < {SAMPLE_INSIDE_MIN}"] if mean < SAMPLE_INSIDE_MIN else []
        if outliers > OUTLIERS_MAX:
            errors.append(f"{outliers:.0%} of the tunes have under {CORPUS_INSIDE_MIN:.0%} of their features in band")
        error = "\n".join(errors)
        checks.append(Check("corpus-bands", None, round(mean, 4), error, 0.0))
    return checks
