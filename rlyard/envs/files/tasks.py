"""Fact-finding tasks: a generated tree of inventory files and one question about it.

The answer (a serial number) sits in one file among many; the agent has to search with its
tools (bash, grep, read_file ...) and `submit` it. Problems are split train / eval by a stable
hash, as in every generated family.
"""
from __future__ import annotations

import random
from typing import Any

from rlyard.envs.splits import merge_options
from rlyard.envs.splits import split_of as shared_split_of
from rlyard.types import Task

DEFAULTS: dict[str, Any] = {"sites": 3, "devices_per_site": 4, "tool_format": "hermes"}
KINDS = ["pump", "valve", "sensor", "motor", "fan", "relay", "switch", "meter", "heater", "drive"]
COLOURS = ["red", "blue", "green", "amber", "grey", "white", "black", "teal", "olive", "coral"]
SITES = ["north", "south", "east", "west", "harbour", "airport", "depot", "tower"]


def split_of(canonical: str) -> str:
    return shared_split_of("files", canonical)


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    opts = merge_options("files", split, n, options, DEFAULTS)
    sites, per_site = int(opts["sites"]), int(opts["devices_per_site"])
    if opts["tool_format"] not in ("hermes", "bash_block"):
        raise ValueError(f"files option tool_format must be 'hermes' or 'bash_block', got {opts['tool_format']!r}")
    if not 1 <= sites <= len(SITES) or not 1 <= per_site <= 20:
        raise ValueError(f"files options: sites must be 1..{len(SITES)} and devices_per_site 1..20, got {sites}, {per_site}")
    rng, tasks = random.Random(f"files|{split}|{seed}"), []
    while len(tasks) < n:
        files, devices = {}, []
        for site in rng.sample(SITES, sites):
            for k in range(per_site):
                name = f"{rng.choice(COLOURS)}-{rng.choice(KINDS)}-{rng.randint(10, 99)}"
                serial = f"SN-{rng.randint(100000, 999999)}"
                devices.append((name, serial))
                files[f"inventory/{site}/rack{k // 2 + 1}/device_{k + 1}.txt"] = f"name: {name}\nserial: {serial}\nsite: {site}\n"
        names = [d[0] for d in devices]
        unique = [d for d in devices if names.count(d[0]) == 1]
        name, serial = rng.choice(unique)
        canonical = f"{name}={serial}"
        if split_of(canonical) != split:
            continue
        question = (f"The folder inventory/ lists devices, one file each. What is the serial number of the device named "
                    f"{name}? Search the files with the tools, then submit the serial number (like SN-123456).")
        tasks.append(Task(id=f"files-{split}-{canonical}", prompt=[{"role": "user", "content": question}], env="files",
                          payload={"files": files, "answer": serial, "tool_format": opts["tool_format"]}, metadata={"split": split, "device": name}))
    return tasks
