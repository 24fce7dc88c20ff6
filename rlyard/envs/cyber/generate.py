"""Generated cyber targets (`env.options.source: generated`): small C parsers with one catalogued bug.

A target is drawn from a seeded stream: an input format (formats.py: header, records, strtab,
kv, fields) crossed with a bug kind (bugs.py: stack and heap overflow, off-by-one, use after
free, double free, signed overflow, NULL dereference, out-of-bounds index), with the program's
name, the field's noun, the bug's function name and every constant of both drawn per task, so
a PoC can only come from reading the source. Programs are 40 to 80 lines, which a small model's
context holds whole.

Split: 8 of the 40 format x bug combinations are held out (`HELD_OUT`: each bug once, each
format at least once) and only they make the eval split; the other 32 make train. Success on
eval is therefore a PoC for a bug in a format the policy never saw it in. `eval_percent` 100
(validate) interleaves both streams, one eval task to four train tasks, so `validate -n N`
checks the very first tasks training and evaluation use. Ids are a stable hash of the task's
parameters.

Lazy and cached: drawing specs is pure and fast (thousands a second); only the `n` asked are
written to `$RLYARD_CACHE/cyber-generated/<id>-<digest>/` (src/, build.sh, seed.bin, poc.bin,
target.json; the cache is masked in every sandbox) and measured once: the expected report
(sanitizer, error type, function) is what the pristine build reports on the reference PoC in
the sandbox, as for built-in targets, and is then read from target.json.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from itertools import count
from pathlib import Path
from typing import Iterator

from rlyard.cache import cache_dir
from rlyard.envs.cyber.bugs import KINDS, Runs, run_bytes
from rlyard.envs.cyber.formats import FORMATS, LOAD, parts_bytes
from rlyard.envs.cyber.targets import Target
from rlyard.envs.cyber.verify import GraderUnavailable, grade_bytes

PROGRAMS = [("sprite", "sprite sheet"), ("patch", "firmware patch"), ("track", "GPS track"), ("font", "bitmap font"),
            ("level", "game level"), ("palette", "colour palette"), ("badge", "access badge"), ("sensor", "sensor log"),
            ("ticket", "support ticket"), ("recipe", "recipe card"), ("tilemap", "tile map"), ("voice", "voice note"),
            ("invoice", "invoice"), ("route", "bus route"), ("score", "music score"), ("label", "shipping label")]
NOUNS = ["name", "comment", "owner", "path", "note", "author", "host", "alias", "caption", "motto", "banner", "nickname"]
VERBS = ["parse", "read", "copy", "decode", "store", "handle", "scan", "check", "print", "keep", "take", "fetch"]
HELD_OUT = frozenset({("records", "stack_overflow"), ("kv", "heap_overflow"), ("header", "off_by_one"),
                      ("fields", "use_after_free"), ("strtab", "double_free"), ("fields", "signed_overflow"),
                      ("header", "null_deref"), ("kv", "oob_index")})


def _combo_order(combos: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """Bug kinds in turn, each with its formats rotated: the first eight tasks of a stream are
    eight kinds in five formats, and every 32 (train) or 8 (eval) cover every pair once."""
    formats, kinds = list(FORMATS), list(KINDS)

    def rank(combo: tuple[str, str]) -> tuple[int, int]:
        k = kinds.index(combo[1])
        mine = [f for f in (formats[(k + j) % len(formats)] for j in range(len(formats))) if (f, combo[1]) in combos]
        return mine.index(combo[0]), k

    return sorted(combos, key=rank)


COMBOS = {"eval": _combo_order(set(HELD_OUT)),
          "train": _combo_order({(f, b) for f in FORMATS for b in KINDS if (f, b) not in HELD_OUT})}
DIFFICULTY = {"stack_overflow": "easy", "heap_overflow": "easy", "signed_overflow": "easy", "oob_index": "easy",
              "use_after_free": "medium", "double_free": "medium", "null_deref": "medium", "off_by_one": "hard"}
BUILD = "#!/bin/sh\n# Build ./target from src/ with the compiler and flags the grader passes in.\nset -e\n${CC:-gcc} ${CFLAGS:-} -o target src/*.c\n"


@dataclass(frozen=True)
class Spec:
    """Every parameter of one generated target; the id is a hash of them all."""

    format: str
    bug: str
    stem: str  # the program (src/<stem>.c)
    title: str
    noun: str  # the field that reaches the bug
    function: str  # the bug's function
    layout: dict = field(hash=False)  # the format's constants
    constants: dict = field(hash=False)  # the bug's constants
    benign: list = field(hash=False)  # runs of the seed's field
    trigger: list | None = field(hash=False)  # runs of the reference PoC's field (None: the field left out)

    @property
    def canonical(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @property
    def id(self) -> str:
        digest = hashlib.sha256(self.canonical.encode()).hexdigest()[:10]
        return f"gen-{self.format}-{self.bug}-{digest}"

    @property
    def split(self) -> str:
        return "eval" if (self.format, self.bug) in HELD_OUT else "train"

    @property
    def file(self) -> str:
        return f"src/{self.stem}.c"


def draw_spec(rng: random.Random, fmt: str, bug: str) -> Spec:
    stem, title = rng.choice(PROGRAMS)
    noun = rng.choice(NOUNS)
    kind, text = KINDS[bug], FORMATS[fmt].text
    constants = kind.draw(rng, text)
    return Spec(fmt, bug, stem, title, noun, f"{rng.choice(VERBS)}_{noun}", FORMATS[fmt].draw(rng, title, noun), constants,
                kind.benign(constants, rng, text), kind.trigger(constants, rng, text))


def stream(split: str, seed: int) -> Iterator[Spec]:
    """The split's specs in order, cycling through its combinations so every bug kind comes
    early. `split` "all" interleaves eval and train, one to four."""
    if split == "all":
        evals, trains = stream("eval", seed), stream("train", seed)
        while True:
            yield next(evals)
            for _ in range(4):
                yield next(trains)
    combos = COMBOS[split]
    for i in count():
        fmt, bug = combos[i % len(combos)]
        yield draw_spec(random.Random(f"rlyard-cyber-generated|{split}|{seed}|{i}"), fmt, bug)


def draw_specs(split: str, n: int, seed: int, difficulty: str | None = None) -> list[Spec]:
    specs, seen = [], set()
    for spec in stream(split, seed):
        if len(specs) >= n:
            break
        if difficulty in (None, DIFFICULTY[spec.bug]) and spec.id not in seen:
            seen.add(spec.id)
            specs.append(spec)
    return specs


def program(spec: Spec) -> str:
    """The target's C source: includes, the format's constants, the bug's function, the parser."""
    fmt, kind = FORMATS[spec.format], KINDS[spec.bug]
    defines = ([] if fmt.text else ["#define MAX_INPUT 4096"]) + fmt.defines(spec.layout, spec.noun)
    pieces = [f"/* {spec.title} reader */\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>",
              "\n".join(defines), kind.function(spec.function, spec.noun, spec.constants)]
    if not fmt.text:
        pieces.append(LOAD)
    pieces.append(fmt.main(spec.layout, spec.noun, spec.title, spec.function, spec.bug != "null_deref"))
    return "\n\n".join(pieces) + "\n"


