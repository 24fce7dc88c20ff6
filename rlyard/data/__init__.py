"""Task datasets: deterministic shuffling and resumable iteration."""
from rlyard.data.stream import TaskStream, stream_seed

__all__ = ["TaskStream", "stream_seed"]
