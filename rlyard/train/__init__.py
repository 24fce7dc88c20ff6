"""The learner: logprobs, the train step, checkpoints."""
from rlyard.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from rlyard.train.learner import Learner

__all__ = ["Learner", "latest_checkpoint", "load_checkpoint", "save_checkpoint"]
