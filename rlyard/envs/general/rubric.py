"""A task's rubric: weighted items checked by rules or by an LLM judge, and their arithmetic.

reward = sum(weight * score) / sum(weight) over the items that are not gates, where a rule item
scores 0 or 1 and a judge item its verdict in [0, 1]; an item passes at score >= 0.5. A gate is a
condition, not an achievement: it does not pay (a `not_contains` gate would otherwise pay an
empty answer), and failing it zeroes the reward. `binary` pays 1 only when every item passes. Items read the agent's files through
`read_inside`, which refuses links and anything outside the workspace: the grader runs on the
host, where a link `answer.md -> .../verifier/reference.md` would otherwise grade the key.

Rule items are written so that stuffing cannot pass them: `number` reads only the first number
after the first match of its label; `not_contains` gates refuse answers that hedge between
alternatives; `word_count` bounds the length. Every rule item reads the answer (and the files it
checks) in the folded form of normalize.py, and its own texts folded alike: no zero-width space,
homoglyph, fullwidth form or combining mark changes what a rule sees.

On a prose rubric (`prose: true`, the default for summarise tasks) rule items pay only for an
answer at all: their scores are multiplied by the judge items' weighted verdict (when a judge
grades) and by a coherence gate (`coherent`), so that a keyword salad holding every figure a
rule looks for earns nothing from the rules.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from rlyard.envs.general.normalize import fold, normalise
from rlyard.types import Reward

METHODS = ("regex", "contains", "not_contains", "number", "json_schema", "word_count", "file", "judge")
REQUIRED = {"regex": ("pattern",), "contains": ("text",), "not_contains": ("text",), "number": ("label", "value"),
            "json_schema": ("schema",), "word_count": (), "file": ("path",), "judge": ("criterion",)}
PASS = 0.5
MAX_READ_BYTES = 1 << 20
NUMBER = re.compile(r"[-+]?\$?-?\d(?:[\d,]*\d)?(?:\.\d+)?")
JSON_FENCE = re.compile(r"```json\s*(.*?)```", re.S | re.I)

# (criterion, key, answer) -> (score in [0, 1], reason); raises JudgeUnavailable when it cannot tell
JudgeFn = Callable[[str, str, str], tuple[float, str]]


class RubricError(ValueError):
    """A rubric file that cannot be graded with; the message names the file and the item."""


@dataclass(frozen=True)
class Item:
    id: str
    method: str
    weight: float = 1.0
    gate: bool = False
    dimension: str = "correctness"
    spec: dict[str, Any] = field(default_factory=dict)  # the method's own fields (pattern, value, schema ...)


@dataclass(frozen=True)
class LengthPenalty:
    max_penalty: float = 0.2  # subtracted at most, for a length >= anchor * (2 + dead_zone)
    dead_zone: float = 0.25  # lengths up to anchor * (1 + dead_zone) are not penalised
    exponent: float = 1.0
    quantile: float = 0.5  # the anchor: this quantile of the group's lengths (sampled tokens)


@dataclass(frozen=True)
class Rubric:
    items: tuple[Item, ...]
    binary: bool = False
    length_penalty: LengthPenalty | None = None
    source: str = ""
    prose: bool | None = None  # rule items pay only for an answer judged to be one; None: the task's kind decides

    @property
    def has_judge(self) -> bool:
        return any(item.method == "judge" for item in self.items)


def load_rubric(path: str | Path) -> Rubric:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise RubricError(f"{path}: cannot read the rubric ({error})") from error
    return parse_rubric(raw, str(path))


def parse_rubric(raw: Any, source: str = "<rubric>") -> Rubric:
    if not isinstance(raw, dict) or not isinstance(raw.get("items"), list) or not raw["items"]:
        raise RubricError(f"{source}: a rubric is a mapping with a non-empty `items` list")
    unknown = sorted(set(raw) - {"items", "binary", "length_penalty", "prose"})
    if unknown:
        raise RubricError(f"{source}: unknown rubric key(s) {unknown}; allowed: binary, items, length_penalty, prose")
    if raw.get("prose") is not None and not isinstance(raw["prose"], bool):
        raise RubricError(f"{source}: prose must be true or false, got {raw['prose']!r}")
    items, seen = [], set()
    for n, entry in enumerate(raw["items"]):
        label = entry.get("id", "?") if isinstance(entry, dict) else repr(entry)
        where = f"{source}: item {n} ({label})"
        items.append(_parse_item(entry, where))
        if items[-1].id in seen:
            raise RubricError(f"{where}: duplicate id")
        seen.add(items[-1].id)
    penalty = raw.get("length_penalty")
    if penalty is not None:
        try:
            penalty = LengthPenalty(**penalty)
        except TypeError as error:
            raise RubricError(f"{source}: length_penalty: {error}") from error
        if not (0 <= penalty.max_penalty <= 1 and penalty.dead_zone >= 0 and penalty.exponent > 0 and 0 <= penalty.quantile <= 1):
            raise RubricError(f"{source}: length_penalty needs 0 <= max_penalty <= 1, dead_zone >= 0, exponent > 0, "
                              f"0 <= quantile <= 1; got {penalty}")
    return Rubric(tuple(items), bool(raw.get("binary", False)), penalty, source, raw.get("prose"))


def _parse_item(entry: Any, where: str) -> Item:
    if not isinstance(entry, dict):
        raise RubricError(f"{where}: an item is a mapping")
    method = entry.get("method")
    if method not in METHODS:
        raise RubricError(f"{where}: method {method!r} is not one of {list(METHODS)}")
    missing = [key for key in ("id", *REQUIRED[method]) if key not in entry]
    if missing:
        raise RubricError(f"{where}: a {method} item needs {missing}")
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
        raise RubricError(f"{where}: weight must be a number > 0, got {weight!r}")
    spec = {k: v for k, v in entry.items() if k not in ("id", "method", "weight", "gate", "dimension")}
    if method in ("regex", "number"):
        try:
            re.compile(spec.get("pattern", spec.get("label", "")))
        except re.error as error:
            raise RubricError(f"{where}: bad regular expression: {error}") from error
    if method == "json_schema":
        from jsonschema import Draft202012Validator, SchemaError

        try:
            Draft202012Validator.check_schema(spec["schema"])
        except SchemaError as error:
            raise RubricError(f"{where}: invalid JSON schema: {error.message}") from error
    if method == "word_count" and "min" not in spec and "max" not in spec:
        raise RubricError(f"{where}: a word_count item needs min, max or both")
    return Item(str(entry["id"]), method, float(weight), bool(entry.get("gate", False)), str(entry.get("dimension", "correctness")), spec)


def read_inside(workspace: Path, relative: str) -> str | None:
    """A regular file of the workspace as text, or None: missing, a link anywhere on its path,
    outside the workspace, or too big. The episode is over when the grader reads, so nothing
    can swap the file between the check and the read."""
    relative_path = Path(relative)
    if relative_path.is_absolute() or ".." in relative_path.parts:
        return None
    current = Path(workspace).resolve()
    for part in relative_path.parts:
        current = current / part
        if current.is_symlink():
            return None
    try:
        if not current.is_file():
            return None
        with os.fdopen(os.open(current, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            data = f.read(MAX_READ_BYTES + 1)
    except OSError:
        return None
    return None if len(data) > MAX_READ_BYTES else data.decode("utf-8", errors="replace")


def _texts(spec: dict) -> list[str]:
    text = spec["text"]
    return [str(t) for t in text] if isinstance(text, list) else [str(text)]


def _fold(text: str, spec: dict, folded: bool = False) -> str:
    """`text` as a rule compares it: normalised (normalize.py; `folded`: it already is), and
    lower-cased unless the item is case-sensitive. Both the answer and the rule's own text go through it."""
    text = text if folded else fold(text)
    return text if spec.get("case_sensitive") else text.lower()


