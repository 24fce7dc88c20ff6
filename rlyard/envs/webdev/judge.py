"""The group vision judge (`Family.score_group`): the recipe's permuted rounds over a group's screenshots.

With `env.options.judge` set (an OpenAI-compatible vision endpoint), once a group has finished:

- candidates are the members that passed the gate with fit >= 0.2 and a screenshot; the rest
  keep their reward (0 for a gated page; infra members are left as they are);
- round r shows every candidate's screenshot, in a seeded base order rotated by r, so over k
  rounds (k = the candidates, or `rounds`) each screenshot takes every position equally often;
  the judge answers {"better": [...], "worse": [...]}: positions of the clearly better and
  clearly worse screenshots, both empty for "no clear difference";
- pick_i = (rounds naming i better - rounds naming i worse) / valid rounds, in [-1, 1];
  fewer valid rounds than `min_rounds` (half, rounded up) or more than `max_ties` (half) of
  them "no clear difference": every pick is 0;
- reward = (pick - deduction + 2) / 3 with the fit's deduction band (verify.py).

A candidate whose screenshot cannot be read gets the mean reward of the group's other scored
(non-infra) members. A judge that answers no round at all (unreachable, never a verdict that
parses: `JudgeUnavailable`) makes every member it should have judged an infra failure: they
leave the group, never a 0 (gated members keep their 0).
"""
from __future__ import annotations

import base64
import hashlib
import io
import math
import random
import threading
from dataclasses import replace
from typing import Any

from rlyard.envs.judge import Judge, JudgeConfig, JudgeUnavailable
from rlyard.types import Task, Trajectory

PROMPT_VERSION = "webdev-v1"
MAX_HEIGHT_RATIO = 2.0  # a screenshot is cut to this many widths tall before it is shown
SYSTEM = ("You compare screenshots of web pages built for the same request. Judge how well each page fulfils the "
          "request and how good it looks: layout, spacing, typography, colour, completeness. Only name a screenshot "
          "when it is clearly better or clearly worse than the others; if none differ clearly, name none.")
ASK = ("Request:\n{statement}\n\nThere are {k} screenshots, numbered 1 to {k} in the order shown. Reply with JSON only: "
       '{{"better": [numbers of the clearly better ones], "worse": [numbers of the clearly worse ones]}}; '
       '{{"better": [], "worse": []}} when there is no clear difference.')

_judges: dict[tuple, Judge] = {}
_lock = threading.Lock()


def judge_for(settings: dict[str, Any]) -> Judge:
    """One Judge (client, semaphore, cache) per distinct setting, shared by every group."""
    keys = ("base_url", "model", "api_key_env", "timeout_s", "retries", "backoff_s", "concurrency", "cache_dir")
    config = JudgeConfig(**{k: settings[k] for k in keys if settings.get(k) is not None}, prompt_version=PROMPT_VERSION)
    with _lock:
        if config not in _judges:
            _judges[config] = Judge(config)
        return _judges[config]


