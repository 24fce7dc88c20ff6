"""Task datasets: deterministic shuffling and resumable iteration."""
from rlyard.data.stream import TaskStream

__all__ = ["TaskStream"]
