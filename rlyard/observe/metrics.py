"""Run metrics: one JSON line per step, a live progress bar, optional TensorBoard and W&B.

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
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        self._file = None
        self._tb = None
        self._wandb = None
        self._bar: tqdm | None = None
        self._last_step: int = start_step  # a row at the start step (the base eval) does not tick
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            # Sinks first: a missing package should fail before the jsonl is touched.
            if tensorboard:
                self._tb = _open_tensorboard(self.run_dir, start_step)
            if wandb:
                self._wandb = _open_wandb(self.run_dir, wandb_project, config)
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
        """Close the bar, the file and the sinks; safe to call twice."""
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
