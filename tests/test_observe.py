"""Run output survives kills and resumes: metrics.jsonl, trajectories.jsonl, plots, sinks."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from rlyard.observe import (
    MetricsLogger,
    TrajectoryStore,
    plot_reward_curve,
    read_metrics,
    trajectory_row,
)
from rlyard.types import Trajectory


def _log_steps(run_dir: Path, steps: range, start_step: int = 0, **kwargs) -> None:
    with MetricsLogger(run_dir, total_steps=10, start_step=start_step, progress=False, **kwargs) as m:
        for step in steps:
            m.log(step, {"reward/mean": step / 10, "loss/policy": -step, "time/step": 0.5})


def test_metrics_lines_written_and_reread(tmp_path):
    _log_steps(tmp_path, range(1, 4))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows[1] == {"step": 2, "reward/mean": 0.2, "loss/policy": -2, "time/step": 0.5}


def test_log_rejects_step_key(tmp_path):
    with MetricsLogger(tmp_path, total_steps=1, progress=False) as m:
        with pytest.raises(ValueError, match="step"):
            m.log(1, {"step": 3.0})


def test_resume_truncates_steps_after_checkpoint(tmp_path):
    _log_steps(tmp_path, range(1, 6))  # killed after step 5, checkpoint at step 3
    _log_steps(tmp_path, range(4, 7), start_step=3)
    steps = [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert not list(tmp_path.glob("*.tmp")), "atomic rewrite left its temp file"


def test_truncated_last_line_is_tolerated_and_healed_on_resume(tmp_path):
    _log_steps(tmp_path, range(1, 4))
    path = tmp_path / "metrics.jsonl"
    with open(path, "a") as f:
        f.write('{"step": 4, "reward/me')  # the writer was killed mid-line
    assert [row["step"] for row in read_metrics(path)] == [1, 2, 3]
    _log_steps(tmp_path, range(4, 5), start_step=3)
    assert [row["step"] for row in read_metrics(path)] == [1, 2, 3, 4]


def test_corrupt_middle_line_raises(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        read_metrics(path)


def test_progress_bar_ticks_once_per_step_with_short_postfix(tmp_path, capsys):
    m = MetricsLogger(tmp_path, total_steps=10, start_step=2)
    m.log(3, {"reward/mean": 0.5, "reward/pass_rate": 0.25, "time/step": 1.234})
    assert m._bar.postfix == "reward=0.500, pass=0.25, step=1.2s"
    m.log(3, {"eval/accuracy": 0.7})  # a second row for the same step does not tick
    m.log(4, {"reward/mean": 0.75})
    assert m._bar.n == 4 and m._bar.postfix == "reward=0.750"
    m.write("hello from the trainer")
    m.close()
    m.close()  # idempotent
    assert "hello from the trainer" in capsys.readouterr().out


def test_tensorboard_sink_writes_event_file(tmp_path):
    pytest.importorskip("torch.utils.tensorboard")  # tensorboard and its deps
    _log_steps(tmp_path, range(1, 3), tensorboard=True)
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_missing_tensorboard_gives_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'rlyard\[tensorboard\]'"):
        MetricsLogger(tmp_path, total_steps=1, tensorboard=True, progress=False)


def test_wandb_sink_is_offline_and_forwards_scalars(tmp_path, monkeypatch):
    calls = {}

    class FakeRun:
        def log(self, data, step):
            calls.setdefault("log", []).append((step, data))

        def finish(self):
            calls["finished"] = True

    def init(**kwargs):
        calls["init"] = kwargs
        return FakeRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    with MetricsLogger(tmp_path, total_steps=2, wandb=True, wandb_project="p",
                       config={"lr": 1e-5}, progress=False) as m:
        m.log(1, {"reward/mean": 0.5, "rollout/note": "text is not a scalar"})
    assert calls["init"] == {"mode": "offline", "dir": str(tmp_path), "project": "p",
                             "config": {"lr": 1e-5}}
    assert calls["log"] == [(1, {"reward/mean": 0.5})]
    assert calls["finished"]


def test_missing_wandb_gives_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'rlyard\[wandb\]'"):
        MetricsLogger(tmp_path, total_steps=1, wandb=True, progress=False)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_store_append_truncate_and_cut_tail(tmp_path):
    store = TrajectoryStore(tmp_path)  # a run dir -> run_dir/trajectories.jsonl
    assert store.path == tmp_path / "trajectories.jsonl"
    store.append(1, [{"task_id": "a", "reward": 1.0}, {"task_id": "b", "reward": 0.0}])
    store.append(2, [{"task_id": "c", "completion": "héllo"}])
    rows = store.read()
    assert [(r["step"], r["task_id"]) for r in rows] == [(1, "a"), (1, "b"), (2, "c")]
    assert "héllo" in store.path.read_text(encoding="utf-8")  # readable, not \u escapes

    # Killed mid-write, cut inside a two-byte UTF-8 character.
    with open(store.path, "ab") as f:
        f.write('{"step": 3, "completion": "é'.encode()[:-1])
    assert [r["step"] for r in TrajectoryStore(store.path).read()] == [1, 1, 2]

    resumed = TrajectoryStore(store.path)
    resumed.append(3, [{"task_id": "d"}])  # first append drops the cut line
    assert [r["step"] for r in resumed.read()] == [1, 1, 2, 3]
    resumed.truncate_after(1)
    assert [r["task_id"] for r in resumed.read()] == ["a", "b"]


def test_trajectory_row_is_text_not_tokens():
    traj = Trajectory(
        task_id="t1", group_id="g1", token_ids=[5, 6, 7, 8], loss_mask=[0, 0, 1, 1],
        behaviour_logprobs=[0.0, 0.0, -0.1, -0.2], policy_versions=[-1, -1, 0, 0],
        reward=1.0, components={"correct": 1.0}, finish_reason="stop", completion_text="42",
    )
    row = trajectory_row(traj, prompt_text="What is 6*7?")
    assert row == {
        "task_id": "t1", "group_id": "g1", "prompt": "What is 6*7?", "completion": "42",
        "num_tokens": 2, "reward": 1.0, "components": {"correct": 1.0},
        "finish_reason": "stop", "infra_error": False, "turns": 1, "policy_versions": [0], "info": {},
    }
    json.dumps(row)  # must be writable as one jsonl row
    assert trajectory_row(traj, prompt_text="", advantage=0.5)["advantage"] == 0.5
    long = trajectory_row(Trajectory(**{**traj.to_dict(), "info": {"output": "x" * 9000, "exit": 3}}), prompt_text="")
    assert long["info"]["exit"] == 3 and long["info"]["output"].startswith("x" * 8000)
    assert long["info"]["output"].endswith("[... 1000 more characters]")


def test_trajectory_row_segments_follow_the_loss_mask(tokenizer):
    """The runs after the prompt, per-token text and logprobs on sampled runs; a character split
    across tokens is one piece with the sum of its tokens' logprobs."""
    prompt, call, tool = (tokenizer.encode(t, add_special_tokens=False) for t in ("Q: ", "grep x", "\nx.txt: 7\n"))
    han = tokenizer.encode("漢", add_special_tokens=False)
    assert len(han) > 1 and tokenizer.decode(han[:1]).endswith("\ufffd")  # "漢": three bytes, three tokens
    ids = prompt + call + tool + han
    mask = [0] * len(prompt) + [1] * len(call) + [0] * len(tool) + [1] * len(han)
    logprobs = [-0.25 * m for m in mask]
    traj = Trajectory(task_id="t", group_id="g", token_ids=ids, loss_mask=mask, behaviour_logprobs=logprobs,
                      policy_versions=[3 * m - (1 - m) for m in mask])
    row = trajectory_row(traj, prompt_text="Q: ", tokenizer=tokenizer)
    model, output, last = row["segments"]
    assert model == {"sampled": True, "pieces": [tokenizer.decode([i]) for i in call], "logprobs": [-0.25] * len(call)}
    assert "".join(model["pieces"]) == "grep x"
    assert output == {"sampled": False, "text": "\nx.txt: 7\n"}
    assert last == {"sampled": True, "pieces": ["漢"], "logprobs": [-0.25 * len(han)]}
    assert row["policy_versions"] == [3]


def test_plot_reward_curve_writes_png(tmp_path):
    run_dir = tmp_path / "my-run"
    with MetricsLogger(run_dir, total_steps=30, progress=False) as m:
        for step in range(1, 31):
            m.log(step, {"reward/mean": step / 30 + (step % 3) * 0.05})
            if step % 10 == 0:
                m.log(step, {"eval/accuracy": step / 40})
    out = plot_reward_curve(run_dir / "metrics.jsonl", run_dir / "plots" / "reward.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 1024
    assert not list(out.parent.glob("*.tmp"))


def test_plot_raises_when_key_missing(tmp_path):
    _log_steps(tmp_path, range(1, 3))
    with pytest.raises(ValueError, match="metrics.jsonl"):
        plot_reward_curve(tmp_path / "metrics.jsonl", tmp_path / "r.png", key="reward/none")
    assert not (tmp_path / "r.png").exists()
