"""The files oracle: replies that solve a task through the env's own tools, varied by a seeded RNG.

It reads the answer's location from the task's payload (the generated tree) and writes the
replies an agent that searched would send: find the device, read its file, (hops 2) look its
team up, submit. Which tools, in which order, with which words is drawn from `rng`: grep
through the `grep` tool or `bash`, `read_file` or `cat`, a listing first, or a wrong first guess
that the next reply recovers from. Every plan searches before it reads: a demonstration that
opens the right file out of nowhere would teach guessing. Every plan takes at most 4 turns
(configs/files.yaml's `agent.max_turns`), and no command prints anything that changes between
runs (listings are sorted), so an episode replays to the same tool messages.
"""
from __future__ import annotations

import random

from rlyard.agent.replies import bash_reply, hermes_reply, say, shell_quote
from rlyard.types import Task


class Writer:
    """Turns one step of a plan into a reply in the task's tool format, choosing the tool."""

    def __init__(self, rng: random.Random, fmt: str):
        self.rng, self.fmt = rng, fmt

    def _reply(self, thought: str, tool: tuple[str, dict] | None, command: str) -> str:
        """The `tool` call when the format has it and the coin says so, else the `command` in bash."""
        if self.fmt == "bash_block":
            return bash_reply(thought, command)
        if tool is not None and self.rng.random() < 0.6:
            return hermes_reply(thought, [tool])
        return hermes_reply(thought, [("bash", {"command": command})])

    def find(self, thought: str, pattern: str, root: str) -> str:
        args = {"pattern": pattern, "path": root} if root != "." or self.rng.random() < 0.5 else {"pattern": pattern}
        return self._reply(thought, ("grep", args), f"grep -rn {shell_quote(pattern)} {root}")

    def find_context(self, thought: str, pattern: str, root: str, after: int) -> str:
        """grep with the lines after each match (bash only: the grep tool prints matches alone)."""
        return self._reply(thought, None, f"grep -rn -A{after} {shell_quote(pattern)} {root}")

    def read(self, thought: str, path: str) -> str:
        return self._reply(thought, ("read_file", {"path": path}), f"cat {path}")

    def listing(self, thought: str, root: str) -> str:
        command = self.rng.choice([f"find {root} -type f | sort", f"ls -R {root}"])
        return self._reply(thought, ("glob", {"pattern": f"{root}/**/*.txt"}), command)

    def submit(self, thought: str, answer: str) -> str:
        if self.fmt == "bash_block":
            return bash_reply(thought, f"submit {answer}")
        return hermes_reply(thought, [("submit", {"answer": answer})])


FIND = ["I'll search the files for the device named {device}.", "Let me find which file mentions {device}.",
        "First I need the file of {device}; a search for its name will find it.", "Searching for {device}.", ""]
READ = ["The match is in {path}. Let me read that file.", "{device} is described in {path}; I'll open it.",
        "Found it in {path}. Reading the whole file:", "Let me look at {path}.", ""]
SERIAL = ["The serial number of {device} is {answer}.", "{path} gives the serial: {answer}. Submitting it.",
          "Found it: {device} has serial {answer}.", ""]
TEAM = ["{device} is maintained by team {team}. Now I'll look that team up in teams/{team}.txt.",
        "The device's team is {team}; its lead is in teams/{team}.txt.", "Team {team}. Next: the team file.",
        "Now the second lookup: the file of team {team}.", ""]
LEAD = ["Team {team} is led by {lead}, employee id {answer}.", "The lead of {team} is {lead} ({answer}). Submitting.",
        "{lead} leads team {team}; the employee id is {answer}.", ""]


def oracle(task: Task, rng: random.Random) -> list[str]:
    """The replies that solve `task` (hops 1 or 2), one plan drawn from `rng`."""
    files = task.payload["files"]
    device = task.metadata["device"]
    path = next(p for p in sorted(files) if files[p].startswith(f"name: {device}\n"))
    w = Writer(rng, task.payload.get("tool_format", "hermes"))
    facts = {"device": device, "path": path, "answer": task.payload["answer"]}
    if not any(p.startswith("teams/") for p in files):
        return one_hop(w, rng, files, facts)
    team = next(line.split(": ", 1)[1] for line in files[path].splitlines() if line.startswith("team: "))
    lead = next(line.split(": ", 1)[1] for line in files[f"teams/{team}.txt"].splitlines() if line.startswith("lead: "))
    return two_hops(w, rng, {**facts, "team": team, "lead": lead})


