"""Generated webdev tasks (`env.options.source: generated`): page specs from a seeded grammar.

A spec (template.py) is a header with a title and a nav of N links, one to three middle
sections in some order (a hero with a heading and a button, K cards, a list of M items, a form
of F fields), a footer, a colour theme, a page background and an alignment. Its brief, its
checks and its reference page come from template.py; the reference's screenshot is rendered
the first time a page of the task is graded and cached (references.py). The task is then an
ordinary webdev task: the same gate, DOM checks and SSIM as the built-in sites.

Held out by combination: a spec's *combination* is its set of middle sections with their counts
and the nav's count (e.g. `nav3|cards4|form2`, 300 of them); `split_of("webdev-generated",
combination, eval_percent)` puts a whole combination in eval or in train, so no held-out
combination of sections and counts is ever trained on. Within a combination, texts, colours,
alignment and order vary.

The pool is POOL_SIZE specs per seed (index k -> its own seeded draw; duplicates dropped): 3,324
train and 1,676 eval at seed 0 and the default 25% (92 of the 300 combinations held out). Building tasks writes each reference page (about
1 KB) into the rlyard cache, which the sandbox masks; only the screenshots cost a render, and
only for the tasks graded.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from rlyard.cache import cache_dir
from rlyard.envs.splits import split_of
from rlyard.envs.webdev import template
from rlyard.envs.webdev.checks import normalize_checks
from rlyard.types import Task

POOL_SIZE = 5000
NAV_COUNTS, CARD_COUNTS, LIST_COUNTS, FIELD_COUNTS = (2, 3, 4), (2, 3, 4), (2, 3, 4), (1, 2, 3)
ADJECTIVES = ("Cobalt", "Amber", "Quiet", "Swift", "Golden", "Maple", "Coral", "Nimble", "Silver", "Lucky", "Urban",
              "Little", "Bright", "Velvet", "Rustic", "Polar", "Sunny", "Crimson", "Hidden", "Brave")
NOUNS = ("Tea", "Bakery", "Studio", "Garden", "Books", "Bikes", "Labs", "Cafe", "Yoga", "Travel", "Press", "Clinic",
         "Market", "Games", "Music", "Kitchen", "Tailor", "Florist", "Gym", "Notes")
NAV = ("Home", "About", "Menu", "Blog", "Shop", "Contact", "Pricing", "Team", "Docs", "Help", "Events", "Jobs")
HEADINGS = ("Fresh every morning", "Made by hand", "Open seven days", "Built for speed", "Small team, big ideas",
            "Simple and honest", "Your weekend starts here", "Quality you can see", "Plans for every size",
            "Join our community", "Good things take time", "Welcome in", "Made to last", "Try something new")
BUTTONS = ("Get started", "Start free", "Order now", "Learn more", "Book a table", "Try it", "See plans", "Join us",
           "Shop now", "Say hello")
CARDS = ("Fast setup", "Low prices", "Free delivery", "Expert staff", "Open late", "Gift cards", "Local sourcing",
         "Easy returns", "Live support", "Weekly news", "Safe payments", "Green energy", "Daily specials",
         "Private rooms", "Quick repairs", "Member perks", "Custom orders", "Group classes")
ITEMS = ("Monday to Friday 9-5", "Parking on site", "Pets welcome", "Free Wi-Fi", "Cards accepted", "Wheelchair access",
         "Kids corner", "Vegan options", "Student discount", "Same-day service", "Online booking", "Gift wrapping")
FIELDS = ("Name", "Email", "Phone", "City", "Company", "Subject")
FORM_BUTTONS = ("Send", "Submit", "Sign up", "Subscribe", "Join", "Book")
ALIGN = ("center", "left")
COUNTS = {"cards": CARD_COUNTS, "list": LIST_COUNTS, "form": FIELD_COUNTS}


def combination(spec: dict[str, Any]) -> str:
    """The spec's sections and counts, e.g. `nav3|cards4|form2|hero` (what eval holds out)."""
    parts = {"hero": "hero", "cards": f"cards{len(spec.get('cards', ()))}", "list": f"list{len(spec.get('list', ()))}",
             "form": f"form{len(spec.get('form', {}).get('fields', ()))}"}
    return "|".join([f"nav{len(spec['nav'])}", *sorted(parts[name] for name in spec["sections"])])


