"""bench/provenance.py: a result file's code version, `+dirty` only when code changed."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from provenance import command_line, commit, scrub  # noqa: E402


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args], cwd=repo,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_fresh_result_file_is_not_a_code_change(tmp_path, monkeypatch):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "first.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "figures")
    head = git(tmp_path, "rev-parse", "HEAD")
    monkeypatch.chdir(tmp_path)
    assert commit() == head
    (tmp_path / "bench" / "results" / "first.json").write_text('{"new": 1}')  # the figure run before this one
    (tmp_path / "untracked.txt").write_text("scratch")
    assert commit() == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert commit() == head + "+dirty"


def test_a_recorded_command_names_no_folder_of_the_machine(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["python", "bench/generation.py", "--vllm-python", str(tmp_path / ".venv-vllm" / "bin" / "python"),
            "--json", "/elsewhere/figures/generation.json"]
    assert command_line(argv) == ("python bench/generation.py --vllm-python .venv-vllm/bin/python "
                                  "--json <outside>/generation.json")


def test_a_result_file_shows_paths_relative_or_by_name(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.chdir(tmp_path)
    result = {"out": "/elsewhere/vs_trl.json", "run_dir": str(Path(tempfile.gettempdir()) / "vs_trl-abc"),
              "rows": [str(tmp_path / "bench" / "results" / "x.json"), "a / b", 3]}
    assert scrub(result) == {"out": "<outside>/vs_trl.json", "run_dir": "<tmp>/vs_trl-abc",
                             "rows": ["bench/results/x.json", "a / b", 3]}
