"""The reference site as an agent would send it, in the task's tool format: the files written
into dist/ (write_file calls, or one bash block of heredocs), then submit. `rlyard collect
webdev` and validate play it through the episode's own tools.

A generated task's page (its payload holds the `spec`) is written in a markup drawn from `rng`
(template.variant: class names, colour notation, the CSS inline or in a file, a comment naming
each section) that renders to the reference's pixels, after one line naming the sections in the
brief's order (`plan`); without `rng` it is the reference itself. A built-in task's
site is sent as stored, its files in an order drawn from `rng`.
"""
from __future__ import annotations

import random
from pathlib import Path

from rlyard.agent.replies import bash_reply, hermes_reply, heredoc_delimiter, say
from rlyard.envs.webdev import template
from rlyard.types import Reward, Task

WRITE = ["I'll write the page into dist/.", "Here is the site, written to dist/index.html.", "Writing the page now.",
         "The page has the sections of the brief, in order.", ""]
SUBMIT = ["The page is written. Submitting.", "Done: the site is in dist/.", "Submitting the site.", ""]


def site_files(task: Task, rng: random.Random | None = None) -> dict[str, str]:
    """{path under dist/: text} of the task's reference site (a generated task's in a drawn markup)."""
    spec = task.payload.get("spec")
    if spec is not None:
        return template.page(spec, template.variant(rng) if rng is not None else None)
    root = Path(task.payload["site"])
    if not (root / "index.html").is_file():
        raise ValueError(f"webdev task {task.id} has no reference site ({root}/index.html)")
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def plan(spec: dict) -> str:
    """A generated page's sections named in the brief's order, before the page: one rule a small
    model can copy. Without it the SFT policy at b0acbd6 wrote a section the brief did not ask for
    in 5 of the 6 held-out pages that passed every DOM check and still scored 0 (visual under the floor)."""
    return "Sections: " + ", ".join(["header", *spec["sections"], "footer"]) + "."


def heredoc(name: str, text: str) -> str:
    end = heredoc_delimiter(text)
    return f"cat > dist/{name} <<'{end}'\n{text.rstrip(chr(10))}\n{end}"


def oracle(task: Task, rng: random.Random | None = None) -> list[str]:
    """Two replies: write every file, then submit."""
    files = site_files(task, rng)
    order = list(files)
    if rng is not None:  # the entry page first or last: either way the site is whole at submit
        rng.shuffle(order)
    pick = rng or random.Random(0)
    write, done = say(pick, WRITE) if rng is not None else "", say(pick, SUBMIT) if rng is not None else ""
    spec = task.payload.get("spec")
    if spec is not None and rng is not None:
        write = plan(spec)
    if task.payload.get("tool_format") == "bash_block":
        return [bash_reply(write, "\n".join(heredoc(name, files[name]) for name in order)), bash_reply(done, "submit done")]
    calls = [("write_file", {"path": f"dist/{name}", "content": files[name]}) for name in order]
    return [hermes_reply(write, calls), hermes_reply(done, [("submit", {"answer": "done"})])]


def play_oracle(task: Task) -> Reward:
    """One episode that plays `oracle` through the environment's own tools, graded by `score`; its
    markup (file order, a generated page's variant) drawn from the task's id, so validate proves a variant too."""
    from rlyard.envs.webdev.env import WebdevEnv

    from rlyard.envs.checks import play_replies

    return play_replies(WebdevEnv(), task, oracle(task, random.Random(f"rlyard-webdev-validate|{task.id}")))
