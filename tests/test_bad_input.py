"""The bad-input table: malformed configs, prompt rows, code task rows and command lines, each
refused with one clear message that names the field, the row or the file (and, on the command
line, exit code 2 and no Python traceback).

The tables below are the source of docs/reliability_inputs.md:
`python tests/test_bad_input.py` rewrites it with the messages rlyard gives today.
"""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from rlyard.config import ConfigError, load_config
from rlyard.envs.code.loaders import RowError, load_records
from rlyard.envs.dataset import DatasetError, make_tasks

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reliability_inputs.md"

# (id, YAML text of the config file or None for none, overrides, what the message must contain;
# "{file}" stands for the config file's path)
CONFIGS = [
    ("unknown top-level key", "trian:\n  steps: 2\n", [], ["unknown field trian", "did you mean train?"]),
    ("unknown nested key", "algo:\n  lrr: 0.1\n", [], ["unknown field algo.lrr", "did you mean algo.lr?"]),
    ("wrong type", "train:\n  steps: many\n", [], ["train.steps", "valid integer", "'many'"]),
    ("list where a section goes", "rollout: [1, 2]\n", [], ["rollout", "valid dictionary"]),
    ("out of range: lr <= 0", "algo:\n  lr: -1\n", [], ["algo.lr", "greater than 0", "-1"]),
    ("out of range: top_p > 1", "rollout:\n  top_p: 1.5\n", [], ["rollout.top_p", "less than or equal to 1"]),
    ("out of range: group size 0", None, ["rollout.n=0"], ["rollout.n", "greater than or equal to 1"]),
    ("bad algo name", "algo:\n  name: grpoo\n", [], ["algo.name", "'grpo'", "'grpoo'"]),
    ("bad algo preset", None, ["algo=grpoo"], ["algo=grpoo", "no preset configs/algos/grpoo.yaml", "available: cispo"]),
    ("preset and advantage disagree", "algo:\n  name: ppo\n  advantage: grpo\n", [], ["algo.advantage", "algo=ppo"]),
    ("bad literal: dtype", "model:\n  dtype: float64\n", [], ["model.dtype", "'float32'", "'float64'"]),
    ("bad literal: orchestrate.mode", "orchestrate:\n  mode: asynch\n", [], ["orchestrate.mode", "'async'"]),
    ("unknown environment", "env:\n  name: arithmetic\n", [], ["env.name", "arithmetic"]),
    ("missing model path", "model:\n  name: ./no/such/model\n", [], ["model.name", "./no/such/model", "no such folder"]),
    ("reward weights count", "env:\n  name: arith\n  reward: rlyard.rewards:math_equal\n  reward_weights: [1, 2]\n", [],
     ["env.reward_weights", "one weight per env.reward function (1), got 2"]),
    ("reward function not importable", "env:\n  name: dataset\n  reward: no_such_pkg.mod:fn\n", [], ["env.reward", "no_such_pkg"]),
    ("sft micro-batch does not divide", "sft:\n  batch_size: 8\n  micro_batch_size: 3\n", [],
     ["sft.micro_batch_size", "must divide sft.batch_size (8)"]),
    ("bad YAML syntax", "train:\n  steps: [2\n", [], ["{file} is not valid YAML: line 3, column 1", "expected ',' or ']'"]),
    ("tab indentation", "train:\n\tsteps: 2\n", [], ["{file} is not valid YAML: line 2, column 1", "'\\t'"]),
    ("duplicate key", "train:\n  steps: 2\ntrain:\n  steps: 3\n", [], ["{file}", "key 'train' appears twice", "line 3"]),
    ("top level is a list", "- train\n- eval\n", [], ["{file}", "mapping at the top level"]),
    ("not UTF-8", b"name: caf\xe9\n", [], ["{file}", "not UTF-8", "byte 0xe9"]),
    ("override without =", None, ["a.b"], ["override 'a.b'", "key.path=value"]),
    ("override with an empty key part", None, ["algo..lr=1"], ["override 'algo..lr=1'", "empty key"]),
    ("override into a value", "train:\n  steps: 2\n", ["train.steps.x=1"], ["train.steps is a value, not a section"]),
    ("override value not YAML", None, ["algo.lr=[1,"], ["override 'algo.lr=[1,'", "not valid YAML"]),
]