FUNCTION_WORDS = frozenset(
    "the a an of to in on at for by with from and or but as is are was were be been being it its this that these those "
    "which who whom whose what when where while than then there their they them he she his her we our you your i not no "
    "so if because after before during about over under into out up down all any each more most other some such only "
    "also can could will would may might must should has have had do does did".split())


def coherent(answer: str) -> tuple[bool, str]:
    """Whether an answer reads as sentences: at least 15% of its words are function words and it has
    a sentence end per 60 words. A keyword salad has neither; English prose has 25-45% (the
    built-in references: 28-44%). A heuristic gate for rules-only grading; the judge is the real test."""
    words = re.findall(r"[a-z']+", fold(answer).lower())
    if len(words) < 8:
        return True, f"{len(words)} words: too short to tell"
    share = sum(word in FUNCTION_WORDS for word in words) / len(words)
    ends = len(re.findall(r"[.!?:](?:\s|$)", answer))
    ok = share >= 0.15 and ends >= len(words) // 60
    return ok, f"{share:.0%} function words, {ends} sentence ends in {len(words)} words"


def first_number_after(label: str, answer: str) -> float | None:
    """The first number after the first match of `label`, on that line; None if there is none."""
    match = re.search(label, answer, re.I | re.M)
    if not match:
        return None
    rest = answer[match.end():].split("\n", 1)[0]
    found = NUMBER.search(rest)
    if not found:
        return None
    raw = found.group(0).replace("$", "").replace(",", "")
    try:
        return float(raw.replace("+-", "-").replace("--", ""))
    except ValueError:
        return None


