"""The memory and precision switches of training: `model.gradient_checkpointing` (the same
gradients, the engine untouched), gradient accumulation over micro-batches (the same gradient
for every `algo.loss_agg`), and `model.autocast=bfloat16` on a GPU (skipped without one)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from rlyard.config import AlgoConfig, ModelConfig, load_config
from rlyard.orchestrate.setup import build, policy_model
from rlyard.sft.batching import Example
from rlyard.sft.train import token_nll
from rlyard.train import Learner
from rlyard.types import SamplingParams, Trajectory

NO_CLIP = 1e9
PROMPTS = ([1, 17, 93, 4, 250], [1, 40, 41, 42])
REPLIES = ([300, 301, 302, 303, 2], [310, 311], [320, 321, 322], [330], [340, 341, 342, 343], [350, 351])


def make_batch() -> tuple[list[Trajectory], list[float]]:
    """Two groups sharing their prompts, replies of 1 to 5 tokens (padding in every micro-batch)."""
    batch = []
    for i, reply in enumerate(REPLIES):
        prompt = PROMPTS[i % 2]
        batch.append(Trajectory(task_id=f"t{i % 2}", group_id=f"g{i % 2}", token_ids=prompt + reply,
                                loss_mask=[0] * len(prompt) + [1] * len(reply),
                                behaviour_logprobs=[0.0] * len(prompt) + [-9.0 - 0.1 * k for k in range(len(reply))],
                                policy_versions=[-1] * len(prompt) + [0] * len(reply), reward=float(i % 3 == 0)))
    return batch, [1.0, -0.5, 0.7, -1.2, 0.4, -0.3]


def checkpointing(model) -> bool:
    """transformers' own flag (its name changed in 5.2x), through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.is_activation_checkpointing if hasattr(base, "is_activation_checkpointing") else base.is_gradient_checkpointing


def policy(model_dir: Path, lora: bool, on: bool):
    config = ModelConfig(name=str(model_dir), gradient_checkpointing=on, lora={"enabled": lora, "rank": 4, "alpha": 8})
    torch.manual_seed(0)  # the same LoRA init with and without checkpointing
    model = policy_model(config)
    with torch.no_grad():  # LoRA's B starts at 0, which would leave A without a gradient to compare
        g = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


def step_grads(model, algo: AlgoConfig, micro_batch_size: int = 4) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    batch, advantages = make_batch()
    metrics = Learner(model, algo, 0.9, micro_batch_size, max_new_tokens=8).train_step(batch, advantages)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, metrics


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_checkpointing_gives_the_same_gradients(tiny_model_dir, lora):
    algo = AlgoConfig(lr=1e-3, max_grad_norm=NO_CLIP, entropy_coef=0.01)
    plain, checkpointed = policy(tiny_model_dir, lora, False), policy(tiny_model_dir, lora, True)
    assert not checkpointing(plain) and checkpointing(checkpointed)
    want, want_metrics = step_grads(plain, algo)
    got, got_metrics = step_grads(checkpointed, algo)
    assert want.keys() == got.keys() and len(want) == sum(p.requires_grad for p in plain.parameters())
    for name in want:
        assert torch.allclose(got[name], want[name], rtol=1e-4, atol=1e-7), name
    for key in ("loss/policy", "loss/entropy", "loss/grad_norm"):
        assert got_metrics[key] == pytest.approx(want_metrics[key], rel=1e-5), key
    assert max(g.abs().max().item() for g in got.values()) > 0


def test_sft_gradients_with_checkpointing(tiny_model_dir):
    examples = [Example(token_ids=[1, 17, 93, 300, 301, 2], loss_mask=[0, 0, 0, 1, 1, 1], source="a"),
                Example(token_ids=[1, 40, 310, 2], loss_mask=[0, 0, 1, 1], source="b")]
    grads = []
    for on in (False, True):
        model = policy(tiny_model_dir, True, on)
        model.train()
        nll, count = token_nll(model, examples)
        (nll / count).backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    assert all(torch.allclose(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-7) for n in grads[0])


def test_full_fine_tuning_shares_a_checkpointed_model_with_an_unaffected_engine(tiny_model_dir, tmp_path):
    """Sync full fine-tuning samples from the learner's own model: in train mode, as the learner
    leaves it, it must still decode with its KV cache to the same tokens and logprobs."""
    def components(on: bool):
        return build(load_config(None, [f"model.name={tiny_model_dir}", "env.name=toy", "env.train_size=4", "eval.size=0",
                                        "model.lora.enabled=false", f"model.gradient_checkpointing={str(on).lower()}",
                                        f"output.run_dir={tmp_path}"]))
    plain, checkpointed = components(False), components(True)
    assert checkpointed.engine.model is checkpointed.model and checkpointing(checkpointed.model)
    batch, advantages = make_batch()
    checkpointed.learner.train_step(batch, advantages)
    plain.model.load_state_dict(checkpointed.model.state_dict())
    assert checkpointed.model.training  # as the learner leaves it
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    want = plain.engine.generate([list(PROMPTS[0])], params, n=2)[0]
    got = checkpointed.engine.generate([list(PROMPTS[0])], params, n=2)[0]
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    for mine, theirs in zip(got, want):
        assert mine.logprobs == pytest.approx(theirs.logprobs, abs=1e-5)


@pytest.mark.parametrize("loss_agg", ["seq-mean-token-mean", "seq-mean-token-sum", "prompt-mean", "constant"])
def test_micro_batch_size_does_not_change_the_gradient(tiny_model, loss_agg):
    """The aggregation weights come from the whole minibatch before it is cut into micro-batches
    (token-mean is tests/test_learner.py's case, there with epochs and minibatches too)."""
    algo = AlgoConfig(lr=1e-3, max_grad_norm=NO_CLIP, loss_agg=loss_agg)
    one, _ = step_grads(copy.deepcopy(tiny_model), algo, micro_batch_size=1)
    three, _ = step_grads(copy.deepcopy(tiny_model), algo, micro_batch_size=3)
    scale = max(g.abs().max().item() for g in three.values())
    assert max((one[n] - three[n]).abs().max().item() for n in three) < 1e-5 * scale


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bf16_autocast_on_a_gpu(tiny_model):
    """With model.device=cuda the learner's and SFT's matmuls run in bf16 (the autocast device comes
    from the model) while weights and gradients stay float32, and the update points where the
    float32 one does; with checkpointing too."""
    moved = []
    for precision in (None, torch.bfloat16):
        model = copy.deepcopy(tiny_model).to("cuda")
        seen = []
        model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
        before = model.lm_head.weight.detach().clone()
        batch, advantages = make_batch()
        metrics = Learner(model, AlgoConfig(lr=1e-3), 0.9, 4, autocast_dtype=precision).train_step(batch, advantages)
        assert set(seen) == {precision or torch.float32}
        assert model.lm_head.weight.dtype == torch.float32 and model.lm_head.weight.grad.dtype == torch.float32
        assert metrics["loss/grad_norm"] > 0
        moved.append((model.lm_head.weight.detach() - before).flatten())
    assert torch.nn.functional.cosine_similarity(*moved, dim=0).item() > 0.99

    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    seen.clear()
    example = Example(token_ids=[1, 17, 93, 300, 301, 2], loss_mask=[0, 0, 0, 1, 1, 1], source="gpu")
    nll, _ = token_nll(model, [example], torch.bfloat16)
    nll.backward()
    assert set(seen) == {torch.bfloat16} and len(seen) == 2  # the forward and its recompute in backward
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
