"""Supervised fine-tuning on tool-calling conversations (`rlyard sft`), on the rollout's very tokens."""
from rlyard.sft.data import Conversation, DataError, assistant_text, load_conversations
from rlyard.sft.train import SftResult, train_sft

__all__ = ["Conversation", "DataError", "assistant_text", "load_conversations", "SftResult", "train_sft"]
