"""The `dataset` family: prompts from JSONL / JSON / parquet / CSV / a datasets folder, each bad
input a clear error naming the file and the row. Real rows: GSM8K's first 30 test problems."""
import json
from pathlib import Path

import pytest

from rlyard.envs import get_family
from rlyard.envs.dataset import DatasetError

GSM8K = Path(__file__).parent / "data" / "gsm8k_test_head30.jsonl"
ROWS = [json.loads(line) for line in GSM8K.read_text().splitlines()]


def tasks(which="train", n=1000, **options):
    return get_family("dataset").make_tasks(which, n, 0, **options)


def test_gsm8k_rows_become_tasks_with_their_columns():
    train, held_out = tasks(path=str(GSM8K), prompt_column="question"), tasks("eval", path=str(GSM8K), prompt_column="question")
    assert len(train) + len(held_out) == 30 and held_out  # eval_fraction 0.1 of 30 rows, by a stable hash
    assert not {t.prompt[0]["content"] for t in train} & {t.prompt[0]["content"] for t in held_out}
    first = next(t for t in train + held_out if t.id == "gsm8k_test_head30-1")
    assert first.prompt == [{"role": "user", "content": ROWS[0]["question"]}]
    assert first.payload == {"answer": ROWS[0]["answer"]} and first.metadata["prompt_format"] == "standard"
    assert first.metadata["prompt_text"] == ROWS[0]["question"]


def test_the_split_is_stable_and_never_leaks():
    a = [t.id for t in tasks("eval", path=str(GSM8K), prompt_column="question", eval_fraction=0.3)]
    b = [t.id for t in tasks("eval", path=str(GSM8K), prompt_column="question", eval_fraction=0.3)]
    train = [t.id for t in tasks(path=str(GSM8K), prompt_column="question", eval_fraction=0.3)]
    assert a == b and 3 <= len(a) <= 18 and not set(a) & set(train)
    assert len(tasks("eval", path=str(GSM8K), prompt_column="question", eval_fraction=0.0)) == 0


def write_formats(folder: Path) -> dict[str, Path]:
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset, DatasetDict

    rows = [{"question": r["question"], "answer": r["answer"]} for r in ROWS[:10]]
    paths = {"jsonl": folder / "d.jsonl", "json": folder / "d.json", "parquet": folder / "d.parquet", "csv": folder / "d.csv",
             "saved": folder / "saved", "dict": folder / "saved_dict"}
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths["json"].write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), paths["parquet"])
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["question", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    Dataset.from_list(rows).save_to_disk(str(paths["saved"]))
    DatasetDict({"train": Dataset.from_list(rows[:7]), "test": Dataset.from_list(rows[7:])}).save_to_disk(str(paths["dict"]))
    return paths


def test_every_format_reads_the_same_rows(tmp_path):
    paths = write_formats(tmp_path)
    everything = {}
    for name, path in paths.items():
        found = tasks(path=str(path), prompt_column="question", eval_fraction=0.0) + tasks(
            "eval", path=str(path), prompt_column="question", eval_fraction=0.0)
        everything[name] = sorted((t.prompt[0]["content"], t.payload["answer"]) for t in found)
    assert all(found == everything["jsonl"] for found in everything.values()) and len(everything["jsonl"]) == 10
    # a DatasetDict folder: its test split is the held-out set
    assert len(tasks(path=str(paths["dict"]), prompt_column="question")) == 7
    assert len(tasks("eval", path=str(paths["dict"]), prompt_column="question")) == 3
    with pytest.raises(DatasetError, match="no split 'dev'"):
        tasks(path=str(paths["dict"]), prompt_column="question", train_split="dev")


def test_chat_prompts_ids_columns_and_system_prompt(tmp_path):
    path = tmp_path / "chat.jsonl"
    rows = [{"uid": f"u{i}", "prompt": [{"role": "user", "content": f"hi {i}"}], "gold": str(i), "extra": i} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = tasks(path=str(path), id_column="uid", columns={"answer": "gold"}, system_prompt="Be brief.", eval_fraction=0.0)
    assert [t.id for t in found] == ["u0", "u1", "u2", "u3"]
    assert found[0].prompt == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi 0"}]
    assert found[0].payload == {"answer": "0"} and found[0].metadata["prompt_format"] == "conversational"
    assert tasks(path=str(path), columns=["extra"], eval_fraction=0.0)[1].payload == {"extra": 1}
    eval_file = tmp_path / "held_out.jsonl"
    eval_file.write_text(json.dumps({"prompt": "held", "gold": "9"}) + "\n")
    assert [t.prompt[-1]["content"] for t in tasks("eval", path=str(path), eval_path=str(eval_file))] == ["held"]
    assert len(tasks(path=str(path), eval_path=str(eval_file))) == 4  # with an eval file, every row trains


@pytest.mark.parametrize("content, options, expected", [
    ("", {}, r"d\.jsonl: no rows \(the file is empty\)"),
    ('{"question": "x"}\n', {}, r"d\.jsonl row 1: no column 'prompt' \(its columns: question\)"),
    ('{"prompt": "a"}\n{"prompt": "b"\n', {}, r"d\.jsonl line 2: not JSON"),
    ('{"prompt": 3}\n', {}, r"row 1: column 'prompt' must be a string or a non-empty list of chat messages, got int"),
    ('{"prompt": [{"role": "robot", "content": "x"}]}\n', {}, r"row 1: prompt\[0\] must be"),
    ('{"prompt": "  "}\n', {}, r"row 1: column 'prompt' is empty"),
    ('{"prompt": "a", "completions": 1}\n', {}, r"column 'completions' would reach the reward as 'completions'"),
    ('{"prompt": "a"}\n', {"columns": ["answer"]}, r"row 1: no column 'answer'"),
    ('{"prompt": "a", "id": 1}\n{"prompt": "b", "id": 1}\n', {"id_column": "id"}, r"row 2: id '1'"),
    ('{"prompt": "a"}\n', {"eval_fraction": 1.5}, r"env.options.eval_fraction: must be in \[0, 1\)"),
])
def test_bad_data_names_the_file_and_row(tmp_path, content, options, expected):
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError, match=expected):
        tasks(path=str(path), **options)


def test_bad_paths_and_options(tmp_path):
    with pytest.raises(DatasetError, match="no such file or folder"):
        tasks(path=str(tmp_path / "missing.jsonl"))
    (tmp_path / "d.xlsx").write_text("x")
    with pytest.raises(DatasetError, match="unknown format '.xlsx'"):
        tasks(path=str(tmp_path / "d.xlsx"))
    with pytest.raises(DatasetError, match="set env.options.path"):
        tasks()
    with pytest.raises(ValueError, match=r"unknown dataset option\(s\) \['prompt_col'\]"):
        tasks(path=str(GSM8K), prompt_col="question")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DatasetError, match="save_to_disk"):
        tasks(path=str(tmp_path / "folder"))
