"""int8 rollouts: the engine's decode steps on fbgemm int8 kernels, re-quantized at each weight push.

Decoding a small model on a CPU reads every weight once per token batch; int8 weights with
int8 activations ran a batch-32 decode matmul 2 to 4.6x faster than fp32 on the 2-core
reference machine. fbgemm quantizes activations per tensor, which a few outlier channels and
tokens ruin, so each layer (SmoothQuant, Xiao et al. 2023) divides its input channels by
s = max|x|^0.5 / max|W|^0.5 (folded into the weight) and its rows by their own max (undone on
the output): exact in real arithmetic, and it leaves each row's int8 grid to that row alone.
The scales come from the engine's first batch, which runs in fp32 while they are measured.
Prefill (several positions per row) stays fp32: it runs once per prompt and sets the KV cache.

The learner keeps fp32 weights; the remaining gap between the sampler's logprobs and the
trainer's is what truncated importance sampling (`algo.tis_cap`) corrects.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

QUANTIZE_MODES = ("none", "int8")
SMOOTHING_ALPHA = 0.5


def _int8_linear_class():
    with warnings.catch_warnings():  # torch.ao's eager API warns that it is moving to torchao
        warnings.simplefilter("ignore")
        from torch.ao.nn.quantized.dynamic import Linear

    return Linear


def quantize_weight(weight: torch.Tensor) -> torch.Tensor:
    """A per-output-channel symmetric qint8 tensor of `weight` (out, in)."""
    weight = weight.detach().float().cpu()
    scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12).double()
    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)


class Int8Linear(torch.nn.Module):
    """A linear layer that keeps its float weight (prefill, weight pushes) and decodes in int8.

    States: calibrating (fp32, recording each input channel's max |x| over decode steps), then
    quantized (decode steps in int8). `weight` / `bias` are the original parameters, so the
    model's parameter names (and weight ties) are unchanged.
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.register_buffer("input_absmax", torch.zeros(self.in_features), persistent=False)
        self.smooth: torch.Tensor | None = None  # s per input channel, set by quantize()
        self.inverse_smooth: torch.Tensor | None = None
        self.packed = None  # the fbgemm int8 layer for W * s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        decoding = x.dim() < 3 or x.shape[-2] == 1
        if not decoding or self.packed is None:
            if decoding:
                flat = x.detach().reshape(-1, self.in_features).abs().amax(dim=0).float()
                torch.maximum(self.input_absmax, flat, out=self.input_absmax)
            return F.linear(x, self.weight, self.bias)
        scaled = x.float() * self.inverse_smooth
        row_max = torch.linalg.vector_norm(scaled, ord=float("inf"), dim=-1, keepdim=True).clamp_(min=1e-6)
        out = self.packed(scaled.div_(row_max)).mul_(row_max)
        return out if self.bias is None else out.add_(self.bias)

    @torch.no_grad()
    def quantize(self) -> None:
        """Fix the smoothing scales from the recorded maxima (once) and pack the int8 weight."""
        if self.smooth is None:
            activation = self.input_absmax.clamp(min=1e-5)
            weight_max = self.weight.detach().float().abs().amax(dim=0).clamp(min=1e-5)
            self.smooth = (activation**SMOOTHING_ALPHA / weight_max ** (1 - SMOOTHING_ALPHA)).clamp(min=1e-5)
            self.inverse_smooth = 1.0 / self.smooth
        with warnings.catch_warnings():  # quantized tensors are deprecated, still supported (torch 2.13)
            warnings.simplefilter("ignore")
            if self.packed is None:
                self.packed = _int8_linear_class()(self.in_features, self.out_features, bias_=False, dtype=torch.qint8)
            self.packed.set_weight_bias(quantize_weight(self.weight.detach().float() * self.smooth), None)

    def requantize(self) -> None:
        """Re-pack after the float weight changed (no-op while still calibrating)."""
        if self.packed is not None:
            self.quantize()


def wrap_linears(model: torch.nn.Module) -> list[Int8Linear]:
    """Swap every nn.Linear of `model` (its own copy: this is in place) for an Int8Linear."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("rollout.quantize=int8 uses CPU int8 kernels (fbgemm); on a GPU use a bf16 or fp16 model instead")
    if not {"fbgemm", "x86"} & set(torch.backends.quantized.supported_engines):
        raise RuntimeError("rollout.quantize=int8 needs torch's x86 int8 kernels, which this torch build lacks")
    targets = [(name, module) for name, module in model.named_modules() if type(module) is torch.nn.Linear]
    if not targets:
        raise ValueError("rollout.quantize=int8: the model has no nn.Linear layers to quantize")
    layers = []
    for name, linear in targets:
        layer = Int8Linear(linear)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, layer)
        layers.append(layer)
    return layers