def check_rule(item: Item, workspace: Path, answer: str, folded: bool = False) -> tuple[float, str]:
    """(score 0 or 1, why) of one rule item, on the folded answer (and folded files); `folded`:
    the caller folded the answer already (grade_rubric folds it once for every item)."""
    spec = item.spec
    answer = answer if folded else fold(answer)
    if item.method == "regex":
        flags = re.M | (0 if spec.get("case_sensitive") else re.I)
        hit = re.search(spec["pattern"], answer, flags)
        return float(bool(hit)), f"matched {hit.group(0)[:80]!r}" if hit else "no match"
    if item.method in ("contains", "not_contains"):
        seen = _fold(answer, spec, folded=True)
        present = [t for t in _texts(spec) if _fold(t, spec) in seen]
        if item.method == "contains":
            missing = [t for t in _texts(spec) if t not in present]
            return float(not missing), f"missing {missing}" if missing else "all present"
        return float(not present), f"present {present}" if present else "none present"
    if item.method == "number":
        value = first_number_after(spec["label"], answer)
        if value is None:
            return 0.0, f"no number after {spec['label']!r}"
        expected = float(spec["value"])
        tolerance = max(float(spec.get("tolerance", 1e-6)), float(spec.get("rel_tolerance", 0.0)) * abs(expected))
        return float(abs(value - expected) <= tolerance), f"read {value}, expected {expected} ± {tolerance:g}"
    if item.method == "json_schema":
        return _check_json(spec, workspace, answer)
    if item.method == "word_count":
        words = len(answer.split())
        ok = spec.get("min", 0) <= words <= spec.get("max", math.inf)
        return float(ok), f"{words} words (allowed {spec.get('min', 0)}..{spec.get('max', 'any')})"
    if item.method == "file":
        content = read_inside(workspace, spec["path"])
        content = None if content is None else fold(content)
        if content is None:
            return 0.0, f"{spec['path']} is missing (or a link, or outside the workspace)"
        if len(content.strip()) < int(spec.get("min_chars", 1)):
            return 0.0, f"{spec['path']} has {len(content.strip())} characters"
        if "contains" in spec:
            wanted = spec["contains"] if isinstance(spec["contains"], list) else [spec["contains"]]
            content = _fold(content, spec, folded=True)
            missing = [t for t in wanted if _fold(str(t), spec) not in content]
            if missing:
                return 0.0, f"{spec['path']} lacks {missing}"
        return 1.0, f"{spec['path']} present"
    raise ValueError(f"{item.method} is not a rule method")


def _check_json(spec: dict, workspace: Path, answer: str) -> tuple[float, str]:
    from jsonschema import Draft202012Validator

    source = spec.get("source", "answer")
    if source == "answer":
        fenced = JSON_FENCE.search(answer)
        text = fenced.group(1) if fenced else answer
    else:
        text = read_inside(workspace, source)
        if text is None:
            return 0.0, f"{source} is missing (or a link, or outside the workspace)"
        text = fold(text)
    try:
        document = json.loads(text)
    except ValueError as error:
        return 0.0, f"{source} is not JSON: {error}"
    except RecursionError:
        return 0.0, f"{source} is nested too deeply to read"
    try:
        errors = sorted(Draft202012Validator(spec["schema"]).iter_errors(document), key=lambda e: list(e.path))
    except RecursionError:
        return 0.0, f"{source} is nested too deeply to check"
    if errors:
        first = errors[0]
        return 0.0, f"{source}: {'/'.join(map(str, first.path)) or '(root)'}: {first.message[:200]}"
    return 1.0, f"{source} valid"


