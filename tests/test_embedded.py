"""The embedded default model itself: it loads offline, and engine and learner agree on it."""
import pytest
import torch

from rlyard.engines import HFEngine
from rlyard.models import add_lora, embedded_model_dir, load_model, load_tokenizer
from rlyard.models.lora import merged_weights
from rlyard.orchestrate.rollout import render_prompt
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import SamplingParams

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("embedded")


def test_the_cached_conversion_is_a_plain_safetensors_model():
    folder = embedded_model_dir()
    assert (folder / "model.safetensors").stat().st_size > 400e6
    config = (folder / "config.json").read_text()
    assert "quantization_config" not in config  # a GGUF-flagged model would be refused by peft and trainers


def test_engine_and_learner_logprobs_agree_on_the_embedded_model(tokenizer):
    torch.manual_seed(0)
    policy = add_lora(load_model("embedded"), 16, 32, 0.0, ["q_proj", "v_proj", "down_proj"])
    for name, param in policy.named_parameters():
        if "lora_B" in name:  # a non-zero adapter, so the merged engine weights differ from the base
            torch.nn.init.normal_(param, std=0.02)
    engine = HFEngine(load_model("embedded"), tokenizer.pad_token_id)
    engine.update_weights(1, merged_weights(policy))
    prompts = [render_prompt(tokenizer, [{"role": "user", "content": text}]) for text in ("What is 12+34?", "Name a colour.")]
    params = SamplingParams(temperature=0.8, max_new_tokens=12, stop_token_ids=(tokenizer.eos_token_id,), seed=3)
    groups = engine.generate(prompts, params, n=2)
    for prompt, group in zip(prompts, groups):
        with torch.no_grad():
            out = continuation_logprobs(policy, prompt, [c.token_ids for c in group], [[1] * len(c.token_ids) for c in group], 0.8)
        for completion, recomputed in zip(group, out.logprobs):
            assert completion.policy_version == 1
            diff = (torch.tensor(completion.logprobs) - recomputed).abs().max().item()
            assert diff < 1e-4, f"engine vs learner logprob mismatch {diff}"
