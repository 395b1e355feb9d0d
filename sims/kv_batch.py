"""One batched generation's KV cache: preallocated for the whole generation, each row started from
the cached keys and values of the conversation it continues (`sims.prefix_cache`).

A row's columns are laid out as [padding][cached start][padding][rest of its prompt][reply], the
padding masked out, so rows of any cached length and any prompt length share one cache tensor
per layer; positions count only a row's own tokens. The cache is transformers' `StaticCache`,
written in place as tokens are read (a growing cache copies itself at every token: half of a
CPU decode step). Models with sliding-window layers read every prompt from its start (a window
counts columns, and padding in the middle would shift it).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from sims.prefix_cache import CachedRow


def own_dtype_static_layer() -> type:
    from transformers.cache_utils import StaticLayer

    class OwnDtypeStaticLayer(StaticLayer):
        """A `StaticLayer` whose values keep their own dtype: under autocast the keys leave the
        rotary embedding in float32 while the values stay in the autocast dtype."""

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            super().lazy_initialization(key_states, value_states)
            if self.values.dtype != value_states.dtype:
                self.values = self.values.to(value_states.dtype)

    return OwnDtypeStaticLayer


def reuses_cached_rows(config: Any) -> bool:
    """Whether a model of `config` can start rows from cached keys and values: not when any of its
    layers is a sliding window (transformers' cache gives those a layer type of their own). The
    answer takes building a cache: ask it once per model."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    probe = StaticCache(config=config, max_cache_len=1)
    return all(type(layer) is StaticLayer for layer in probe.layers)


class KVBatch:
    """`prefill` reads the prompts; `read` one more token per row; `rows_after` gives each row's
    conversation to keep. `layout[i]` is row i's (tokens started from its cache, tokens of its
    prompt read after them); columns [0, cached_width) hold the cached starts, [cached_width,
    prompt_width) the rest of the prompts, and the replies follow up to `width`."""

    def __init__(self, simulator: Any, cache: Any, layout: list[tuple[int, int]], cached_width: int) -> None:
        self.model, self.cache, self.layout = simulator.model, cache, layout
        self.cache_arg = simulator._cache_arg
        self.cached_width = cached_width
        self.prompt_width = self.width = cached_width + max(rest for _, rest in layout)
        self.mask: Any = None
        self.last_position: Any = None
        self.logits: Any = None
        self.continued: list[CachedRow | None] = []
        self.context: Hashable = None
        self.reuses = True

    @property
    def reused_tokens(self) -> list[int]:
        return [cached for cached, _ in self.layout]

    @classmethod
    def prefill(
        cls,
        simulator: Any,
        prompts: Sequence[Sequence[int]],
        continued: Sequence[CachedRow | None],
        context: Hashable,
        new_tokens: int,
        reuses: bool,
    ) -> KVBatch:
        """`reuses`: whether the model can start rows from `continued` (`reuses_cached_rows`);
        if not, every prompt is read from its start."""
        import torch
        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer

        model, device, pad = simulator.model, simulator.device, simulator.tokenizer.pad_token_id
        OwnDtypeStaticLayer = own_dtype_static_layer()
        continued = list(continued) if reuses else [None] * len(prompts)
        starts = [len(row.tokens) if row else 0 for row in continued]
        layout = [(start, len(prompt) - start) for prompt, start in zip(prompts, starts)]
        cached_width = max(c for c, _ in layout)
        prompt_width = cached_width + max(r for _, r in layout)
        # rows with the same cached start and the same rest are read once
        first_of: dict[tuple[Any, ...], int] = {}
        rows = [
            first_of.setdefault((id(row), tuple(p[cached:])), i)
            for i, (p, row, (cached, _)) in enumerate(zip(prompts, continued, layout))
        ]
        distinct = sorted(first_of.values())
        mask = torch.zeros((len(distinct), prompt_width + new_tokens), dtype=torch.long, device=device)
        ids = torch.full((len(distinct), prompt_width - cached_width), pad, dtype=torch.long, device=device)
        for d, i in enumerate(distinct):
            cached, rest = layout[i]
            mask[d, cached_width - cached : cached_width] = 1
            mask[d, prompt_width - rest : prompt_width] = 1
            if rest:
                ids[d, -rest:] = torch.tensor(prompts[i][cached:], device=device)
        positions = (mask[:, :prompt_width].cumsum(-1) - 1).clamp(min=0)
        cache = StaticCache(config=model.config, max_cache_len=prompt_width + new_tokens)
        cache.layers = [
            OwnDtypeStaticLayer(max_cache_len=prompt_width + new_tokens) if type(layer) is StaticLayer else layer
            for layer in cache.layers
        ]
        if cached_width:
            for layer in range(len(cache.layers)):
                keys, values = cls._cached_columns([continued[i] for i in distinct], layer, cached_width, device)
                cache.update(keys, values, layer)
        batch = cls(simulator, cache, layout, cached_width)
        batch.continued, batch.context, batch.reuses = continued, context, reuses
        out = model(
            input_ids=ids,
            attention_mask=mask[:, :prompt_width],
            position_ids=positions[:, cached_width:],
            use_cache=True,
            **{simulator._cache_arg: cache},
            **simulator._last_logits_only,
        )
        logits = out.logits[:, -1, :].float()
        if len(distinct) < len(rows):
            spread = torch.tensor([distinct.index(row) for row in rows], device=device)
            cache.reorder_cache(spread)  # row i gets the cache of its prompt's first row
            logits, mask, positions = logits[spread], mask[spread], positions[spread]
        batch.logits, batch.mask, batch.last_position = logits, mask, positions[:, -1:]
        return batch

    @staticmethod
    def _cached_columns(rows: Sequence[CachedRow | None], layer: int, width: int, device: Any) -> tuple[Any, Any]:
        """Layer `layer`'s cached keys and values of `rows`, right-aligned in `width` columns."""
        import torch

        sample = next(row for row in rows if row is not None)
        key, value = sample.keys[layer], sample.values[layer]  # [heads, tokens, dim]; their dtypes may differ
        keys = torch.zeros((len(rows), key.shape[0], width, key.shape[2]), dtype=key.dtype, device=device)
        values = torch.zeros((len(rows), value.shape[0], width, value.shape[2]), dtype=value.dtype, device=device)
        for d, row in enumerate(rows):
            if row is not None and row.tokens:
                n = len(row.tokens)
                keys[d, :, width - n :] = row.keys[layer]
                values[d, :, width - n :] = row.values[layer]
        return keys, values

    def read(self, next_ids: Sequence[int]) -> Any:
        """Reads one token per row into the cache; the logits after it."""
        import torch

        self.mask[:, self.width] = 1
        self.width += 1
        self.last_position = self.last_position + 1
        out = self.model(
            input_ids=torch.tensor([[i] for i in next_ids], device=self.mask.device),
            attention_mask=self.mask[:, : self.width],
            position_ids=self.last_position,
            use_cache=True,
            **{self.cache_arg: self.cache},
        )
        return out.logits[:, -1, :].float()

    def rows_after(
        self, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]], fed: Sequence[int]
    ) -> list[CachedRow]:
        """Each row's conversation as the cache now holds it: its prompt and the reply tokens it read."""
        import torch

        if not self.reuses:
            return []
        rows = []
        prompt_end = self.prompt_width
        for i, (prompt, reply, count) in enumerate(zip(prompts, replies, fed)):
            cached, rest = self.layout[i]
            columns = torch.cat(
                [
                    torch.arange(self.cached_width - cached, self.cached_width),
                    torch.arange(prompt_end - rest, prompt_end),
                    torch.arange(prompt_end, prompt_end + count),
                ]
            ).to(self.mask.device)
            keys = [layer.keys[i].index_select(1, columns) for layer in self.cache.layers]
            values = [layer.values[i].index_select(1, columns) for layer in self.cache.layers]
            rows.append(CachedRow((*prompt, *reply[:count]), keys, values, self.context))
        return rows
