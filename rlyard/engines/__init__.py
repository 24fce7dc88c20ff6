"""Inference engines behind one interface: `generate` and `update_weights`."""
from rlyard.engines.base import Engine
from rlyard.engines.coalesce import CoalescingEngine
from rlyard.engines.hf import HFEngine
from rlyard.engines.openai_engine import OpenAIEngine, ServerError

__all__ = ["CoalescingEngine", "Engine", "HFEngine", "OpenAIEngine", "ServerError"]