def one_hop(w: Writer, rng: random.Random, files: dict[str, str], f: dict[str, str]) -> list[str]:
    device, path, answer = f["device"], f["path"], f["answer"]
    plan = rng.randrange(4)
    if plan == 0:  # search, read, submit
        return [w.find(say(rng, FIND, **f), device, rng.choice(["inventory", "."])),
                w.read(say(rng, READ, **f), path), w.submit(say(rng, SERIAL, **f), answer)]
    if plan == 1:  # one search that shows the next line (the serial), submit
        return [w.find_context(say(rng, ["I'll grep for {device} and show the line after it, which should be the serial.",
                                         "A search for the name with one line of context should show the serial.", ""], **f),
                               f"name: {device}", "inventory", 1),
                w.submit(say(rng, SERIAL, **f), answer)]
    if plan == 2:  # look at the tree, then search and read
        return [w.listing(say(rng, ["Let me see what the inventory folder holds.", "First, a list of the files.", ""], **f),
                          "inventory"),
                w.find(say(rng, ["There are many device files; searching for {device} is quicker than reading them all.",
                                 *FIND], **f), device, "inventory"),
                w.read(say(rng, READ, **f), path), w.submit(say(rng, SERIAL, **f), answer)]
    other = rng.choice([p for p in sorted(files) if p.startswith("inventory/") and p != path])
    other_name = files[other].splitlines()[0].split(": ", 1)[1]
    return [w.read(say(rng, ["Let me read one device file to see how they are written.",
                             "I'll start with {other}.", ""], other=other), other),
            w.find(say(rng, ["That file is {other_name}, not {device}. I'll search for {device} instead.",
                             "Wrong device ({other_name}). Searching for the name instead."], other_name=other_name, **f),
                   device, "inventory"),
            w.read(say(rng, READ, **f), path), w.submit(say(rng, SERIAL, **f), answer)]


def two_hops(w: Writer, rng: random.Random, f: dict[str, str]) -> list[str]:
    device, path, team, answer = f["device"], f["path"], f["team"], f["answer"]
    team_file = f"teams/{team}.txt"
    context = ["The device file should name its team; I'll grep for {device} with the lines after the match.",
               "First hop: find {device} and its team.", ""]
    plan = rng.randrange(5)
    if plan == 0:  # search, read the device, read the team, submit
        return [w.find(say(rng, FIND, **f), device, "inventory"), w.read(say(rng, READ, **f), path),
                w.read(say(rng, TEAM, **f), team_file), w.submit(say(rng, LEAD, **f), answer)]
    if plan == 1:  # one search with context shows the team
        return [w.find_context(say(rng, context, **f), f"name: {device}", "inventory", 3),
                w.read(say(rng, TEAM, **f), team_file), w.submit(say(rng, LEAD, **f), answer)]
    if plan == 2:  # read the device, then search the teams for its team
        return [w.find(say(rng, FIND, **f), device, "inventory"), w.read(say(rng, READ, **f), path),
                w.find_context(say(rng, ["{device} belongs to team {team}. I'll grep teams/ for it with its lead's lines.",
                                         "Now find team {team} in teams/.", ""], **f), f"team: {team}", "teams", 2),
                w.submit(say(rng, LEAD, **f), answer)]
    if plan == 3:  # a wrong first guess (the device is not in teams/), then the right order
        return [w.find(say(rng, ["Maybe the team files mention {device} directly; let me check.",
                                 "Let me try teams/ first."], **f), device, "teams"),
                w.find_context(say(rng, ["No match there: the team files do not list devices. I'll find the device first.",
                                         "Nothing in teams/. The device's own file must name the team."], **f),
                               f"name: {device}", "inventory", 3),
                w.read(say(rng, TEAM, **f), team_file), w.submit(say(rng, LEAD, **f), answer)]
    return [w.listing(say(rng, ["Let me see which teams there are.", "First, the list of team files.", ""], **f), "teams"),
            w.find_context(say(rng, ["Several teams. To know which one, I need the device's file: searching for {device}.",
                                     *context], **f), f"name: {device}", "inventory", 3),
            w.read(say(rng, TEAM, **f), team_file), w.submit(say(rng, LEAD, **f), answer)]
