"""The meter constraint needs the bars marked: abc2midi measures neither the first (pickup) nor
the last bar, so a tune written as one unbarred stream, or as two huge bars, drew no bar
warning and met any meter. An RL policy found it (docs/music.md, "Learning"); these are the
variants of that class, each graded through the real grader (abc2midi)."""
from __future__ import annotations

import random
import re
import shutil

import pytest

from rlyard.envs.music.abc import written_bar_lines
from rlyard.envs.music.oracle import compose
from rlyard.envs.music.tasks import make_tasks
from rlyard.envs.music.verify import grade

pytestmark = pytest.mark.skipif(shutil.which("abc2midi") is None, reason="abc2midi (apt-get install abcmidi) is not installed")

BAR = re.compile(r"\|\]|\|")


def split(tune: str) -> tuple[list[str], list[str]]:
    """Header and body; a music line's end-of-line comment (the oracle's `% 3 of 8`) is dropped,
    since joining lines would otherwise comment out the rest of the stream."""
    lines = tune.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("K:"))
    body = [line if line.startswith("%") else re.sub(r"\s*%.*", "", line) for line in lines[k + 1:]]
    return lines[: k + 1], body


def unbarred(tune: str) -> str:  # one stream, only the final |]
    head, body = split(tune)
    music = [line for line in body if not re.match(r"^[A-Za-z]:|^%", line)]
    return "\n".join(head + [line for line in body if line not in music] + [BAR.sub("", " ".join(music)).strip() + "|]"])


def two_halves(tune: str) -> str:  # a pickup bar and a last bar, each half the tune
    head, body = split(tune)
    notes = BAR.sub("", " ".join(line for line in body if not re.match(r"^[A-Za-z]:|^%", line))).split()
    half = len(notes) // 2
    return "\n".join(head + [" ".join(notes[:half]) + "|" + " ".join(notes[half:]) + "|]"])


def no_final(tune: str) -> str:  # no bar line at all
    return unbarred(tune).removesuffix("|]")


def test_bar_lines_are_counted_as_written() -> None:
    assert written_bar_lines("abc|def|]") == 2
    assert written_bar_lines('|:abc:|"A|B"de|1 f:|2 g|] % | in a comment') == 5
    assert written_bar_lines("[K:G] abc [|def||") == 2
    assert written_bar_lines("abcdef") == 0


@pytest.mark.parametrize("variant", [unbarred, two_halves, no_final])
def test_a_tune_without_its_bar_lines_fails_the_meter(variant) -> None:
    tasks = [t for t in make_tasks("train", 40, 5, source="generated") if "voices" not in t.payload["constraints"]][:8]
    assert len(tasks) >= 5
    for task in tasks:
        constraints = task.payload["constraints"]
        tune = compose(constraints, random.Random(task.id))
        honest = grade(f"```abc\n{tune}\n```", constraints)
        assert "meter" not in honest.info["unmet"], honest.info["unmet"]
        bent = grade(f"```abc\n{variant(tune)}\n```", constraints)
        assert bent.info.get("reject") or "meter" in bent.info["unmet"], (variant.__name__, variant(tune), bent.info)
        assert bent.value < honest.value
