"""Reply texts as a policy would write them, in each tool-call format rlyard parses.

The inverse of `rlyard.agent.toolcalls.parse_tool_calls`: an oracle decides what to do, these
functions write it as the exact text a model emits (a thought, then the call markup). Keeping
the markup here means every oracle writes the same shape the parser and the system prompt teach
(`HERMES_SHAPE` / `BASH_SHAPE`), so a demonstration never trains a format the env rejects.
"""
from __future__ import annotations

import random
from typing import Any

from rlyard.agent.toolcalls import hermes_call, shell_quote

__all__ = ["bash_reply", "hermes_call", "hermes_reply", "heredoc_delimiter", "say", "shell_quote"]


def hermes_reply(thought: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A thought (may be empty) followed by one or more calls, as one reply."""
    markup = "\n".join(hermes_call(name, arguments) for name, arguments in calls)
    return f"{thought}\n{markup}" if thought else markup


def bash_reply(thought: str, command: str) -> str:
    """A thought (may be empty) followed by exactly one fenced bash block (bash_block's one call per reply)."""
    block = f"```bash\n{command}\n```"
    return f"{thought}\n{block}" if thought else block


def say(rng: random.Random, phrasings: list[str], **values: Any) -> str:
    """One of several phrasings of a thought, filled in: demonstrations that vary their words
    keep the policy from learning one fixed string instead of the behaviour."""
    return rng.choice(phrasings).format(**values)


def heredoc_delimiter(text: str, base: str = "EOF") -> str:
    """A heredoc delimiter that no line of `text` equals, so the heredoc ends where it should."""
    lines, delimiter, k = set(text.splitlines()), base, 0
    while delimiter in lines:
        k += 1
        delimiter = f"{base}_{k}"
    return delimiter
