"""Task datasets: deterministic shuffling and resumable iteration."""
from rlyard.data.stream import TaskStream, stream_seed, train_stream

__all__ = ["TaskStream", "stream_seed", "train_stream"]
