"""Run metrics: one JSON line per step, a live progress bar, optional TensorBoard, W&B and MLflow.

`metrics.jsonl` is the source of truth that plots and tests read; the sinks only mirror it.
Each line is fsynced, so a killed run keeps every step it finished, and a resumed run first
cuts the file back to its checkpoint step, so no step appears twice.
Keys are written as given; the trainer uses the reward/, loss/, rollout/, time/ and
progress/ namespaces.
"""
from __future__ import annotations

import json
import numbers
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tqdm import tqdm

from rlyard.observe.store import keep_through_step, read_jsonl

METRICS_FILE = "metrics.jsonl"

# (postfix label, metric key, format): kept short so the bar fits on one terminal line.
_POSTFIX = (
    ("reward", "reward/mean", "{:.3f}"),
    ("pass", "reward/pass_rate", "{:.2f}"),
    ("step", "time/step", "{:.1f}s"),
)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl; a last line cut off by a killed writer is skipped."""
    return read_jsonl(Path(path))


class MetricsLogger:
    """Writes `run_dir/metrics.jsonl`, drives the progress bar and forwards to the sinks.

    Steps count completed optimizer steps; `start_step` is the step of the checkpoint a run
    resumes from (0 for a fresh run). Use as a context manager or call `close()`.
    """

    def __init__(
        self,
        run_dir: Path,
        total_steps: int,
        start_step: int = 0,
        tensorboard: bool = False,
        wandb: bool = False,
        wandb_project: str = "rlyard",
        config: dict | None = None,
        progress: bool = True,
        *,
        mlflow: bool = False,
        mlflow_tracking_uri: str | None = None,
        mlflow_experiment: str = "rlyard",
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        self._file = None
        self._tb = None
        self._wandb = None
        self._mlflow: _MlflowRun | None = None
        self._bar: tqdm | None = None
        self._last_step: int = start_step  # a row at the start step (the base eval) does not tick
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            # Sinks first: a missing package should fail before the jsonl is touched.
            if tensorboard:
                self._tb = _open_tensorboard(self.run_dir, start_step)
            if wandb:
                self._wandb = _open_wandb(self.run_dir, wandb_project, config)
            if mlflow:
                self._mlflow = _MlflowRun(self.run_dir, mlflow_tracking_uri, mlflow_experiment, config, start_step)
            if self.path.exists():
                # Steps after the checkpoint are redone by this run; also drops a cut last line.
                keep_through_step(self.path, start_step)
            self._file = open(self.path, "a", encoding="utf-8")
            self._bar = tqdm(
                total=total_steps, initial=start_step, disable=not progress,
                unit="step", dynamic_ncols=True,
            )
        except BaseException:
            self.close()
            raise

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Append `{"step": step, **metrics}` durably, tick the bar, forward to the sinks."""
        if "step" in metrics:
            raise ValueError("metrics may not contain the key 'step'; pass it as the step argument")
        metrics = {key: _plain(value) for key, value in metrics.items()}
        self._file.write(json.dumps({"step": step, **metrics}) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

        scalars = {k: v for k, v in metrics.items() if isinstance(v, numbers.Real)}
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        if self._mlflow is not None:
            self._mlflow.log(step, scalars)

        # Postfix without a refresh; the tick below redraws. Rows sharing a step (e.g. a
        # separate eval row) tick once.
        postfix = {label: fmt.format(metrics[key]) for label, key, fmt in _POSTFIX
                   if isinstance(metrics.get(key), numbers.Real)}
        if postfix:
            self._bar.set_postfix(postfix, refresh=False)
        if step != self._last_step:
            self._last_step = step
            self._bar.update(1)

    def write(self, msg: str) -> None:
        """Print a line above the progress bar instead of through it."""
        tqdm.write(msg)

    def close(self) -> None:
        """Close the bar, the file and the sinks; safe to call twice. Called while an exception
        propagates (a crash, Ctrl-C), the MLflow run ends FAILED or KILLED rather than FINISHED."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        if self._mlflow is not None:
            error = sys.exc_info()[0]
            self._mlflow.end("FINISHED" if error is None else "KILLED" if issubclass(error, KeyboardInterrupt) else "FAILED")
            self._mlflow = None

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _plain(value: Any) -> Any:
    """numpy / torch scalars -> Python numbers, so json and the sinks accept them."""
    if not isinstance(value, (bool, int, float, str)) and hasattr(value, "item"):
        return value.item()
    return value


def _open_tensorboard(run_dir: Path, start_step: int) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        # The cause is kept in the message: a broken dependency (e.g. protobuf) fails the same way.
        raise ImportError(
            f"tensorboard=True needs the tensorboard package: pip install 'rlyard[tensorboard]' ({e})"
        ) from e
    # purge_step hides events a killed run wrote after its checkpoint, like the jsonl cut.
    purge_step = start_step + 1 if start_step > 0 else None
    return SummaryWriter(log_dir=str(run_dir / "tb"), purge_step=purge_step)


def _open_wandb(run_dir: Path, project: str, config: dict | None) -> Any:
    try:
        import wandb
    except ImportError as e:
        raise ImportError(f"wandb=True needs the wandb package: pip install 'rlyard[wandb]' ({e})") from e
    # Offline: training never waits on or fails for the network; `wandb sync` uploads later.
    return wandb.init(mode="offline", dir=str(run_dir), project=project, config=config)


class _MlflowRun:
    """One MLflow run per process (like W&B's offline runs): a resumed run opens a new one, tagged
    with the same run folder, so each holds exactly the steps that process logged.

    Through `MlflowClient` rather than `mlflow.start_run`: no global active run, so two loggers in
    one process (tests, notebooks) cannot end each other's run. Without a tracking URI the store is
    an SQLite database in `mlruns/` beside the run folder: MLflow 3's file store refuses to open
    unless MLFLOW_ALLOW_FILE_STORE is set, and a process-wide variable is not rlyard's to set.
    """

    PARAMS_PER_CALL = 100  # MLflow's log_batch limit
    MAX_PARAM_CHARS = 6000  # the shortest value limit of MLflow's stores

    def __init__(self, run_dir: Path, tracking_uri: str | None, experiment: str, config: dict | None, start_step: int) -> None:
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise ImportError(f"mlflow=True needs the mlflow package: pip install 'rlyard[mlflow]' (mlflow-skinny, sqlalchemy, alembic) ({e})") from e
        root = run_dir.resolve().parent / "mlruns"
        if tracking_uri is None:
            try:
                import alembic  # noqa: F401  (mlflow-skinny lacks what its SQLite store needs)
                import sqlalchemy  # noqa: F401
            except ImportError as e:
                raise ImportError(f"mlflow=True with the local store (no output.mlflow_tracking_uri) needs sqlalchemy and alembic: "
                                  f"pip install 'rlyard[mlflow]' ({e})") from e
            root.mkdir(parents=True, exist_ok=True)
            tracking_uri = f"sqlite:///{root / 'mlflow.db'}"
        self.client = client = MlflowClient(tracking_uri=tracking_uri)
        found = client.get_experiment_by_name(experiment)
        # A new local experiment keeps its artifacts beside the database, not in the working folder.
        artifacts = (root / "artifacts").as_uri() if tracking_uri.startswith("sqlite:///") and found is None else None
        experiment_id = found.experiment_id if found else client.create_experiment(experiment, artifact_location=artifacts)
        tags = {"rlyard.run_dir": str(run_dir.resolve()), "rlyard.start_step": str(start_step)}
        self.run_id = client.create_run(experiment_id, run_name=run_dir.name, tags=tags).info.run_id
        params = [Param(key, value[: self.MAX_PARAM_CHARS]) for key, value in _flatten(config or {}).items()]
        for start in range(0, len(params), self.PARAMS_PER_CALL):
            client.log_batch(self.run_id, params=params[start : start + self.PARAMS_PER_CALL])

    def log(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key, float(value), now, step) for key, value in scalars.items()])

    def end(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)


def _flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """{"algo": {"lr": 2e-4}} -> {"algo.lr": "0.0002"}: MLflow params are flat strings."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return flat
