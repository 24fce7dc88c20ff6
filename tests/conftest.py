"""Shared fixtures: the real SmolLM2 tokenizer, a tiny random llama, and toy environment families.

Everything is real (tokenizer, transformers model, engine, learner); only the model is tiny so
that the whole suite runs on a 2-core CPU in a couple of minutes.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from rlyard.envs import Family, SingleTurnEnv, register
from rlyard.types import Reward, Task

# Tiny models on a small, possibly busy CPU: one thread avoids OpenMP spin-waiting, which made
# each step ~10x slower next to a background job. RLYARD_TEST_THREADS overrides it.
torch.set_num_threads(int(os.environ.get("RLYARD_TEST_THREADS", "1")))

# --------------------------------------------------------------------------- toy environments
# "toy": one prompt, reward 1 when the reply contains TOY_TARGET. Measured on the tiny random
# llama below (temperature 1, 8 new tokens): about a quarter of the replies contain a capital
# "A", so the reward starts low but not at zero, and GRPO can push it up.
TOY_TARGET = "A"
TOY_PROMPT = "Say something."


def toy_tasks(split: str, n: int, seed: int, **options) -> list[Task]:
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}")
    target = options.get("target", TOY_TARGET)
    return [
        Task(id=f"toy-{split}-{i}", prompt=[{"role": "user", "content": TOY_PROMPT}], env="toy", payload={"target": target})
        for i in range(n)
    ]


def toy_verify(reply: str, task: Task) -> Reward:
    hit = float(task.payload["target"] in reply)
    return Reward(value=hit, components={"hit": hit})


def broken_verify(reply: str, task: Task) -> Reward:
    """Raises for replies of even length (about half of them): a grader bug, not the policy's."""
    if len(reply) % 2 == 0:
        raise RuntimeError("grader crashed")
    return toy_verify(reply, task)


TOY = register(Family(name="toy", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(toy_verify), verify=toy_verify,
                      description="test family: reward 1 when the reply contains a target character"))
TOY_BROKEN = register(Family(name="toy_broken", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(broken_verify),
                             verify=broken_verify, description="test family whose verifier raises on half the replies"))


# --------------------------------------------------------------------------- model fixtures
@pytest.fixture(scope="session")
def tokenizer():
    from rlyard.models import load_tokenizer

    return load_tokenizer("embedded")


def make_tiny_llama(vocab_size: int):
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    model.eval()
    return model


@pytest.fixture
def tiny_model(tokenizer):
    """A fresh tiny random llama (function scope: tests may train or overwrite it)."""
    return make_tiny_llama(len(tokenizer))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """The tiny model + the real tokenizer saved with save_pretrained: a valid `model.name` path."""
    path = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_llama(len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def chat_prompt(tokenizer):
    """The toy task's prompt rendered with the chat template, as the rollout does."""
    from rlyard.orchestrate.rollout import render_prompt

    return render_prompt(tokenizer, [{"role": "user", "content": TOY_PROMPT}])
