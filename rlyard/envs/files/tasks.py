"""Fact-finding tasks: a generated tree of inventory files and one question about it.

The answer (a serial number) sits in one file among many; the agent has to search with its
tools (bash, grep, read_file ...) and `submit` it. Problems are split train / eval by a stable
hash, as in every generated family.

With `hops: 2` the answer needs two dependent lookups: each device file also names the team
that maintains it, `teams/<team>.txt` gives each team's lead and the lead's employee id, and
the question asks for the employee id of the lead of one device's team. The device file does
not hold the answer and the team file does not name the device, so no single search answers
it: the second lookup needs what the first one found.
"""
from __future__ import annotations

import random
from typing import Any

from rlyard.envs.splits import merge_options
from rlyard.envs.splits import split_of as shared_split_of
from rlyard.types import Task

DEFAULTS: dict[str, Any] = {"sites": 3, "devices_per_site": 4, "tool_format": "hermes", "hops": 1}
KINDS = ["pump", "valve", "sensor", "motor", "fan", "relay", "switch", "meter", "heater", "drive"]
COLOURS = ["red", "blue", "green", "amber", "grey", "white", "black", "teal", "olive", "coral"]
SITES = ["north", "south", "east", "west", "harbour", "airport", "depot", "tower"]
TEAMS = ["falcon", "otter", "maple", "comet", "ember", "lynx", "cedar", "quartz", "willow", "orbit"]
LEADS = ["Ana Lopez", "Ben Okafor", "Chen Wei", "Dara Singh", "Eva Novak", "Farid Haddad", "Greta Olsen",
         "Hiro Tanaka", "Ines Costa", "Jonas Berg"]
TEAMS_PER_TASK = 4  # hops 2: teams in a tree (the device's team among distractors)


def split_of(canonical: str) -> str:
    return shared_split_of("files", canonical)


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    opts = merge_options("files", split, n, options, DEFAULTS)
    sites, per_site = int(opts["sites"]), int(opts["devices_per_site"])
    if opts["tool_format"] not in ("hermes", "bash_block"):
        raise ValueError(f"files option tool_format must be 'hermes' or 'bash_block', got {opts['tool_format']!r}")
    if not 1 <= sites <= len(SITES) or not 1 <= per_site <= 20:
        raise ValueError(f"files options: sites must be 1..{len(SITES)} and devices_per_site 1..20, got {sites}, {per_site}")
    hops = opts["hops"]
    if isinstance(hops, bool) or hops not in (1, 2):
        raise ValueError(f"files option hops must be 1 or 2, got {hops!r}")
    rng = random.Random(f"files|{split}|{seed}" if hops == 1 else f"files|{split}|{seed}|hops2")
    tasks: list[Task] = []
    seen: set[str] = set()
    while len(tasks) < n:
        files, devices = {}, []
        teams = rng.sample(TEAMS, TEAMS_PER_TASK) if hops == 2 else []
        for site in rng.sample(SITES, sites):
            for k in range(per_site):
                name = f"{rng.choice(COLOURS)}-{rng.choice(KINDS)}-{rng.randint(10, 99)}"
                serial = f"SN-{rng.randint(100000, 999999)}"
                team = rng.choice(teams) if hops == 2 else ""
                devices.append((name, serial, team))
                files[f"inventory/{site}/rack{k // 2 + 1}/device_{k + 1}.txt"] = (
                    f"name: {name}\nserial: {serial}\nsite: {site}\n" + (f"team: {team}\n" if team else ""))
        names = [d[0] for d in devices]
        unique = [d for d in devices if names.count(d[0]) == 1]
        name, serial, team = rng.choice(unique)
        if hops == 1:
            answer, canonical = serial, f"{name}={serial}"
            question = (f"The folder inventory/ lists devices, one file each. What is the serial number of the device named "
                        f"{name}? Search the files with the tools, then submit the serial number (like SN-123456).")
            metadata = {"split": split, "device": name}
        else:
            leads = dict(zip(teams, zip(rng.sample(LEADS, len(teams)), rng.sample(range(100000, 1000000), len(teams)))))
            for t, (lead, number) in leads.items():
                files[f"teams/{t}.txt"] = f"team: {t}\nlead: {lead}\nemployee_id: EMP-{number}\n"
            answer = f"EMP-{leads[team][1]}"
            canonical = f"{name}={serial}+{team}={answer}"
            question = (f"The folder inventory/ lists devices, one file each; the folder teams/ has one file per team. "
                        f"Which team maintains the device named {name}? Find that team's lead and submit the lead's "
                        f"employee id (like EMP-123456).")
            metadata = {"split": split, "device": name, "hops": 2, "team": team}
        if split_of(canonical) != split or canonical in seen:
            continue
        seen.add(canonical)
        tasks.append(Task(id=f"files-{split}-{canonical}", prompt=[{"role": "user", "content": question}], env="files",
                          payload={"files": files, "answer": answer, "tool_format": opts["tool_format"]}, metadata=metadata))
    return tasks
