"""Policies: loading (embedded GGUF, HF id or path), tokenizer, LoRA."""
from rlyard.models.loading import (
    AUTOCAST_DTYPES, EMBEDDED, TORCH_DTYPES, autocast, autocast_choice, engine_dtype_choice, embedded_model_dir, load_model, load_tokenizer, resolve_model_path,
)
from rlyard.models.lora import add_lora, is_peft, reference_mode

__all__ = ["AUTOCAST_DTYPES", "EMBEDDED", "TORCH_DTYPES", "autocast", "autocast_choice", "engine_dtype_choice", "embedded_model_dir", "load_model", "load_tokenizer", "resolve_model_path", "add_lora", "is_peft", "reference_mode"]
