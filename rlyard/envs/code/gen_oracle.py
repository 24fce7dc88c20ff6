"""The oracle of generated code tasks in the bash_block format: read the file, change the line, submit.

`oracle.py` plays every task (built-in, users' rows, generated) on the arm the env draws, with
the words and tool mixes of a general agent; this one plays a generated task the way a small
model can learn it, one fenced bash block per reply: it looks at the code (`cat` the module,
`cat -n`, or a `grep` for the function first), replaces the buggy text with a `python3` heredoc
(`str.replace` on the smallest text that occurs once) or a `sed -i` when the text needs no
escaping, sometimes calls the function to check, and sends `submit <summary>`. The replacement
comes from the reference fix (the buggy and the fixed module, compared line by line), never from
anything the policy could not see: the issue names the function and the symptom; the code is read
through the tools before it is changed. Every command prints the same thing on every run, so an
episode replays to the same tool messages.
"""
from __future__ import annotations

import difflib
import random
import re

from rlyard.agent.replies import bash_reply, heredoc_delimiter, say, shell_quote
from rlyard.envs.code.repo import apply_patch
from rlyard.types import Task

SED_SAFE = re.compile(r"[A-Za-z0-9_ (),:<>=!+\-\"%]*")  # means itself in a sed pattern and replacement, and in '...'

LOOK = ["The issue is about {f}; it is defined in {path}. Let me read it.", "Let me read {path}.",
        "I'll look at {f} in {path}.", "First, the code of {f}.", ""]
FIND = ["Where is {f} defined?", "Let me find {f}.", "I'll search for the definition of {f}.", ""]
# Every fix names the function and quotes its wrong line first: a small model that skips this
# step (the first code SFT policy, 96 demonstrations) copies a line of the module exactly, but of
# another helper, or the right one unchanged.
FIX = ["{f} uses `{old}`; it should be `{new}`.", "In {f}, `{old}` is wrong. Replacing it with `{new}`.",
       "The bug is in {f}: `{old}`. It should be `{new}`.", "{f} has `{old}`, which gives the result in the issue; fixing it to `{new}`."]
GUARD = ["{f} is missing the case from the issue before `{line}`; adding it.",
         "The case from the issue is not handled in {f}: it reaches `{line}`. Adding a guard.",
         "In {f}, `{line}` runs for the issue's input too; it needs a case before it."]
CHECK = ["Let me check the call from the issue.", "Checking the example from the issue.", ""]
DONE = ["", "The fix is in.", "Done."]
SUMMARY = ["fixed {f} in {path}", "fix {f}", "{f} now returns the expected result", "corrected {f}"]


def replacement(before: str, after: str) -> tuple[str, str] | None:
    """(old, new): one `str.replace` that turns `before` into `after`, old occurring exactly once;
    the shortest such text: the changed line without its indentation, or whole lines; None when
    the files differ in more than one place."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    changes = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(changes) != 1:
        return None
    _, i1, i2, j1, j2 = changes[0]
    if i2 - i1 == 1 and j2 - j1 == 1:
        old_line, new_line = a[i1].strip(), b[j1].strip()
        if old_line and before.count(old_line) == 1:
            return old_line, new_line
    for extra in range(4):  # whole lines (an insertion: the line after it), widened until they occur once
        lo = max(0, i1 - extra) if i2 > i1 else i1
        hi = min(len(a), i2 + extra + (0 if i2 > i1 else 1))
        old = "".join(a[lo:hi])
        new = "".join(a[lo:i1]) + "".join(b[j1:j2]) + "".join(a[i2:hi])
        if old and before.count(old) == 1 and before.replace(old, new) == after:
            return old.rstrip("\n"), new.rstrip("\n")
    return None


def python_replace(path: str, old: str, new: str) -> str:
    body = f"from pathlib import Path\np = Path({path!r})\np.write_text(p.read_text().replace({old!r}, {new!r}))\n"
    delimiter = heredoc_delimiter(body)
    return f"python3 - <<'{delimiter}'\n{body}{delimiter}"


def sed_replace(path: str, old: str, new: str) -> str | None:
    """`sed -i 's/old/new/' path` when neither text needs escaping (and no quote breaks the shell word)."""
    if not SED_SAFE.fullmatch(old + new):  # no newline, single quote, regex or replacement metacharacter
        return None
    return f"sed -i 's/{old}/{new}/' {path}"


def oracle(task: Task, rng: random.Random) -> list[str]:
    """The replies that fix a generated task, bash_block format (the env's bash arm)."""
    p, g = task.payload, task.payload["generated"]
    path, fname = g["path"], g["function"]
    before = p["source"]["files"][path]
    after = apply_patch({path: before}, p["patch"])[path]
    facts = {"f": fname, "path": path}
    replies = []
    look = rng.random()
    if look < 0.2:
        replies.append(bash_reply(say(rng, FIND, **facts), f"grep -rn {shell_quote('def ' + fname)} ."))
    replies.append(bash_reply(say(rng, LOOK, **facts), f"cat -n {path}" if 0.2 <= look < 0.35 else f"cat {path}"))
    found = replacement(before, after)
    if found is None:  # not one region: the whole fixed file (generated modules are small)
        delimiter = heredoc_delimiter(after)
        replies.append(bash_reply(say(rng, ["Rewriting {path} with the fix.", ""], **facts),
                                  f"cat > {path} <<'{delimiter}'\n{after}{delimiter}"))
    else:
        old, new = found
        line = next((text.strip() for text in old.splitlines() if text.strip()), old)
        thought = say(rng, GUARD if "\n" in old + new else FIX, old=old, new=new, line=line, **facts)
        sed = sed_replace(path, old, new) if rng.random() < 0.3 else None
        replies.append(bash_reply(thought, sed or python_replace(path, old, new)))
    if rng.random() < 0.3:
        call = first_call(p["problem_statement"], fname)
        if call:
            module = path[:-3].replace("/", ".")
            replies.append(bash_reply(say(rng, CHECK), f"python3 -c {quoted(f'from {module} import {fname}; print(repr({call}))')}"))
    replies.append(bash_reply(say(rng, DONE), f"submit {say(rng, SUMMARY, **facts)}"))
    return replies


def quoted(code: str) -> str:
    """`code` as one shell word: in double quotes when nothing in it is special there (as people write it)."""
    return f'"{code}"' if not set(code) & set('"$`\\!') else shell_quote(code)


def first_call(statement: str, fname: str) -> str | None:
    """The first call of `fname` the issue shows (`fname(...)` up to its matching parenthesis)."""
    start = statement.find(f"{fname}(")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len(fname), len(statement)):
        depth += {"(": 1, ")": -1}.get(statement[i], 0)
        if depth == 0:
            return statement[start:i + 1]
    return None
