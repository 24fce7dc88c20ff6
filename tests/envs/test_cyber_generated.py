"""Generated cyber targets: counts, determinism, the split by combination, and a sample proved sound.

The sound sample builds and runs real targets in the sandbox (the first eight train targets: one
per bug kind, across the five formats) through `validate.check_task`: the reference PoC gives exactly the catalogue's report,
the seed and an empty input give none, and the oracle's own PoC, written through the tools,
scores 1. `rlyard envs validate cyber -o source=generated -n 200` does the same for 200 (by hand).
"""
from __future__ import annotations

import random
import subprocess
from collections import Counter

import pytest

from rlyard.envs.cyber.bugs import KINDS, canonical_trigger
from rlyard.envs.cyber.formats import FORMATS, parts_bytes
from rlyard.envs.cyber.generate import HELD_OUT, draw_spec, draw_specs, poc_bytes, program, seed_bytes
from rlyard.envs.cyber.oracle import oracle, printf_text, python_expr
from rlyard.envs.cyber.tasks import make_tasks
from rlyard.sandbox import bwrap_works


def test_two_thousand_train_and_two_hundred_held_out_targets_unique_and_disjoint_by_combination():
    train, held_out = draw_specs("train", 2000, 0), draw_specs("eval", 200, 0)
    assert len({s.id for s in train}) == 2000 and len({s.id for s in held_out}) == 200
    assert not {(s.format, s.bug) for s in train} & HELD_OUT
    assert {(s.format, s.bug) for s in held_out} == set(HELD_OUT)
    assert {s.bug for s in held_out} == set(KINDS) and {s.format for s in train} == set(FORMATS)
    assert min(Counter((s.format, s.bug) for s in held_out).values()) == 25  # every held-out pair, evenly
    assert all(s.split == "train" for s in train) and all(s.split == "eval" for s in held_out)


def test_generation_is_deterministic_and_seeded():
    first, again, other = draw_specs("train", 40, 0), draw_specs("train", 40, 0), draw_specs("train", 40, 1)
    assert [s.id for s in first] == [s.id for s in again]
    assert [program(s) for s in first] == [program(s) for s in again]
    assert not {s.id for s in first} & {s.id for s in other}
    all_stream = draw_specs("all", 10, 0)  # validate's stream: one held-out task, then four train tasks
    assert [s.id for s in all_stream[1:5]] == [s.id for s in first[:4]]
    assert all_stream[0].id == draw_specs("eval", 1, 0)[0].id


def test_constants_differ_per_task_so_the_poc_comes_from_the_source():
    specs = [draw_spec(random.Random(k), "header", "stack_overflow") for k in range(30)]
    assert len({s.layout["magic"] for s in specs}) > 20 and len({s.function for s in specs}) > 10
    assert len({poc_bytes(s)[:8] for s in specs}) == 30
    for spec in specs[:5]:
        assert spec.function in program(spec) and spec.layout["magic"] in program(spec)


def test_programs_are_short():
    lines = [len(program(s).splitlines()) for s in draw_specs("all", 200, 0)]
    assert 40 <= min(lines) and max(lines) <= 90


def test_oracle_byte_writers_round_trip():
    """The python expression (with the length written as a sum or not) and sh's printf (dash:
    octal escapes only) write exactly the bytes, for the drawn and the canonical trigger of every
    kind in every format."""
    for k, (fmt, bug) in enumerate((f, b) for f in FORMATS for b in KINDS):
        spec = draw_spec(random.Random(k), fmt, bug)
        canonical, length_expr = canonical_trigger(bug, spec.constants, FORMATS[fmt].text)
        drawn = KINDS[bug].trigger(spec.constants, random.Random(k), FORMATS[fmt].text)
        for blob, expression in ((drawn, None), (canonical, length_expr)):
            parts = FORMATS[fmt].parts(spec.layout, blob, False)
            data = parts_bytes(parts)
            length = (sum(count for _, count in blob), expression) if expression else None
            assert eval(python_expr(parts)) == data == eval(python_expr(parts, length))  # noqa: S307 (our own expression)
            printed = subprocess.run(["/bin/sh", "-c", f"printf '{printf_text(data)}'"], capture_output=True, check=True).stdout
            assert printed == data
            assert seed_bytes(spec) != data


def test_the_oracle_writes_a_length_as_the_sources_bound_plus_8_and_a_tag_as_the_source_does():
    spec = draw_spec(random.Random(1), "records", "stack_overflow")
    size, tag = spec.constants["size"], spec.layout["tag"]
    canonical, length_expr = canonical_trigger("stack_overflow", spec.constants, False)
    assert canonical[0][1] == size + 8 and length_expr == f"{size} + 8"
    expr = python_expr(FORMATS["records"].parts(spec.layout, canonical, False), (size + 8, length_expr))
    assert f"bytes([0x{tag:02x}])" in expr and f"({size} + 8).to_bytes(2, " in expr and f"* ({size} + 8)" in expr


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLYARD_CACHE", str(tmp_path))
    return tmp_path / "cyber-generated"


@pytest.mark.timeout(600)
@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
def test_a_sample_of_one_target_per_bug_kind_is_sound_and_only_the_n_asked_are_built(cache):
    from rlyard.envs.cyber.validate import check_task

    tasks = make_tasks("train", 8, 0, source="generated", tool_format="bash_block")
    assert len(tasks) == 8 and len(list(cache.iterdir())) == 8  # lazy: eight folders, each measured once
    # a stream takes the bug kinds in turn, rotating the formats: eight kinds in all five formats
    assert {t.metadata["bug"] for t in tasks} == set(KINDS) and {t.metadata["format"] for t in tasks} == set(FORMATS)
    for task in tasks:
        check = check_task(task)
        assert check.ok, (task.id, check.error)
    again = make_tasks("train", 8, 0, source="generated", tool_format="bash_block")  # read back, not rebuilt
    assert [t.payload["target"] for t in again] == [t.payload["target"] for t in tasks]
    replies = oracle(tasks[0], random.Random(3))
    assert replies[0].startswith(("Let me", "First", "I'll", "```")) and replies[-1].endswith("```")