def shown_image(path: str, max_width: int) -> bytes:
    """The screenshot as the judge sees it: cut to MAX_HEIGHT_RATIO widths tall, at most `max_width` wide."""
    from PIL import Image

    image = Image.open(path)
    image.load()
    image = image.convert("RGB").crop((0, 0, image.width, min(image.height, int(image.width * MAX_HEIGHT_RATIO))))
    if image.width > max_width:
        image = image.resize((max_width, max(1, round(image.height * max_width / image.width))), Image.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def orders(k: int, rounds: int, seed: str) -> list[list[int]]:
    """`rounds` orders of k candidates: a seeded base order rotated by 0, 1, 2 ... positions."""
    base = list(range(k))
    random.Random(seed).shuffle(base)
    return [base[r % k:] + base[:r % k] for r in range(rounds)]


def read_verdict(verdict: dict, k: int) -> tuple[set[int], set[int]] | None:
    """(better, worse) positions (0-based) of a verdict, or None when it is not a valid one."""
    try:
        better, worse = ({int(x) - 1 for x in verdict[key]} for key in ("better", "worse"))
    except (KeyError, TypeError, ValueError):
        return None
    if better & worse or any(not 0 <= x < k for x in better | worse):
        return None
    return better, worse


def picks(verdicts: list[tuple[set[int], set[int]] | None], shown: list[list[int]], k: int,
          min_rounds: int, max_ties: float) -> tuple[list[float], str]:
    """Each candidate's pick from the rounds' verdicts (None: a failed round), and why all are 0 if so."""
    valid = [(v, order) for v, order in zip(verdicts, shown) if v is not None]
    if len(valid) < min_rounds:
        return [0.0] * k, f"{len(valid)} valid round(s), fewer than {min_rounds}"
    ties = sum(not better and not worse for (better, worse), _ in valid)
    if ties > max_ties * len(valid):
        return [0.0] * k, f"{ties} of {len(valid)} rounds found no clear difference"
    net = [0] * k
    for (better, worse), order in valid:
        for position in better:
            net[order[position]] += 1
        for position in worse:
            net[order[position]] -= 1
    return [n / len(valid) for n in net], ""


def score_group(task: Task, trajectories: list[Trajectory]) -> list[Trajectory]:
    settings = task.payload.get("judge")
    if not settings:
        return trajectories
    out = list(trajectories)
    candidates, unreadable, images = [], [], []
    for i, t in enumerate(trajectories):
        if t.infra_error or t.components.get("gate") != 1.0 or t.components.get("deduction", 1.0) >= 1.0:
            continue
        try:
            images.append(shown_image(t.info["screenshot"], int(settings.get("max_width") or 720)))
            candidates.append(i)
        except Exception:  # no screenshot, or one that does not open
            unreadable.append(i)
    k = len(candidates)
    rounds = int(settings.get("rounds") or k)
    verdicts: list[tuple[set[int], set[int]] | None] = []
    shown = orders(k, rounds, f"{task.id}|{trajectories[0].group_id if trajectories else ''}") if k >= 2 else []
    failures = []
    if k >= 2:
        judge = judge_for(settings)
        digests = [hashlib.sha256(image).hexdigest() for image in images]
        statement = task.payload["statement"]
        for order in shown:
            content: list[dict] = [{"type": "text", "text": ASK.format(statement=statement, k=k)}]
            for position, c in enumerate(order, 1):
                content += [{"type": "text", "text": f"Screenshot {position}:"},
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(images[c]).decode()}}]
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]
            key = ("webdev", hashlib.sha256(statement.encode()).hexdigest(), *(digests[c] for c in order))
            try:
                verdicts.append(read_verdict(judge.ask_json(messages, key, required=("better", "worse")), k))
            except JudgeUnavailable as error:
                failures.append(str(error))
                verdicts.append(None)
        if failures and all(v is None for v in verdicts):
            for i in candidates + unreadable:
                t = out[i]
                out[i] = replace(t, reward=0.0, infra_error=True, finish_reason="infra_error",
                                 info={**t.info, "error": f"judge unavailable: {failures[-1]}"})
            return out
    min_rounds = int(settings.get("min_rounds") or math.ceil(rounds / 2))
    pick_values, why_zero = picks(verdicts, shown, k, min_rounds, float(settings.get("max_ties", 0.5))) if k >= 2 \
        else ([0.0] * k, "fewer than 2 pages to compare")
    for c, i in enumerate(candidates):
        t, pick = out[i], pick_values[c]
        reward = (pick - t.components["deduction"] + 2.0) / 3.0
        out[i] = replace(t, reward=reward, components={**t.components, "pick": pick, "judged": 1.0},
                         info={**t.info, "judge": {"pick": pick, "rounds": rounds, "valid_rounds": sum(v is not None for v in verdicts),
                                                   "why_zero": why_zero}})
    scored = [out[i].reward for i in range(len(out)) if i not in unreadable and not out[i].infra_error]
    for i in unreadable:
        t = out[i]
        mean = sum(scored) / len(scored) if scored else t.reward
        out[i] = replace(t, reward=mean, components={**t.components, "judged": 0.0},
                         info={**t.info, "judge": {"unjudged": "no readable screenshot: the group mean"}})
    return out
