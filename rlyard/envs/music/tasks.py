"""Music prompts: the built-in set or a file of yours, each row an id and its constraints.

The prompt text is written from the constraints (`constraints.describe`), so what is asked and
what is graded can never drift apart. A row's split is a stable hash of its id. `source:
generated` draws rows from `generate.py` instead (held out by key x meter pair), the same shape,
graded by the same `verify`. abc2midi is
looked up here, so a machine without it fails when the run starts, naming the package.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rlyard.envs.music.abc import TIMEOUT_S, require_abc2midi
from rlyard.envs.music.constraints import describe, validate_constraints
from rlyard.envs.music.corpus import BUILTIN
from rlyard.envs.music.generate import generated_rows
from rlyard.envs.splits import merge_options, split_of
from rlyard.types import Task

PROMPTS_PATH = BUILTIN / "prompts.jsonl"
DEFAULTS: dict[str, Any] = {
    "source": None,  # None = the built-in prompts; "generated" = generate.py's; else a .jsonl / .json / .yaml file of rows
    "eval_percent": 10,  # share of prompts (stable hash of the id; generated: of the key x meter pairs) in eval; 100 = all
    "constraint_weight": 0.5,  # reward = quality * (1 - w + w * share of constraints met)
    "timeout_s": TIMEOUT_S,  # abc2midi's wall-clock limit; a tune that runs past it scores 0
    "system_prompt": None,  # None: no system message
}
INTRO = "Compose a short folk tune in ABC notation (it will be played with abc2midi)."
OUTRO = "Reply with the whole tune, from its X: line to its last bar, in one ```abc fenced block."


def load_rows(source: str | Path | None = None) -> list[dict[str, Any]]:
    """Prompt rows of a .jsonl, .json (a list) or .yaml (a list) file; errors name the file and row."""
    path = Path(source) if source is not None else PROMPTS_PATH
    if not path.is_file():
        raise ValueError(f"music prompts: no file {path}")
    text = path.read_text()
    if path.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as error:
                    raise ValueError(f"{path}:{number}: not JSON ({error})") from None
    elif path.suffix in (".json", ".yaml", ".yml"):
        rows = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a list of prompt rows")
    else:
        raise ValueError(f"music prompts {path}: use a .jsonl, .json or .yaml file")
    seen: set[str] = set()
    for number, row in enumerate(rows, 1):
        where = f"{path} row {number}"
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
            raise ValueError(f"{where}: every row needs a string id")
        if row["id"] in seen:
            raise ValueError(f"{where}: duplicate id {row['id']!r}")
        seen.add(row["id"])
        validate_constraints(row.get("constraints"), f"{where} ({row['id']})")
        if "text" in row and not isinstance(row["text"], str):
            raise ValueError(f"{where}: text must be a string")
    return rows


def prompt_text(row: dict[str, Any]) -> str:
    """The row's own text if it has one (its constraints are still the ones graded), else one written from them."""
    lines = "\n".join(f"- {line}" for line in describe(row["constraints"]))
    return row["text"] if "text" in row else f"{INTRO}\n{lines}\n{OUTRO}"


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    opts = merge_options("music", split, n, options, DEFAULTS)
    if not 0 <= int(opts["eval_percent"]) <= 100:
        raise ValueError(f"music option eval_percent must be 0..100, got {opts['eval_percent']}")
    if not 0 <= float(opts["constraint_weight"]) <= 1:
        raise ValueError(f"music option constraint_weight must be in [0, 1], got {opts['constraint_weight']}")
    if float(opts["timeout_s"]) <= 0:
        raise ValueError(f"music option timeout_s must be > 0, got {opts['timeout_s']}")
    require_abc2midi()
    if opts["source"] == "generated":
        rows = generated_rows(split, n, seed, int(opts["eval_percent"]))
    else:
        rows = [r for r in load_rows(opts["source"]) if split_of("music", r["id"], int(opts["eval_percent"])) == split]
    system = [] if opts["system_prompt"] is None else [{"role": "system", "content": str(opts["system_prompt"])}]
    return [Task(id=r["id"], prompt=[*system, {"role": "user", "content": prompt_text(r)}], env="music",
                 payload={"constraints": r["constraints"], "constraint_weight": float(opts["constraint_weight"]),
                          "timeout_s": float(opts["timeout_s"])},
                 metadata={"split": split, "constraints": sorted(r["constraints"]),
                           **({"combination": r["combination"]} if "combination" in r else {})})
            for r in rows[:n]]