def grade_rubric(rubric: Rubric, workspace: Path, answer: str, judge: JudgeFn | None = None, rules_only: bool = False,
                 prose: bool = False) -> Reward:
    """The rubric's reward on this answer (and workspace). `rules_only` grades the rule items
    alone (validation, or no judge). A judge that raises propagates: the caller flags infra.
    `prose` (the rubric's own `prose` wins): the rule items' scores are multiplied by the judge
    items' weighted verdict and by the coherence gate (module docstring)."""
    items = [item for item in rubric.items if not (rules_only and item.method == "judge")]
    if not items:
        raise RubricError(f"{rubric.source}: no rule items to grade")
    seen = normalise(answer)
    scores, details = {}, {}
    for item in items:
        if item.method == "judge":
            if judge is None:
                raise RubricError(f"{rubric.source}: item {item.id} needs a judge")
            score, why = judge(item.spec["criterion"], str(item.spec.get("key", "")), answer)
            score = min(1.0, max(0.0, float(score)))
        else:
            score, why = check_rule(item, workspace, seen.text, folded=True)
        scores[item.id] = score
        details[item.id] = {"method": item.method, "weight": item.weight, "gate": item.gate, "dimension": item.dimension,
                            "score": score, "why": why}
    extra: dict[str, float] = {}
    coherence = None
    if rubric.prose if rubric.prose is not None else prose:
        judged = [item for item in items if item.method == "judge"]
        verdict = sum(i.weight * scores[i.id] for i in judged) / sum(i.weight for i in judged) if judged else 1.0
        ok, why = coherent(seen.text)
        factor = verdict * float(ok)
        for item in items:
            if item.method != "judge" and not item.gate:
                scores[item.id] *= factor
                details[item.id].update(score=scores[item.id], why=f"{details[item.id]['why']} (x {factor:.2f}: an answer at all)")
        extra = {"answer_factor": factor, "coherent": float(ok)}
        coherence = {"why": why, "judge_verdict": verdict, "factor": factor}
    passed = {item.id: scores[item.id] >= PASS for item in items}
    gate_failed = any(item.gate and not passed[item.id] for item in items)
    counted = [item for item in items if not item.gate] or items  # a gate is a condition, not an achievement
    weighted = sum(item.weight * scores[item.id] for item in counted) / sum(item.weight for item in counted)
    value = 0.0 if gate_failed else float(all(passed.values())) if rubric.binary else weighted
    components = {f"item/{key}": score for key, score in scores.items()}
    for dimension in sorted({item.dimension for item in items}):
        members = [item for item in items if item.dimension == dimension]
        components[f"dim/{dimension}"] = sum(i.weight * scores[i.id] for i in members) / sum(i.weight for i in members)
    components.update(weighted=weighted, gate_failed=float(gate_failed), all_passed=float(all(passed.values())),
                      format_characters=float(seen.format_characters > 0), **extra)
    info = {"rubric": details, "binary": rubric.binary}
    if coherence is not None:
        info["coherence"] = coherence
    if seen.format_characters:
        info["format_characters"] = f"{seen.format_characters} format characters (zero-width, bidi controls) removed before grading"
    return Reward(value, components, info)


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default, "linear")."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def length_penalties(lengths: list[float], penalty: LengthPenalty) -> list[float]:
    """Each member's penalty: anchor A = the group's `quantile` length; a length L is penalised by
    max_penalty * min(1, max(0, L / A - 1 - dead_zone)) ** exponent."""
    if not lengths:
        return []
    anchor = quantile(lengths, penalty.quantile)
    if anchor <= 0:
        return [0.0] * len(lengths)
    over = [min(1.0, max(0.0, length / anchor - 1.0 - penalty.dead_zone)) for length in lengths]
    return [penalty.max_penalty * o ** penalty.exponent if o > 0 else 0.0 for o in over]