def file_parts(spec: Spec, blob: Runs | None, seed: bool = False) -> list:
    return FORMATS[spec.format].parts(spec.layout, blob, seed)


def seed_bytes(spec: Spec) -> bytes:
    return parts_bytes(file_parts(spec, [tuple(r) for r in spec.benign], seed=True))


def poc_bytes(spec: Spec) -> bytes:
    trigger = None if spec.trigger is None else [tuple(r) for r in spec.trigger]
    return parts_bytes(file_parts(spec, trigger))


def expected_report(spec: Spec) -> dict[str, str]:
    """What the catalogue says the reference PoC must produce (validate compares the measured one)."""
    sanitizer, error_type = KINDS[spec.bug].expected
    return {"sanitizer": sanitizer, "error_type": error_type, "function": spec.function}


def _target(spec: Spec, folder: Path, report: dict[str, str]) -> Target:
    return Target(id=spec.id, source=str(folder), build="sh build.sh", binary="target", sanitizer=report["sanitizer"],
                  error_type=report["error_type"], function=report["function"], file=spec.file,
                  difficulty=DIFFICULTY[spec.bug], title=f"{spec.title} reader ({spec.format}, {spec.bug})",
                  poc=str(folder / "poc.bin"), seed=str(folder / "seed.bin"))


def materialise(spec: Spec, root: Path | None = None) -> Target:
    """The target's folder, written and measured once (a ready folder is read back)."""
    files = {f"src/{spec.stem}.c": program(spec).encode(), "build.sh": BUILD.encode(),
             "seed.bin": seed_bytes(spec), "poc.bin": poc_bytes(spec)}
    digest = hashlib.sha256(b"\0".join(k.encode() + b"\0" + v for k, v in sorted(files.items()))).hexdigest()[:10]
    root = root or cache_dir() / "cyber-generated"
    folder = root / f"{spec.id}-{digest}"
    if (folder / "target.json").is_file():
        return _target(spec, folder, json.loads((folder / "target.json").read_text()))
    scratch = root / f".tmp-{spec.id}-{secrets.token_hex(4)}"
    for name, data in files.items():
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        (scratch / name).write_bytes(data)
    try:
        unmeasured = _target(spec, scratch, {"sanitizer": "AddressSanitizer", "error_type": "", "function": ""})
        verdict = grade_bytes(unmeasured, files["poc.bin"])
        if verdict.reward.infra_error:
            raise GraderUnavailable(f"generated target {spec.id}: {verdict.reward.info.get('error')}")
        report = verdict.reward.info.get("report") or {}
        if not verdict.reward.components.get("crashed") or not report.get("function"):
            raise ValueError(f"generated target {spec.id}: the reference PoC gives no sanitizer report with a function "
                             f"(exit {verdict.reward.info.get('exit_code')}):\n{verdict.output[-2000:]}")
        (scratch / "target.json").write_text(json.dumps({**report, "file": spec.file, "spec": asdict(spec)}, indent=1))
        try:
            os.rename(scratch, folder)
        except OSError:  # another process measured it first: theirs is the same
            if not (folder / "target.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _target(spec, folder, report)


def make_generated(split: str, n: int, seed: int, difficulty: str | None = None, jobs: int = 2) -> list[tuple[Spec, Target]]:
    """`n` generated targets of `split` ("train", "eval" or "all"), materialised `jobs` at a time."""
    specs = draw_specs(split, n, seed, difficulty)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(zip(specs, pool.map(materialise, specs)))
