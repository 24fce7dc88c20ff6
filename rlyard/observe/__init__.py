"""Run output: metrics.jsonl with a progress bar and optional sinks, trajectories, plots."""
from rlyard.observe.metrics import MetricsLogger, read_metrics
from rlyard.observe.store import TrajectoryStore, trajectory_row

__all__ = ["MetricsLogger", "read_metrics", "TrajectoryStore", "trajectory_row", "plot_reward_curve"]


def __getattr__(name: str):
    if name == "plot_reward_curve":  # matplotlib loads only when a plot is drawn (every `rlyard` command imports this package)
        from rlyard.observe.plots import plot_reward_curve

        return plot_reward_curve
    raise AttributeError(f"module 'rlyard.observe' has no attribute {name!r}")
