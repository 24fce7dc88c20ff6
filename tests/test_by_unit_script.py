"""scripts/by_unit.py: held-out success per unit and the paired difference between two stages,
on hand-made evaluation folders."""
import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def by_unit(script_module):
    return script_module("by_unit.py")


def folder(tmp_path: Path, name: str, rewards: dict[str, float], infra: tuple[str, ...] = ()) -> Path:
    path = tmp_path / name
    path.mkdir()
    rows = [{"task_id": task, "reward": reward, "infra_error": task in infra} for task, reward in rewards.items()]
    (path / "trajectories.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_units_drop_the_hash_and_keep_names_with_dashes(by_unit):
    assert by_unit.unit_of("gen-list-chunk-off_by_one-1eb4eb689b") == "gen-list-chunk-off_by_one"
    assert by_unit.unit_of("gen-date-days_in_month-boolean-00ff12") == "gen-date-days_in_month-boolean"
    assert by_unit.unit_of("builtin-task-7") == "builtin-task-7"  # no hash: its own unit


def test_counts_per_unit_and_the_paired_difference(by_unit, tmp_path, capsys):
    sft = folder(tmp_path, "episodes_sft_seed0", {"gen-a-x-kind-aaaaaa": 1.0, "gen-a-x-kind-bbbbbb": 0.0,
                                                  "gen-b-y-kind-cccccc": 1.0, "gen-b-y-kind-dddddd": 0.0})
    rl = folder(tmp_path, "episodes_rl_seed0", {"gen-a-x-kind-aaaaaa": 1.0, "gen-a-x-kind-bbbbbb": 1.0,
                                                "gen-b-y-kind-cccccc": 0.0, "gen-b-y-kind-dddddd": 0.0}, infra=("gen-b-y-kind-dddddd",))
    rows = dict(by_unit.table([by_unit.outcomes(sft), by_unit.outcomes(rl)]))
    assert rows == {"gen-a-x-kind": [(1, 2), (2, 2)], "gen-b-y-kind": [(1, 2), (0, 1)]}  # the infra failure is not a task
    by_unit.main([str(sft), str(rl), "--paired", "1", "2"])
    out = capsys.readouterr().out
    assert "rl_seed0 fixed 1 that sft_seed0 did not; lost 1" in out
    assert "+ gen-a-x-kind-bbbbbb" in out and "- gen-b-y-kind-cccccc" in out


def test_a_missing_folder_names_itself(by_unit, tmp_path):
    with pytest.raises(SystemExit, match="episodes_nowhere"):
        by_unit.main([str(tmp_path / "episodes_nowhere")])
