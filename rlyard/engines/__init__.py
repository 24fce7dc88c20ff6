"""Inference engines behind one interface: `generate` and `update_weights`."""
from rlyard.engines.base import Engine
from rlyard.engines.hf import HFEngine

__all__ = ["Engine", "HFEngine"]
