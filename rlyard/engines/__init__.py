"""Inference engines behind one interface: `generate` and `update_weights`."""
from rlyard.engines.base import Engine
from rlyard.engines.hf import HFEngine
from rlyard.engines.openai_engine import OpenAIEngine, ServerError

__all__ = ["Engine", "HFEngine", "OpenAIEngine", "ServerError"]
