"""A learner over several devices: PyTorch FSDP2 (`fully_shard`) and the collectives the
Learner needs so that N ranks take the very step one process would take on the whole batch.

Each rank holds whole trajectories, a share of the batch. The learner's per-token weights
(`algos.aggregate.token_weights`) are computed over the whole batch (every rank's lengths and
group ids, gathered), so the per-rank losses add up to the batch loss; FSDP is told to sum the
gradients (its default averages them, which would divide the step by N). Micro-batch counts
differ between ranks, and every FSDP forward and backward is a collective, so a rank that runs
out of micro-batches runs idle ones (a zero loss) until every rank is done.

The learner reaches the model through one FSDP forward method (`SCORE_METHOD`) on the root,
always in the unshared layout (prompt + continuation in one forward): the root's hooks then
gather the embedding, final norm and (tied) head, and every micro-batch is exactly one forward
of every layer on every rank. The shared-prompt layout reuses a KV cache across two forwards,
which FSDP's per-forward gather / free does not track. See docs/fsdp.md.
"""
from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from rlyard.algos import token_weights
from rlyard.train.logprobs import GroupLogprobs, backbone_and_head, unshared_continuation_logprobs

SCORE_METHOD = "rlyard_logprobs"  # the root's FSDP forward method the learner calls


def init_process_group(backend: str | None = None, timeout_s: float = 600.0) -> dist.ProcessGroup:
    """The default group from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun sets them;
    a Ray actor group sets them itself). nccl when CUDA is there, else gloo; with nccl the rank's
    device is LOCAL_RANK (0 when each process sees one GPU, as a Ray actor with num_gpus=1 does)."""
    if not dist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, init_method="env://", rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(seconds=timeout_s))
    return dist.group.WORLD


def device_mesh(group: dist.ProcessGroup | None = None):
    """A 1-D DeviceMesh over the group's ranks, on CUDA with nccl and on the CPU with gloo."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    group = group or dist.group.WORLD
    if group is dist.group.WORLD:
        return init_device_mesh(_device(group).type, (dist.get_world_size(),))
    return DeviceMesh.from_group(group, _device(group).type)


def shard_model(model: nn.Module, mesh=None, mixed_precision: bool = False,
                reshard_after_forward: bool = True) -> nn.Module:
    """FSDP2 over `model` (a transformers causal LM, or a peft model around one), in place.

    One unit per decoder layer (its LoRA factors included), then the root, which holds the
    embedding, final norm and head (tied or not, they share one gather). Frozen parameters (a
    LoRA base) are sharded too and get no gradient. `mixed_precision`: bf16 parameters in the
    forward and backward, fp32 gradient reduction (GPU; the fp32 master weights stay sharded).
    Build the Learner (its optimizer) after this: it must see the sharded parameters.
    """
    # Imported here: torch.distributed.fsdp and .checkpoint take seconds to import, and every
    # single-process run imports the learner.
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    mesh = mesh or device_mesh()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed_precision else MixedPrecisionPolicy()
    body, _head = backbone_and_head(model)
    for layer in body.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=policy)  # the root keeps its parameters gathered from forward to backward

    def logprobs(*args, **kwargs):
        out = unshared_continuation_logprobs(model, *args, **kwargs)
        # Lists of tensors, so that FSDP hooks their backward; copies, not views of one tensor (a view
        # that is later changed in place would lose the hook).
        return [t.clone() for t in out.logprobs], [t.clone() for t in out.entropies], out.hidden and [t.clone() for t in out.hidden]

    setattr(model, SCORE_METHOD, logprobs)
    register_fsdp_forward_method(model, SCORE_METHOD)
    sum_gradients(model)
    return model


def is_sharded(model: nn.Module) -> bool:
    """Whether FSDP wraps the model (without importing FSDP: a model cannot be sharded before it is)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def sum_gradients(model: nn.Module) -> None:
    """Reduce-scatter as a plain sum: the learner's weights already divide by the whole batch.
    (A sum-only reduction also avoids AVG / PREMUL_SUM, which gloo lacks.)"""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def sharded_logprobs(model: nn.Module, prefix: list[int], continuations: list[list[int]], masks: list[list[int]],
                     temperature: float = 1.0, **options) -> GroupLogprobs:
    """`continuation_logprobs` of a model from `shard_model`, through the root's FSDP forward."""
    if not hasattr(model, SCORE_METHOD):
        raise ValueError("the model is an FSDP module but not from rlyard.train.fsdp.shard_model: the learner needs its forward method")
    logprobs, entropies, hidden = getattr(model, SCORE_METHOD)(prefix, continuations, masks, temperature, **options)
    return GroupLogprobs(logprobs, entropies, hidden)


