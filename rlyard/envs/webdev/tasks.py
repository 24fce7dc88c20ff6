"""webdev tasks: one per spec folder (built-in, or `env.options.source`), split by a stable hash;
or, with `source: generated`, page specs drawn by generate.py (held out by combination).

A task folder holds `task.yaml` (category, difficulty, statement, checks: checks.py), a
`reference/` site that meets the statement (index.html and its CSS / JS) and `reference.png`,
the reference's screenshot reduced for SSIM (scripts/webdev/make_references.py makes it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlyard.envs.splits import merge_options, split_of
from rlyard.envs.webdev.checks import normalize_checks
from rlyard.envs.webdev.generate import make_generated
from rlyard.envs.webdev.render import chromium_path
from rlyard.sandbox import require_sealed
from rlyard.types import Task

BUILTIN = Path(__file__).resolve().parent / "builtin"
DIFFICULTIES = ("easy", "medium", "hard")
JUDGE_KEYS = {"base_url", "model", "api_key_env", "timeout_s", "retries", "backoff_s", "concurrency", "cache_dir", "rounds",
              "min_rounds", "max_ties", "max_width"}
DEFAULTS: dict[str, Any] = {
    "source": None,  # None = the built-in tasks; "generated": page specs (generate.py); else a folder of task folders
    "eval_percent": 25,  # share of tasks (stable hash of the id; generated: of the combination) in the eval split
    "category": None,  # keep only tasks of this category
    "difficulty": None,  # keep only "easy" | "medium" | "hard"
    "timeout_s": 10.0,  # a page must load and be measured within this, else it hung (0)
    "screenshot_dir": None,  # None: the run folder's screenshots/, else the temp dir (verify.screenshot_dir)
    "judge": None,  # a mapping for the group vision judge (judge.py); None: deterministic rewards only
    "tool_format": "hermes",
    "allow_weak_isolation": False,  # run without bubblewrap (the agent could then read the reference pages)
}
TASK = """{statement}

Write the site into dist/ (entry page dist/index.html)."""


def load_spec(folder: Path) -> dict[str, Any]:
    """One task folder's spec, checked; ValueError naming the file and the field."""
    path = folder / "task.yaml"
    if not path.is_file():
        raise ValueError(f"{folder}: no task.yaml")
    spec = yaml.safe_load(path.read_text())
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: not a mapping")
    for key in ("category", "statement"):
        if not isinstance(spec.get(key), str) or not spec[key].strip():
            raise ValueError(f"{path}: {key} must be a non-empty string")
    if spec.get("difficulty", "medium") not in DIFFICULTIES:
        raise ValueError(f"{path}: difficulty must be one of {list(DIFFICULTIES)}, got {spec['difficulty']!r}")
    checks = normalize_checks(spec.get("checks"), str(path))
    reference = folder / "reference.png"
    if any(c["kind"] == "visual" for c in checks) and not reference.is_file():
        raise ValueError(f"{path}: a visual check needs {reference} (scripts/webdev/make_references.py)")
    return {"id": folder.name, "category": spec["category"], "difficulty": spec.get("difficulty", "medium"),
            "statement": spec["statement"].strip(), "checks": checks,
            "reference": str(reference) if reference.is_file() else None, "site": str(folder / "reference")}


def load_specs(source: str | None) -> list[dict[str, Any]]:
    root = BUILTIN if source is None else Path(source)
    if not root.is_dir():
        raise ValueError(f"webdev option source: {root} is not a folder of task folders")
    specs = [load_spec(folder) for folder in sorted(root.iterdir()) if folder.is_dir() and not folder.name.startswith(("_", "."))]
    if not specs:
        raise ValueError(f"webdev: no task folders in {root}")
    return specs


def check_judge(judge: Any) -> dict[str, Any] | None:
    if judge is None:
        return None
    if not isinstance(judge, dict) or not judge.get("model"):
        raise ValueError(f"webdev option judge must be a mapping with at least model (and base_url), got {judge!r}")
    unknown = sorted(set(judge) - JUDGE_KEYS)
    if unknown:
        raise ValueError(f"webdev option judge: unknown key(s) {unknown}; allowed: {sorted(JUDGE_KEYS)}")
    return dict(judge)


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    opts = merge_options("webdev", split, n, options, DEFAULTS)
    if opts["difficulty"] not in (None, *DIFFICULTIES):
        raise ValueError(f"webdev option difficulty must be one of {list(DIFFICULTIES)}, got {opts['difficulty']!r}")
    if not 0 <= int(opts["eval_percent"]) <= 100:
        raise ValueError(f"webdev option eval_percent must be 0..100, got {opts['eval_percent']}")
    if opts["tool_format"] not in ("hermes", "bash_block"):
        raise ValueError(f"webdev option tool_format must be 'hermes' or 'bash_block', got {opts['tool_format']!r}")
    chromium_path()  # no browser: say so now, not at the first graded page
    require_sealed(bool(opts["allow_weak_isolation"]), "the webdev family (its tasks hold reference pages)")
    judge = check_judge(opts["judge"])
    settings = {key: opts[key] for key in ("timeout_s", "screenshot_dir", "tool_format", "allow_weak_isolation")}
    if opts["source"] == "generated":
        if opts["category"] not in (None, "generated") or opts["difficulty"] not in (None, "easy"):
            return []  # every generated task is category "generated", difficulty "easy"
        return make_generated(split, n, seed, opts, settings, judge, TASK)
    chosen = [s for s in load_specs(opts["source"]) if split_of("webdev", s["id"], int(opts["eval_percent"])) == split
              and opts["category"] in (None, s["category"]) and opts["difficulty"] in (None, s["difficulty"])]
    return [Task(id=s["id"], prompt=[{"role": "user", "content": TASK.format(statement=s["statement"])}], env="webdev",
                 payload={**{k: s[k] for k in ("statement", "checks", "reference", "site")}, **settings, "judge": judge},
                 metadata={"split": split, "category": s["category"], "difficulty": s["difficulty"]})
            for s in chosen[:n]]
