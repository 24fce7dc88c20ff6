"""The learner: logprobs, the train step, checkpoints."""
from rlyard.train.checkpoint import find_checkpoint, latest_checkpoint, load_checkpoint, save_checkpoint
from rlyard.train.learner import Learner

__all__ = ["Learner", "find_checkpoint", "latest_checkpoint", "load_checkpoint", "save_checkpoint"]