# (id, file name, file bytes, options, what the message must contain; "{file}" = the file's path)
ROWS = [
    ("JSON error on line 3", "p.jsonl", b'{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c"\n', {}, ["{file} line 3", "not JSON"]),
    ("not UTF-8 on line 2", "p.jsonl", b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n', {}, ["{file} line 2", "not UTF-8"]),
    ("missing prompt column", "p.jsonl", b'{"prompt": "a"}\n{"question": "b"}\n', {}, ["{file} row 2: no column 'prompt'", "question"]),
    ("prompt of the wrong type", "p.jsonl", b'{"prompt": 7}\n', {}, ["{file} row 1:", "'prompt' must be a string", "int"]),
    ("empty prompt", "p.jsonl", b'{"prompt": "a"}\n\n{"prompt": "  "}\n', {}, ["{file} row 2 (line 3):", "'prompt' is empty"]),
    ("message without a role", "p.jsonl", b'{"prompt": [{"content": "hi"}]}\n', {}, ["{file} row 1:", "prompt[0]", "role"]),
    ("row not an object", "p.jsonl", b'{"prompt": "a"}\n["b"]\n', {}, ["{file} row 2:", "object of columns", "list"]),
    ("duplicate id", "p.jsonl", b'{"prompt": "a", "id": 1}\n{"prompt": "b", "id": 1}\n', {"id_column": "id"},
     ["{file} row 2:", "id '1'", "earlier row"]),
    ("reserved column name", "p.jsonl", b'{"prompt": "a", "completions": "x"}\n', {}, ["{file} row 1:", "'completions'"]),
    ("CSV not UTF-8", "p.csv", b"prompt,answer\ncaf\xe9,1\n", {}, ["{file} line 2: not UTF-8", "byte 0xe9 at column 4"]),
    ("CSV missing prompt column", "p.csv", b"question,answer\nwhat,1\n", {}, ["{file} row 1 (line 2):", "no column 'prompt'"]),
    ("empty file", "p.jsonl", b"\n\n", {}, ["{file}", "no rows"]),
    ("unknown format", "p.txt", b"hello\n", {}, ["{file}", "unknown format '.txt'"]),
    ("missing file", "absent.jsonl", None, {}, ["{file}", "no such file"]),
    ("eval_fraction out of range", "p.jsonl", b'{"prompt": "a"}\n', {"eval_fraction": 1.5}, ["env.options.eval_fraction", "1.5"]),
]

SWE_ROW = ('{"instance_id": "x-1", "repo": "o/x", "base_commit": "abc", "problem_statement": "p", '
           '"patch": "diff --git a/x.py b/x.py", "test_patch": "diff --git a/t.py b/t.py", '
           '"FAIL_TO_PASS": ["t.py::test_a"], "PASS_TO_PASS": []')
# code task rows: (id, file name, file bytes, what the message must contain)
TASKS = [
    ("JSON error on row 2", "t.jsonl", (SWE_ROW + "}\n" + SWE_ROW + "\n").encode(), ["{file}: row 2: not valid JSON", "at column 218"]),
    ("not UTF-8", "t.jsonl", b'{"instance_id": "caf\xe9"}\n', ["{file}: line 1: not UTF-8", "byte 0xe9"]),
    ("neither SWE-bench nor recipe", "t.jsonl", b'{"id": 1, "text": "x"}\n', ["{file}: row 1", "neither a SWE-bench row", "fields: ['id', 'text']"]),
    ("missing field", "t.jsonl", SWE_ROW.replace('"repo": "o/x", ', "").encode() + b"}\n", ["{file}: row 1", "missing field 'repo'"]),
    ("FAIL_TO_PASS not a list", "t.jsonl", SWE_ROW.replace('["t.py::test_a"]', "3").encode() + b"}\n",
     ["{file}: row 1", "'FAIL_TO_PASS' must be a list of test ids"]),
    ("not a pytest node id", "t.jsonl", SWE_ROW.replace('["t.py::test_a"]', '["test_a (m.C)"]').encode() + b"}\n",
     ["{file}: row 1", "'test_a (m.C)' is not a pytest node id"]),
    ("bad difficulty", "t.jsonl", SWE_ROW.encode() + b', "difficulty": "trivial"}\n', ["{file}: row 1", "'difficulty'", "'trivial'"]),
    ("negative timeout", "t.jsonl", SWE_ROW.encode() + b', "timeout": -5}\n', ["{file}: row 1", "'timeout' must be a positive number"]),
    ("patch not git-style", "t.jsonl", SWE_ROW.replace('"patch": "diff --git a/x.py b/x.py"', '"patch": "--- x"').encode() + b"}\n",
     ["{file}: row 1", "'patch' is not a git-style patch"]),
    ("recipe workdir missing", "t.jsonl", b'{"instance_id": "r", "workdir": "nowhere", "problem_statement": "p", '
     b'"test_patch": "diff --git a/t b/t", "test_command": "pytest", "timeout": 10}\n', ["{file}: row 1", "field 'workdir'", "not a directory"]),
    (".json not a list", "t.json", b'{"instance_id": "x"}\n', ["{file}", "must hold a list of rows"]),
    ("row not an object", "t.jsonl", b"[1, 2]\n", ["{file}: row 1", "expected an object, got list"]),
]


def _message_parts(parts: list[str], file: Path) -> list[str]:
    return [part.replace("{file}", str(file)) for part in parts]


def config_error(tmp_path: Path, text, overrides: list[str]) -> tuple[str, Path]:
    path = tmp_path / "bad.yaml"
    if text is not None:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as caught:
        load_config(path if text is not None else None, overrides)
    return str(caught.value), path


@pytest.mark.parametrize("case", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_bad_config_is_refused_naming_the_field(tmp_path, case):
    _, text, overrides, parts = case
    message, path = config_error(tmp_path, text, overrides)
    for part in _message_parts(parts, path):
        assert part in message, message
    assert message.count("\n") <= 1, message  # one problem: at most "invalid <source>:" and its line


def row_error(tmp_path: Path, name: str, data: bytes | None, options: dict) -> tuple[str, Path]:
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(DatasetError) as caught:
        make_tasks("train", 100, path=str(path), **options)
    return str(caught.value), path


@pytest.mark.parametrize("case", ROWS, ids=[c[0] for c in ROWS])
def test_bad_prompt_row_is_refused_naming_the_row(tmp_path, case):
    _, name, data, options, parts = case
    message, path = row_error(tmp_path, name, data, options)
    for part in _message_parts(parts, path):
        assert part in message, message
    assert "\n" not in message


def task_error(tmp_path: Path, name: str, data: bytes) -> tuple[str, Path]:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(RowError) as caught:
        load_records(path, mirrors=tmp_path, options={"build_venvs": False})
    return str(caught.value), path


@pytest.mark.parametrize("case", TASKS, ids=[c[0] for c in TASKS])
def test_bad_task_row_is_refused_naming_the_row(tmp_path, case):
    _, name, data, parts = case
    message, path = task_error(tmp_path, name, data)
    for part in _message_parts(parts, path):
        assert part in message, message
    assert "\n" not in message


# files every command-line case finds in its folder {tmp}
CLI_FILES = {"bad.yaml": b"train:\n  steps: [2\n", "latin1.yaml": b"name: caf\xe9\n", "p.jsonl": b'{"prompt": "caf\xe9"}\n',
             "t.jsonl": b'{"instance_id": "caf\xe9"}\n'}
# command lines: (id, argv with {tmp} for a fresh folder, exit code, what stderr must contain)
CLI = [
    ("config not valid YAML", ["train", "{tmp}/bad.yaml"], 2, ["config file {tmp}/bad.yaml is not valid YAML: line 3"]),
    ("config not UTF-8", ["train", "{tmp}/latin1.yaml"], 2, ["config file {tmp}/latin1.yaml is not UTF-8: byte 0xe9 on line 1"]),
    ("override value not YAML", ["train", "algo.lr=[1,"], 2, ["override 'algo.lr=[1,': the value is not valid YAML"]),
    ("prompt row not UTF-8", ["envs", "show", "dataset", "-o", "path={tmp}/p.jsonl"], 2, ["{tmp}/p.jsonl line 1: not UTF-8"]),
    ("task row not UTF-8", ["envs", "validate", "code", "-o", "source={tmp}/t.jsonl"], 2, ["{tmp}/t.jsonl: line 1: not UTF-8"]),
    ("missing config file", ["train", "{tmp}/nope.yaml"], 2, ["config file {tmp}/nope.yaml does not exist"]),
    ("bad override syntax", ["train", "configs/quickstart.yaml", "a.b"], 2, ["override 'a.b' must look like key.path=value"]),
    ("unknown option", ["train", "--resume-from", "x"], 2, ["unrecognized arguments: --resume-from"]),
    ("unknown subcommand", ["trian"], 2, ["invalid choice: 'trian'"]),
    ("--resume of a folder that is no run", ["train", "--resume", "{tmp}"], 2, ["{tmp} has no config.yaml: is it a run folder?"]),
    ("--resume with a config file", ["train", "configs/quickstart.yaml", "--resume", "{tmp}"], 2,
     ["--resume reads the run's saved config.yaml"]),
    ("eval of a folder without checkpoint", ["eval", "--checkpoint", "{tmp}"], 2, ["no checkpoint found in {tmp}"]),
    ("eval --k above --samples", ["eval", "--k", "4", "--samples", "2"], 2, ["--k 4 needs --samples >= 4"]),
    ("eval --no-greedy without --samples", ["eval", "--no-greedy"], 2, ["--no-greedy needs --samples >= 1"]),
    ("export of a folder that is no run", ["export", "{tmp}", "--out", "{tmp}/out"], 2, ["{tmp} is not a run folder"]),
    ("envs option without =", ["envs", "show", "arith", "-o", "hops"], 2, ["--option takes KEY=VALUE, got 'hops'"]),
    ("envs show of an unknown family", ["envs", "show", "arithm"], 2, ["unknown environment 'arithm'; known: arith"]),
    ("dataset file missing", ["envs", "show", "dataset", "-o", "path={tmp}/absent.jsonl"], 2, ["{tmp}/absent.jsonl: no such file"]),
    ("code source missing", ["envs", "validate", "code", "-o", "source={tmp}/rows.jsonl"], 2, ["{tmp}/rows.jsonl: no such file"]),
    ("agent workspace missing", ["agent", "--workspace", "{tmp}/ws", "fix it"], 2, ["--workspace {tmp}/ws is not a folder"]),
]


# cases that need a change outside the modules this table's author owns (see the docs page)
PENDING: dict[str, str] = {}  # case name -> why it still gives a traceback (strict xfail)


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0], marks=[pytest.mark.xfail(strict=True, reason=PENDING[c[0]])]
                                               if c[0] in PENDING else []) for c in CLI])
