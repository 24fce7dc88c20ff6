"""General tasks: one folder each (built-in, a folder of them given as `env.options.source`, or
`source: generated`: generate.py writes them, of the same shape, graded the same way).

    <task_id>/task.yaml              id, kind, statement, optional tools (parameterised SQL) and database
    <task_id>/workspace/             the files the agent starts with (CSV, JSON, Markdown)
    <task_id>/db.sql                 with tools: the script of the task's SQLite database (never in the workspace)
    <task_id>/verifier/rubric.yaml   the rubric (rlyard/envs/general/rubric.py); read only when grading
    <task_id>/verifier/reference.md  a reference answer (validate); reference_files/ for files it asks for

A Task carries the folder's path, never the rubric or the key: the policy's prompt is the
statement alone, and the grader reads the verifier files when it grades.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlyard.errors import ConfigError
from rlyard.envs.splits import merge_options, split_of
from rlyard.types import Task

BUILTIN = Path(__file__).resolve().parent / "builtin"
KINDS = ("sql_tool", "csv_compute", "json_report", "summarise", "policy_qa")
TASK_KEYS = {"id", "kind", "statement", "tools", "database"}
JUDGE_DEFAULTS: dict[str, Any] = {
    "base_url": None,  # an OpenAI-compatible .../v1; None: `rlyard serve` over the embedded model, started on demand
    "model": "embedded",
    "api_key_env": None,  # the NAME of the environment variable with the key, e.g. OPENAI_API_KEY
    "timeout_s": 120.0, "retries": 3, "backoff_s": 1.0, "concurrency": 4, "cache_dir": None, "max_tokens": 256,
    "api": None,  # "chat" | "completions"; None: chat, or completions for the local judge (docs/general.md)
}
DEFAULTS: dict[str, Any] = {
    "source": None,  # None = the built-in tasks; "generated" = generate.py's tasks; else a folder of task folders
    "eval_percent": 20,  # share of tasks (stable hash of the id) in the eval split; 100 = all (generated: held-out pairs)
    "generated": {},  # source: generated: storages, outputs, questions, rows (generate.GENERATED_DEFAULTS)
    "kind": None,  # keep only one kind
    "rules_only": False,  # grade the rule items alone (no judge at all)
    "judge": {},  # JUDGE_DEFAULTS overridden
    "length_penalty": None,  # {max_penalty, dead_zone, exponent, quantile}: for every task (a rubric's own wins)
    "tool_format": "hermes",
    "tool_output_chars": 4000,  # a task tool's answer is cut here
    "allow_weak_isolation": False,
}


def task_dirs(source: str | None) -> list[Path]:
    root = BUILTIN if source is None else Path(source)
    if not root.is_dir():
        raise ConfigError(f"env.options.source: {root} is not a folder of task folders")
    found = sorted(p for p in root.iterdir() if (p / "task.yaml").is_file())
    if not found:
        raise ConfigError(f"env.options.source: {root} holds no <task>/task.yaml")
    return found


def load_task_file(folder: Path) -> dict[str, Any]:
    """task.yaml, checked: the errors name the file and the field."""
    path = folder / "task.yaml"
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error})") from error
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: a task file is a mapping")
    unknown = sorted(set(spec) - TASK_KEYS)
    missing = sorted({"id", "kind", "statement"} - set(spec))
    if unknown or missing:
        raise ConfigError(f"{path}: " + "; ".join([f"unknown key(s) {unknown}"] * bool(unknown) + [f"missing {missing}"] * bool(missing)))
    if spec["kind"] not in KINDS:
        raise ConfigError(f"{path}: kind {spec['kind']!r} is not one of {list(KINDS)}")
    if str(spec["id"]) != folder.name:
        raise ConfigError(f"{path}: id {spec['id']!r} differs from its folder name {folder.name!r}")
    tools = spec.get("tools") or []
    for n, tool in enumerate(tools):
        if not isinstance(tool, dict) or not {"name", "description", "sql"} <= set(tool):
            raise ConfigError(f"{path}: tools[{n}] needs name, description and sql")
    if tools and not (folder / str(spec.get("database", ""))).is_file():
        raise ConfigError(f"{path}: tools need `database:`, an SQL script next to task.yaml")
    if not (folder / "verifier" / "rubric.yaml").is_file():
        raise ConfigError(f"{folder}: no verifier/rubric.yaml")
    return spec


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    opts = merge_options("general", split, n, options, DEFAULTS)
    unknown = sorted(set(opts["judge"] or {}) - set(JUDGE_DEFAULTS))
    if unknown:
        raise ConfigError(f"env.options.judge: unknown key(s) {unknown}; allowed: {sorted(JUDGE_DEFAULTS)}")
    if opts["kind"] not in (None, *KINDS):
        raise ConfigError(f"env.options.kind must be one of {list(KINDS)}, got {opts['kind']!r}")
    if not 0 <= int(opts["eval_percent"]) <= 100:
        raise ConfigError(f"env.options.eval_percent must be 0..100, got {opts['eval_percent']}")
    from rlyard.sandbox import require_sealed

    require_sealed(bool(opts["allow_weak_isolation"]), "the general family (its tasks hold rubrics and answer keys)")
    judge = {**JUDGE_DEFAULTS, **(opts["judge"] or {})}
    settings = {key: opts[key] for key in ("rules_only", "length_penalty", "tool_format", "tool_output_chars", "allow_weak_isolation")}
    if opts["source"] == "generated":
        from rlyard.envs.general.generate import make_generated

        return make_generated(split, n, seed, {**opts, "judge": judge}, {**settings, "judge": judge})
    tasks = []
    for folder in task_dirs(opts["source"]):
        spec = load_task_file(folder)
        if split_of("general", spec["id"], int(opts["eval_percent"])) != split or opts["kind"] not in (None, spec["kind"]):
            continue
        tasks.append(Task(
            id=spec["id"], prompt=[{"role": "user", "content": str(spec["statement"]).strip()}], env="general",
            payload={"dir": str(folder), "tools": spec.get("tools") or [], "database": spec.get("database"), "judge": judge,
                     **settings},
            metadata={"split": split, "kind": spec["kind"]}))
    return tasks[:n]
