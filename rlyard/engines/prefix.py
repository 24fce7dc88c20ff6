"""Reuse of a finished turn's KV cache by the next turn of the same conversation.

An agent sends the engine its whole conversation every turn: the last prompt, the reply just
sampled, the tool's answer. Prefilling all of it again is most of a multi-turn evaluation's time
on a CPU (observed: about three quarters of an episode's forward work at turn 3). The engine keeps
the keys and values of each sequence it finished when the caller asks for it
(`SamplingParams.cache_prefix`, which the agent loop sets), and a later prompt that starts with
one of those sequences prefills only its new tokens. Keys belong to one set of weights: the
engine clears the store whenever its weights change.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CachedPrefix:
    tokens: tuple[int, ...]
    keys: tuple[torch.Tensor, ...]  # per layer [kv_heads, len(tokens), head_dim]
    values: tuple[torch.Tensor, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class PrefixStore:
    """Finished sequences' keys / values, least recently used first out, within `max_bytes`.

    A sequence that a later prompt extends is dropped once that prompt's own sequence is stored
    (`put(..., replaces=...)`), so a batch of live conversations holds about one entry each.
    Thread-safe: the async workers share one engine.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], CachedPrefix] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.reused_tokens = self.prefilled_tokens = 0  # what prompts took from the store, and what they did not

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def longest_prefix(self, prompt: list[int]) -> CachedPrefix | None:
        """The longest stored sequence that `prompt` starts with, shorter than the prompt (its
        last token must still be fed to get the next token's logits)."""
        with self._lock:
            best = None
            for tokens, entry in self._entries.items():
                size = len(tokens)
                if size < len(prompt) and (best is None or size > len(best.tokens)) and tuple(prompt[:size]) == tokens:
                    best = entry
            if best is not None:
                self._entries.move_to_end(best.tokens)
            return best

    def count(self, reused: int, prefilled: int) -> None:
        with self._lock:
            self.reused_tokens += reused
            self.prefilled_tokens += prefilled

    def put(self, entry: CachedPrefix, replaces: CachedPrefix | None = None) -> None:
        size = entry.nbytes
        with self._lock:
            if replaces is not None:
                self._drop(replaces.tokens)
            if size > self.max_bytes:
                return
            self._drop(entry.tokens)
            while self._entries and self._bytes + size > self.max_bytes:
                self._drop(next(iter(self._entries)))
            self._entries[entry.tokens] = entry
            self._bytes += size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def _drop(self, tokens: tuple[int, ...]) -> None:
        entry = self._entries.pop(tokens, None)
        if entry is not None:
            self._bytes -= entry.nbytes


def row_prefix(cache, attention: torch.Tensor, row: int, tokens: list[int]) -> CachedPrefix:
    """Row `row` of a batch cache as a stored entry: the positions its `attention` marks real,
    which hold `tokens` (the row's prompt and its reply but the last, unfed token)."""
    real = attention[row].bool().to(cache.layers[0].keys.device)
    if int(real.sum()) != len(tokens):
        raise RuntimeError(f"prefix cache: row {row} holds {int(real.sum())} positions for {len(tokens)} tokens")
    keys = tuple(layer.keys[row][:, real].clone() for layer in cache.layers)
    values = tuple(layer.values[row][:, real].clone() for layer in cache.layers)
    return CachedPrefix(tuple(tokens), keys, values)


def left_padded(entries: list[CachedPrefix | None], reused: list[int], layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, kv_heads, max(reused), head_dim] keys and values of one layer: row i's first `reused[i]`
    cached positions, right-aligned (the left padding is masked out by the attention mask)."""
    width = max(reused)
    like = next(e for e in entries if e is not None).keys[layer]
    keys = like.new_zeros((len(entries), like.shape[0], width, like.shape[2]))
    values = torch.zeros_like(keys)
    for row, (entry, size) in enumerate(zip(entries, reused)):
        if size:
            keys[row, :, width - size :] = entry.keys[layer][:, :size]
            values[row, :, width - size :] = entry.values[layer][:, :size]
    return keys, values
