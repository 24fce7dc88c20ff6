"""Run output: metrics.jsonl with a progress bar and optional sinks, trajectories, plots."""
from rlyard.observe.metrics import MetricsLogger, read_metrics
from rlyard.observe.plots import plot_reward_curve
from rlyard.observe.store import TrajectoryStore, trajectory_row

__all__ = ["MetricsLogger", "read_metrics", "TrajectoryStore", "trajectory_row", "plot_reward_curve"]
