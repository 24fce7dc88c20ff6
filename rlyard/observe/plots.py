"""Reward curve PNG from a run's metrics.jsonl.

Uses matplotlib's object API with the Agg canvas instead of pyplot: it renders without a
display and never switches the global backend of a process (e.g. a notebook) that imports us.
"""
from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rlyard.observe.metrics import read_metrics
from rlyard.observe.store import write_atomic

EVAL_KEY = "eval/accuracy"


def plot_reward_curve(metrics_path: Path, out_png: Path, key: str = "reward/mean") -> Path:
    """Plot `key` per step (light), its moving average and any eval/accuracy points.

    The PNG is written atomically, so a dashboard polling it never reads half an image.
    Raises ValueError naming the file when no row has `key`.
    """
    metrics_path, out_png = Path(metrics_path), Path(out_png)
    rows = read_metrics(metrics_path)
    steps, values = _series(rows, key)
    if not steps:
        raise ValueError(f"{metrics_path}: no rows with {key!r} to plot")
    window = max(1, len(values) // 10)

    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(steps, values, color="tab:blue", alpha=0.3, linewidth=1, label=key)
    ax.plot(steps, _moving_average(values, window), color="tab:blue", linewidth=2,
            label=f"moving average ({window} steps)")
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.set_title(f"{metrics_path.parent.name}: {key}")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()

    eval_steps, accuracy = _series(rows, EVAL_KEY)
    if eval_steps:
        # Own axis: accuracy lives in [0, 1] while the reward scale is the env's choice.
        ax_eval = ax.twinx()
        ax_eval.plot(eval_steps, accuracy, "o--", color="tab:orange", label=EVAL_KEY)
        ax_eval.set_ylabel(EVAL_KEY)
        ax_eval.set_ylim(-0.02, 1.02)
        more_handles, more_labels = ax_eval.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels, loc="best")
    fig.tight_layout()

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    out_png.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out_png, buf.getvalue())
    return out_png


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of rows with a finite number under `key`, in step order."""
    points = sorted(
        (row["step"], float(row[key])) for row in rows
        if isinstance(row.get(key), (int, float)) and math.isfinite(row[key])
    )
    return [s for s, _ in points], [v for _, v in points]


def _moving_average(values: list[float], window: int) -> np.ndarray:
    """Trailing mean over `window` points; the first points average what exists so far."""
    csum = np.concatenate([[0.0], np.cumsum(values)])
    end = np.arange(1, len(values) + 1)
    start = np.maximum(0, end - window)
    return (csum[end] - csum[start]) / (end - start)