def global_token_weights(lengths: list[int], group_ids: list[str], mode: str, constant: float | None,
                         group: dist.ProcessGroup, episode_ids: list[str] | None = None) -> list[float]:
    """This rank's share of `token_weights` over the whole batch (every rank's sequences). The
    segments of one harness episode share its weight wherever they are: `episode_ids` go along
    (an episode's segments may sit on different ranks; "" or None: a sequence is its own episode)."""
    rank = dist.get_rank(group)
    shares: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(shares, (list(lengths), list(group_ids), list(episode_ids or [""] * len(lengths))), group=group)
    all_lengths = [n for share_lengths, _, _ in shares for n in share_lengths]
    all_groups = [g for _, share_groups, _ in shares for g in share_groups]
    all_episodes = [e for _, _, share_episodes in shares for e in share_episodes]
    weights = token_weights(all_lengths, all_groups, mode, constant, all_episodes)
    start = sum(len(share_lengths) for share_lengths, _, _ in shares[:rank])
    return weights[start : start + len(lengths)]


def max_count(count: int, group: dist.ProcessGroup) -> int:
    """The largest count over the ranks (micro-batches: every rank runs that many forwards)."""
    value = torch.tensor([count], dtype=torch.int64, device=_device(group))
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return int(value.item())


def reduce_sums(values: dict[str, float], group: dist.ProcessGroup, maxima: tuple[str, ...] = ()) -> dict[str, float]:
    """Per-rank sums added over the ranks (float64), the keys in `maxima` maximised instead."""
    keys = list(values)
    sums = torch.tensor([0.0 if k in maxima else values[k] for k in keys], dtype=torch.float64, device=_device(group))
    highs = torch.tensor([values[k] if k in maxima else -float("inf") for k in keys], dtype=torch.float64, device=_device(group))
    dist.all_reduce(sums, group=group)
    dist.all_reduce(highs, op=dist.ReduceOp.MAX, group=group)
    return {k: float(highs[j] if k in maxima else sums[j]) for j, k in enumerate(keys)}


def full_value(value: torch.Tensor) -> float:
    """A scalar that may be a DTensor (clip_grad_norm_ over sharded gradients: the global norm)."""
    if hasattr(value, "full_tensor"):  # a DTensor
        value = value.full_tensor()
    return float(value)


def full_state_dict(model: nn.Module, trainable_only: bool = False) -> dict[str, torch.Tensor]:
    """The whole model's state dict, gathered on CPU on rank 0 ({} on the other ranks), keyed as
    `model.state_dict()` (peft's `base_model.model.` prefix included). A collective: every rank
    must call it. `trainable_only`: only the parameters that train (a LoRA adapter)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only)
    return get_model_state_dict(model, options=options)


def rollout_weights(model: nn.Module, takes_adapter: bool = False, takes_lora_factors: bool = False) -> dict[str, torch.Tensor]:
    """What `orchestrate.setup.push_weights` gives a rollout engine for an unsharded model, here
    gathered on rank 0 ({} on the others; a collective): with LoRA the adapter in peft's format
    when the engine `takes_adapter` (`lora.trainable_state_dict`), else the merged LoRA linears,
    W + scale * B @ A keyed as in the plain model (`lora.merged_weights`), with each linear's
    factors too when the engine `takes_lora_factors` (`lora.lora_factors`: the int8 engine then
    swaps the low-rank term instead of re-packing); every parameter without LoRA
    (`named_parameters`, a tied head once)."""
    peft = hasattr(model, "peft_config")
    state = full_state_dict(model, trainable_only=peft and takes_adapter)
    if not state:
        return {}
    if not peft:
        return {name: state[name] for name, _ in model.named_parameters()}
    if takes_adapter:
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(model, state_dict=state, save_embedding_layers=False)
    from rlyard.models.lora import add_low_rank_, factor_entries

    adapter = model.active_adapter
    scale = model.peft_config[adapter].lora_alpha / model.peft_config[adapter].r  # add_lora: no rslora, no patterns
    weights = {}
    for key, weight in state.items():
        stem = key.removesuffix(".base_layer.weight")
        if key.endswith(".base_layer.weight") and f"{stem}.lora_A.{adapter}.weight" in state:
            lora_a, lora_b = state[f"{stem}.lora_A.{adapter}.weight"], state[f"{stem}.lora_B.{adapter}.weight"]
            plain = stem.removeprefix("base_model.model.")
            weights[f"{plain}.weight"] = add_low_rank_(weight.clone(), lora_a, lora_b, scale)
            if takes_lora_factors:
                weights |= factor_entries(plain, lora_a, lora_b, scale)
    return weights


def _device(group: dist.ProcessGroup) -> torch.device:
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