def test_bad_command_line_exits_2_naming_what_is_wrong(tmp_path, capsys, case):
    from rlyard.cli import main

    _, argv, code, parts = case
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    for name, data in CLI_FILES.items():
        (tmp_path / name).write_bytes(data)
    try:
        returned = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        returned = exit_.code
    err = capsys.readouterr().err
    assert returned == code, err
    for part in parts:
        assert part.replace("{tmp}", str(tmp_path)) in err, err


def test_no_traceback_reaches_the_command_line(tmp_path):
    """The real entry point in fresh processes (side by side, each import costs seconds): one
    `rlyard: ...` line on stderr, exit 2, for a config, a prompt row and a task row."""
    for name, data in CLI_FILES.items():
        (tmp_path / name).write_bytes(data)
    runs = [case for case in CLI if case[0] in ("config not valid YAML", "prompt row not UTF-8", "task row not UTF-8")]
    procs = [subprocess.Popen([sys.executable, "-m", "rlyard.cli", *(a.replace("{tmp}", str(tmp_path)) for a in argv)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _, argv, _, _ in runs]
    for (name, _, code, parts), proc in zip(runs, procs):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == code, (name, err)
        assert "Traceback" not in err and err.startswith("rlyard: ") and err.count("\n") == 1, (name, err)
        assert all(part.replace("{tmp}", str(tmp_path)) in err for part in parts), (name, err)


# ---------------------------------------------------------------- the docs table

def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_docs(tmp: Path) -> str:
    """docs/reliability_inputs.md from the tables, with the messages rlyard gives today."""
    from rlyard.cli import main

    rows = []
    for name, text, overrides, _ in CONFIGS:
        folder = tmp / f"c{len(rows)}"
        folder.mkdir()
        message, path = config_error(folder, text, overrides)
        shown = (text.decode("latin-1") if isinstance(text, bytes) else text or "").strip()
        given = " ".join(filter(None, [f"`{shown}`" if shown else "", " ".join(f"`{o}`" for o in overrides)]))
        rows.append(("config", name, given, message.replace(str(path), "bad.yaml")))
    for name, file, data, options, _ in ROWS:
        folder = tmp / f"r{len(rows)}"
        folder.mkdir()
        message, path = row_error(folder, file, data, options)
        rows.append(("prompt rows", name, f"`{file}`" + (f" options `{options}`" if options else ""),
                     message.replace(str(path), file)))
    for name, file, data, _ in TASKS:
        folder = tmp / f"t{len(rows)}"
        folder.mkdir()
        message, path = task_error(folder, file, data)
        rows.append(("code task rows", name, f"`{file}`", message.replace(str(path), file).replace(str(folder), "DIR")))
    for name, argv, code, _ in CLI:
        folder = tmp / f"l{len(rows)}"
        folder.mkdir()
        argv = [a.replace("{tmp}", str(folder)) for a in argv]
        for file, data in CLI_FILES.items():
            (folder / file).write_bytes(data)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                main(argv)
                last = [line for line in err.getvalue().splitlines() if line.strip()][-1]
            except SystemExit:
                last = [line for line in err.getvalue().splitlines() if line.strip()][-1]
            except Exception as error:  # a PENDING case
                last = f"**today a traceback** ({type(error).__name__}: {error}); pending: {PENDING[name]}"
        shown = " ".join(argv).replace(str(folder), "DIR")
        rows.append(("command line", name, f"`rlyard {shown}`", last.replace(str(folder), "DIR") + f" (exit {code})"))
    lines = ["# Bad input: what rlyard refuses, and how it says so", "",
             "Every malformed config, prompt row, code task row and command line below is refused with one",
             "message naming the field, the row (line) or the file; the command line exits 2 with one",
             "`rlyard: ...` line and no Python traceback. Each row is a test case of",
             "`tests/test_bad_input.py`, which also checks the real entry point in fresh processes for",
             "tracebacks. This page is written by `python tests/test_bad_input.py` (the messages as rlyard",
             "gives them today; temporary folders shown as DIR, the working folder as CWD). How faults during a run are survived:",
             "[reliability.md](reliability.md); sandboxes under load and their per-sandbox limits:",
             "[sandbox.md](sandbox.md#per-sandbox-limits-cgroups-and-the-fallback).", "",
             f"{len(rows)} cases.", "", "| kind | case | input | error |", "|---|---|---|---|"]
    lines += [f"| {kind} | {name} | {_cell(given)} | {_cell(message)} |" for kind, name, given, message in rows]
    return "\n".join(lines).replace(str(Path.cwd()), "CWD") + "\n"  # no path of the generating machine


def test_the_docs_table_lists_every_case():
    text = DOCS.read_text()
    for folder in {str(Path.cwd()), str(DOCS.parent.parent), str(Path.home())}:
        assert folder not in text, f"{DOCS} names a folder of the machine that wrote it ({folder}): run python tests/test_bad_input.py"
    for table in (CONFIGS, ROWS, TASKS, CLI):
        for case in table:
            assert f"| {case[0]} |" in text, f"{case[0]!r} missing from {DOCS}: run python tests/test_bad_input.py"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        with pytest.MonkeyPatch.context():
            DOCS.write_text(render_docs(Path(folder)))
    print(f"wrote {DOCS}")
