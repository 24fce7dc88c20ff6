"""int8 rollouts: the engine's decode steps on fbgemm int8 kernels, re-packed at each weight push.

Decoding a small model on a CPU reads every weight once per token batch; int8 weights with
int8 activations ran a batch-32 decode matmul 2 to 4.6x faster than fp32 on the 2-core
reference machine. fbgemm quantizes activations per tensor, which a few outlier channels and
tokens ruin, so each projection (SmoothQuant, Xiao et al. 2023) divides its input channels by
s = max|x|^0.5 / max|W|^0.5 (folded into the weight) and its rows by their own max (undone on
the output): exact in real arithmetic, and it leaves each row's int8 grid to that row alone.
Projections that read the same input (q/k/v, gate/up) are fused into one matmul, so that input
is scaled and quantized once. The scales come from the engine's first batch, which decodes in
fp32 while they are measured. The prompts' shared prefix (with its attention-sink first token)
is prefilled in fp32; each prompt's own tail and every decode step run in int8.

The learner keeps fp32 weights; the remaining gap between the sampler's logprobs and the
trainer's is what truncated importance sampling (`algo.tis_cap`) corrects.

With LoRA the push also carries each adapted linear's factors (A and scaling * B). Re-packing
every projection cost 1.4 s of a 8.1 s step (`bench/step_profile.py`), more than int8 decoding
saved; so once a projection knows its factors it packs the base weight W - sBA once and adds the
low-rank term x A^T (sB)^T in fp32 at each call, and a push only swaps the factors.
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


def check_int8_support(device: torch.device) -> None:
    if device.type != "cpu":
        raise ValueError("rollout.quantize=int8 uses CPU int8 kernels (fbgemm); on a GPU use a bf16 or fp16 model instead")
    if not {"fbgemm", "x86"} & set(torch.backends.quantized.supported_engines):
        raise RuntimeError("rollout.quantize=int8 needs torch's x86 int8 kernels, which this torch build lacks")


def quantize_weight(weight: torch.Tensor) -> torch.Tensor:
    """A per-output-channel symmetric qint8 tensor of `weight` (out, in)."""
    weight = weight.detach().float().cpu()
    scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12).double()
    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)


class Projection:
    """One or more nn.Linear layers that read the same input, called together: returns one
    output per layer. The float version reads the layers' live weights, so a weight push
    needs nothing more."""

    def __init__(self, linears: list[torch.nn.Linear]):
        self.linears = linears

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [F.linear(x, linear.weight, linear.bias) for linear in self.linears]


class Int8Projection(Projection):
    """The layers fused into one int8 matmul (their weights concatenated, one activation scale).

    States: calibrating (fp32, recording each input channel's max |x|), then quantized.
    `requantize` re-packs from the layers' float weights after a push.
    """

    def __init__(self, linears: list[torch.nn.Linear]):
        super().__init__(linears)
        self.in_features = linears[0].in_features
        self.sizes = [linear.out_features for linear in linears]
        self.input_absmax = torch.zeros(self.in_features)
        self.inverse_smooth: torch.Tensor | None = None
        self.smooth: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self.packed = None  # the fbgemm int8 layer for W * s (W - sBA for a linear with factors)
        self.factors: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(linears)  # per linear: A, sB
        self.low_rank: tuple[torch.Tensor, torch.Tensor] | None = None  # every linear's factors as one A (R, in), B (out, R)

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        if self.packed is None:
            flat = x.detach().reshape(-1, self.in_features).abs().amax(dim=0).float()
            torch.maximum(self.input_absmax, flat, out=self.input_absmax)
            return super().__call__(x)
        scaled = x.float() * self.inverse_smooth
        row_max = scaled.abs().amax(dim=-1, keepdim=True).clamp_(min=1e-6)  # 8x faster than vector_norm(inf) here
        out = self.packed(scaled.div_(row_max)).mul_(row_max)
        if self.bias is not None:
            out = out.add_(self.bias)
        if self.low_rank is not None:
            down, up = self.low_rank
            out = out.add_((x.float() @ down.t()) @ up.t())
        return list(out.split(self.sizes, dim=-1)) if len(self.sizes) > 1 else [out]

    @property
    def calibrated(self) -> bool:
        return bool(self.input_absmax.any())

    @torch.no_grad()
    def quantize(self) -> None:
        """Fix the smoothing scales from the recorded maxima (once) and pack the int8 weight.

        The first call switches the projection to int8 only once the packed layer holds its
        weights (`packed` is assigned last). Callers still run it with no forward pass in
        flight: a batch must not switch from fp32 to int8 between two layers, nor see a bias
        change under a re-pack.
        """
        weight = torch.cat([self._base_weight(i) for i in range(len(self.linears))])
        if self.smooth is None:
            activation = self.input_absmax.clamp(min=1e-5)
            weight_max = weight.abs().amax(dim=0).clamp(min=1e-5)
            smooth = (activation**SMOOTHING_ALPHA / weight_max ** (1 - SMOOTHING_ALPHA)).clamp(min=1e-5)
            self.smooth, self.inverse_smooth = smooth, 1.0 / smooth
        biases = [linear.bias for linear in self.linears]
        if any(b is not None for b in biases):
            self.bias = torch.cat([b.detach().float() if b is not None else weight.new_zeros(size) for b, size in zip(biases, self.sizes)])
        with warnings.catch_warnings():  # quantized tensors are deprecated, still supported (torch 2.13)
            warnings.simplefilter("ignore")
            packed = self.packed if self.packed is not None else _int8_linear_class()(
                self.in_features, weight.shape[0], bias_=False, dtype=torch.qint8)
            packed.set_weight_bias(quantize_weight(weight * self.smooth), None)
        self._gather_factors()
        self.packed = packed

    def requantize(self) -> None:
        """Re-pack after the float weights changed (no-op while still calibrating)."""
        if self.packed is not None:
            self.quantize()

    def weights_changed(self, changed: set[int], factors: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        """The float weights whose id() is in `changed` were replaced; `factors` (by id() of a
        linear's weight) are the LoRA factors of the pushed weights. When every changed linear
        already had factors and only its weight changed, the packed base stands: only the factors
        move. Otherwise (full weights, a bias, a linear's first factors) it re-packs."""
        touched = [i for i, linear in enumerate(self.linears) if any(id(p) in changed for p in (linear.weight, linear.bias) if p is not None)]
        if not touched:
            return
        bias_changed = any(self.linears[i].bias is not None and id(self.linears[i].bias) in changed for i in touched)
        fresh = {i: factors.get(id(self.linears[i].weight)) for i in touched}
        swap_only = not bias_changed and all(fresh[i] is not None and self.factors[i] is not None for i in touched)
        for i in touched:
            self.factors[i] = fresh[i]
        if swap_only and self.packed is not None:
            self._gather_factors()
        else:
            self.requantize()

    def _base_weight(self, index: int) -> torch.Tensor:
        """The linear's weight without its LoRA term (the weight itself when it has no factors)."""
        weight = self.linears[index].weight.detach().float()
        if self.factors[index] is None:
            return weight
        down, up = self.factors[index]
        return torch.addmm(weight, up.float(), down.float(), alpha=-1.0)

    def _gather_factors(self) -> None:
        """One (A, B) pair for the fused call: A stacks every linear's A, B is block-diagonal."""
        present = [(i, f) for i, f in enumerate(self.factors) if f is not None]
        if not present:
            self.low_rank = None
            return
        starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        down = torch.cat([f[0].float() for _, f in present])
        up = torch.zeros(sum(self.sizes), down.shape[0])
        column = 0
        for i, (_, b) in present:
            up[starts[i] : starts[i] + self.sizes[i], column : column + b.shape[1]] = b.float()
            column += b.shape[1]
        self.low_rank = (down, up)
