"""Task datasets: deterministic shuffling and resumable iteration."""
from rlyard.data.stream import TaskStream, run_tasks, stream_seed, train_pool, train_stream

__all__ = ["TaskStream", "run_tasks", "stream_seed", "train_pool", "train_stream"]
