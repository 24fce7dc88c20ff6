"""The MLflow sink (`output.mlflow`): runs that MLflow itself reads back from the local store
(mlruns/ beside the run folder) or a given tracking URI, ended by status also on a crash or
Ctrl-C, and a clear error without the package."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlyard.config import load_config
from rlyard.observe import MetricsLogger

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

CONFIG = {"algo": {"lr": 0.0002, "lr_schedule": "cosine"}, "model": {"lora": {"target_modules": ["q_proj", "v_proj"]}},
          "env": {"options": {}}, "output": {"run_dir": None}}


def local_client(runs: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{runs / 'mlruns' / 'mlflow.db'}")


def the_runs(client: MlflowClient, experiment: str = "rlyard") -> list:
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id], order_by=["attributes.start_time ASC"])


def history(client: MlflowClient, run, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))


def test_params_metrics_and_status_read_back(tmp_path):
    run_dir = tmp_path / "runs" / "try1"
    with MetricsLogger(run_dir, total_steps=3, config=CONFIG, progress=False, mlflow=True) as logger:
        for step in (1, 2, 3):
            logger.log(step, {"reward/mean": 0.1 * step, "loss/policy": -step, "note": "text is not a metric"})
    client = local_client(tmp_path / "runs")
    [run] = the_runs(client)
    assert run.info.status == "FINISHED" and run.info.run_name == "try1"
    assert run.data.tags["rlyard.run_dir"] == str(run_dir.resolve())
    params = run.data.params
    assert params["algo.lr"] == "0.0002" and params["algo.lr_schedule"] == "cosine" and params["output.run_dir"] == "None"
    assert json.loads(params["model.lora.target_modules"]) == ["q_proj", "v_proj"] and params["env.options"] == "{}"
    series = history(client, run, "reward/mean")
    assert [step for step, _ in series] == [1, 2, 3] and [value for _, value in series] == pytest.approx([0.1, 0.2, 0.3])
    assert history(client, run, "loss/policy") == [(1, -1.0), (2, -2.0), (3, -3.0)]
    assert "note" not in run.data.metrics


@pytest.mark.parametrize("error, status", [(RuntimeError, "FAILED"), (KeyboardInterrupt, "KILLED")])
def test_a_crash_or_ctrl_c_ends_the_run_with_its_status(tmp_path, error, status):
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    with pytest.raises(error):
        with MetricsLogger(tmp_path / "run", total_steps=5, progress=False, mlflow=True, mlflow_tracking_uri=uri,
                           mlflow_experiment="crashes") as logger:
            logger.log(1, {"reward/mean": 0.5})
            raise error()
    client = MlflowClient(tracking_uri=uri)
    [run] = the_runs(client, "crashes")
    assert run.info.status == status and history(client, run, "reward/mean") == [(1, 0.5)]
    assert not (tmp_path / "mlruns").exists()  # a given tracking URI is used as it is


def test_without_mlflow_the_error_names_the_install(tmp_path, monkeypatch):
    for name in [n for n in sys.modules if n == "mlflow" or n.startswith("mlflow.")]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"pip install 'rlyard\[mlflow\]'"):
        MetricsLogger(tmp_path, total_steps=1, progress=False, mlflow=True)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_an_sft_run_logs_to_mlflow_and_a_stopped_one_ends_killed(tmp_path, tiny_model_dir, monkeypatch):
    import rlyard.sft.train as sft_train
    from tests.test_sft import demo, write_jsonl

    data = write_jsonl(tmp_path / "demos.jsonl", [demo(1), demo(2)] * 3)
    runs = tmp_path / "runs"

    def config(name: str):
        return load_config(None, [f"sft.data={data}", f"model.name={tiny_model_dir}", f"output.run_dir={runs / name}",
                                  "output.progress=false", "output.plot=false", "sft.batch_size=2", "sft.micro_batch_size=1",
                                  "sft.steps=3", "sft.eval_every=3", "sft.lr=1e-2", "output.checkpoint_every=1",
                                  "output.mlflow=true"])

    sft_train.train_sft(config("whole"), runs / "whole")
    save = sft_train.save_checkpoint

    def stopped_at_step_2(run_dir, step, *args, **kwargs):
        if step == 2:
            raise KeyboardInterrupt
        return save(run_dir, step, *args, **kwargs)

    monkeypatch.setattr(sft_train, "save_checkpoint", stopped_at_step_2)
    with pytest.raises(KeyboardInterrupt):
        sft_train.train_sft(config("stopped"), runs / "stopped")

    client = local_client(runs)
    whole, stopped = the_runs(client)
    assert (whole.info.run_name, whole.info.status) == ("whole", "FINISHED")
    assert (stopped.info.run_name, stopped.info.status) == ("stopped", "KILLED")
    assert whole.data.params["sft.steps"] == "3" and whole.data.params["output.mlflow"] == "True"
    assert [step for step, _ in history(client, whole, "loss/train")] == [1, 2, 3]
    assert [step for step, _ in history(client, whole, "eval/loss")] == [0, 3]
    rows = [json.loads(line) for line in (runs / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert [value for _, value in history(client, whole, "loss/train")] == pytest.approx([r["loss/train"] for r in rows if "loss/train" in r])
    assert [step for step, _ in history(client, stopped, "loss/train")] == [1, 2]


def test_an_rl_run_logs_to_mlflow(tmp_path, tiny_model_dir):
    from rlyard.orchestrate.entry import train

    run_dir = tmp_path / "runs" / "rl"
    train(load_config(None, [f"model.name={tiny_model_dir}", "env.name=toy", "env.train_size=4", "rollout.prompts_per_step=1",
                             "rollout.n=4", "rollout.max_new_tokens=4", "eval.size=0", "train.steps=2", "output.progress=false",
                             "output.plot=false", f"output.run_dir={run_dir}", "output.mlflow=true"]), run_dir)
    client = local_client(tmp_path / "runs")
    [run] = the_runs(client)
    assert run.info.status == "FINISHED" and run.data.params["train.steps"] == "2"
    assert [step for step, _ in history(client, run, "reward/mean")] == [1, 2]
