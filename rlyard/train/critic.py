"""PPO's critic: a value head on the policy's last hidden state, with its own optimizer.

The head reads the hidden state that predicts each sampled token, i.e. the state s_t before
token t, so V(s_t) lines up with the token's logprob. The hidden state is detached: the value
loss trains the head only, so the policy's gradient is exactly its own objective (no value
coefficient to tune, and LoRA and full fine-tuning behave alike) and the two losses can share
one backward pass.
"""
from __future__ import annotations

import torch


class Critic:
    def __init__(self, hidden_size: int, lr: float, betas: tuple[float, float], max_grad_norm: float, device=None):
        # skip_init: no draw from the global RNG (a run with a critic samples what one without would),
        # and a zero head starts at V = 0, so the first advantages are the plain returns.
        self.head = torch.nn.utils.skip_init(torch.nn.Linear, hidden_size, 1, device=device, dtype=torch.float32)
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.zero_()
        self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=lr, betas=betas, weight_decay=0.0)
        self.max_grad_norm = max_grad_norm

    def values(self, hidden_NH: torch.Tensor) -> torch.Tensor:
        """(N,) V(s_t) from the (N, H) hidden states that predict N sampled tokens."""
        return self.head(hidden_NH.detach().float()).squeeze(-1)

    def step(self) -> float:
        """Clip and apply the value head's accumulated gradient; returns its norm."""
        norm = torch.nn.utils.clip_grad_norm_(self.head.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return float(norm)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        return {"head": self.head.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