def all_combinations() -> list[str]:
    """Every combination the grammar can draw (300)."""
    out = []
    for size in (1, 2, 3):
        for sections in itertools.combinations(template.SECTIONS, size):
            choices = [("hero",) if s == "hero" else tuple(f"{s}{c}" for c in COUNTS[s]) for s in sections]
            for nav in NAV_COUNTS:
                out += ["|".join([f"nav{nav}", *sorted(parts)]) for parts in itertools.product(*choices)]
    return sorted(out)


def draw_spec(rng: random.Random) -> dict[str, Any]:
    """One page spec from the grammar."""
    title = f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    sections = rng.sample(template.SECTIONS, rng.choice((1, 2, 2, 3, 3)))
    spec: dict[str, Any] = {"title": title, "nav": rng.sample(NAV, rng.choice(NAV_COUNTS)), "sections": sections}
    if "hero" in sections:
        spec["hero"] = {"heading": rng.choice(HEADINGS), "button": rng.choice(BUTTONS)}
    if "cards" in sections:
        spec["cards"] = rng.sample(CARDS, rng.choice(CARD_COUNTS))
    if "list" in sections:
        spec["list"] = rng.sample(ITEMS, rng.choice(LIST_COUNTS))
    if "form" in sections:
        spec["form"] = {"fields": rng.sample(FIELDS, rng.choice(FIELD_COUNTS)), "button": rng.choice(FORM_BUTTONS)}
    spec["footer"] = f"\u00a9 {rng.choice((2024, 2025, 2026))} {title}"
    spec.update(theme=rng.choice(sorted(template.THEMES)), page=rng.choice(template.PAGES), align=rng.choice(ALIGN))
    return spec


def canonical(spec: dict[str, Any]) -> str:
    """The spec's parameters as one stable string (its id and its cache key come from it)."""
    return json.dumps(spec, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def spec_id(spec: dict[str, Any]) -> str:
    return "gen-" + hashlib.sha256(canonical(spec).encode()).hexdigest()[:12]


def split_of_spec(spec: dict[str, Any], eval_percent: int) -> str:
    return split_of("webdev-generated", combination(spec), eval_percent)


def specs(split: str, n: int, seed: int, eval_percent: int) -> list[dict[str, Any]]:
    """The first `n` distinct specs of `split` in the pool of `seed`."""
    out, seen = [], set()
    for k in range(POOL_SIZE):
        if len(out) >= n:
            break
        spec = draw_spec(random.Random(f"rlyard-webdev-generated|{seed}|{k}"))
        key = spec_id(spec)
        if key not in seen and split_of_spec(spec, eval_percent) == split:
            seen.add(key)
            out.append(spec)
    return out


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def reference_folder(spec: dict[str, Any]) -> Path:
    """The cached folder of a spec's reference: `reference/` (the site) and `reference.png` (made
    when first graded). Keyed by the page's own text, so a changed template never reuses a stale one."""
    files = template.page(spec)
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_dir() / "webdev-generated" / digest
    for name, text in files.items():
        path = folder / "reference" / name
        if not path.is_file():
            write_atomic(path, text)
    return folder


def make_generated(split: str, n: int, seed: int, opts: dict[str, Any], settings: dict[str, Any],
                   judge: dict[str, Any] | None, prompt: str) -> list[Task]:
    """`n` tasks of `split` from the pool of `seed`; `prompt` is the family's task text with {statement}."""
    tasks = []
    for spec in specs(split, n, seed, int(opts["eval_percent"])):
        folder = reference_folder(spec)
        statement = template.brief(spec)
        payload = {"statement": statement, "checks": normalize_checks(template.checks(spec), spec_id(spec)), "reference": str(folder / "reference.png"),
                   "site": str(folder / "reference"), "spec": spec, **settings, "judge": judge}
        tasks.append(Task(id=spec_id(spec), prompt=[{"role": "user", "content": prompt.format(statement=statement)}],
                          env="webdev", payload=payload,
                          metadata={"split": split, "category": "generated", "difficulty": "easy",
                                    "combination": combination(spec)}))
    return tasks
