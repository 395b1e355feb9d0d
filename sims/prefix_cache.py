"""What a local model has already read: the KV cache of each conversation it last continued, so
that the next turn of that conversation prefills only what was said since.

A multi-turn rollout sends a side's model, turn after turn, a prompt that extends the one before
(token-in, token-out: the previous prompt, the reply's own tokens, then the other side's turn).
Prefilling the whole conversation again each turn was most of a CPU rollout's prefill. After a
generation, each row's keys and values are kept with the tokens they encode; a later prompt that
starts with those tokens starts from them.

A cached row is only valid for the weights that computed it: `StoreKey` is the identity and
in-place version of every parameter (an optimizer step, a loaded checkpoint, a LoRA adapter's
update all change it), and when it changes the whole store is dropped. Rows are also tagged with
their `context` (the active adapter, the compute precision), so two policies on one shared base
keep their rows apart. The store holds at most `max_bytes`, oldest rows evicted first; a row that a
new prompt continued is superseded by the new one.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_BYTES = 1 << 30


@dataclass
class CachedRow:
    tokens: tuple[int, ...]
    keys: list[Any]  # per layer: [kv heads, len(tokens), head dim]
    values: list[Any]
    context: Hashable

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def weights_key(model: Any) -> tuple[tuple[int, int], ...]:
    """Changes whenever any parameter of `model` is replaced or modified in place."""
    return tuple((id(p), p._version) for p in model.parameters())


def generation_context(model: Any) -> Hashable:
    """What else decides a model's keys and values besides its weights: the active adapter(s) and
    autocast's precision."""
    import torch

    device = next(model.parameters()).device.type
    autocast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    adapters = getattr(model, "active_adapters", None)
    return (tuple(adapters) if isinstance(adapters, (list, tuple)) else adapters, str(autocast))


class PrefixStore:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.rows: list[CachedRow] = []
        self._weights: Any = None

    def clear(self) -> None:
        self.rows.clear()

    def for_weights(self, key: Any) -> None:
        """Drops every row unless the weights are those the rows were computed with."""
        if key != self._weights:
            self.rows.clear()
            self._weights = key

    def longest_prefix(self, prompt: Sequence[int], context: Hashable) -> CachedRow | None:
        """The cached row of `context` with the longest tokens that `prompt` strictly extends (at
        least one new token: the model must read something to predict the next)."""
        best: CachedRow | None = None
        for row in self.rows:
            n = len(row.tokens)
            if row.context == context and n < len(prompt) and (best is None or n > len(best.tokens)):
                if tuple(prompt[:n]) == row.tokens:
                    best = row
        return best

    def replace(self, used: Sequence[CachedRow | None], new: Sequence[CachedRow]) -> None:
        """Drops the rows that were continued (their continuations supersede them), adds `new`,
        and evicts the oldest rows beyond `max_bytes`."""
        superseded = {id(row) for row in used if row is not None}
        self.rows = [row for row in self.rows if id(row) not in superseded] + [
            row for row in new if row.nbytes <= self.max_bytes
        ]
        total = sum(row.nbytes for row in self.rows)
        while self.rows and total > self.max_bytes:
            total -= self.rows.pop(0).nbytes
