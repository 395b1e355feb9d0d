"""Training sequences that share a beginning, read once: a GRPO group's episodes all start with the
same prompt (the system prompt, the scenario, the opening), often most of each sequence.

`pack(samples)` lays the samples of each such group out as one row: the shared beginning, then
each sample's own rest, one after another, with an attention mask under which a rest sees the
shared beginning and itself (causally) and no other rest, and positions that continue the
beginning's in every rest. Each token is then computed once where the samples agree; the
hidden state before a trained token is found at `predictors` for the output head. The log-probs
equal those of the samples read one by one (`tests/test_packing.py`, to rounding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scope_envs.core.rollout import Sample

# attention implementations that take an explicit 4D mask as it is given (transformers' masking utils)
PACKABLE_ATTENTION = ("sdpa", "eager")


@dataclass
class Packed:
    ids: Any  # [rows, width]
    positions: Any  # [rows, width]
    attend: Any  # [rows, 1, width, width] bool: query i may read key j
    predictors: tuple[Any, Any]  # (row, column) in the packed rows of the state before each trained token


def can_pack(model: Any) -> bool:
    """Whether `model` reads a packed row as the samples it holds: full attention (no sliding
    window), through an implementation that takes a 4D mask."""
    config = model.config
    implementation = getattr(config, "_attn_implementation", None)
    return implementation in PACKABLE_ATTENTION and not getattr(config, "sliding_window", None)


def shared_length(sequences: Sequence[Sequence[int]]) -> int:
    """The length of the longest beginning all `sequences` share, leaving each at least one token
    of its own before its last (a rest is never empty)."""
    limit = min(len(s) for s in sequences) - 1
    length = 0
    first = sequences[0]
    while length < limit and all(s[length] == first[length] for s in sequences):
        length += 1
    return length if len(sequences) > 1 else limit


def pack(samples: Sequence[Sample], rows: Any, columns: Any, pad: int, device: Any) -> Packed:
    """`samples` as packed rows (one per shared first prompt); `rows`, `columns` index the
    trained tokens as `mask.nonzero()` of the samples' shifted loss mask does (position t
    predicts token t + 1), and `predictors` lists, in that order, where each one's state is."""
    import torch

    trees: dict[tuple[int, ...], list[int]] = {}
    for index, sample in enumerate(samples):
        trees.setdefault(tuple(sample.ids[: sample.prompt_length]), []).append(index)
    layouts = []  # per tree: ids, positions, blocks [(start, end)], where each sample's position lands
    where: dict[int, tuple[int, int, int]] = {}  # sample -> (tree, shared length, offset of its rest)
    for tree, members in enumerate(trees.values()):
        shared = shared_length([samples[i].ids for i in members])
        ids = list(samples[members[0]].ids[:shared])
        positions = list(range(shared))
        blocks = []
        for i in members:
            rest = samples[i].ids[shared:]
            where[i] = (tree, shared, len(ids))
            blocks.append((len(ids), len(ids) + len(rest)))
            ids += rest
            positions += range(shared, shared + len(rest))
        layouts.append((ids, positions, shared, blocks))
    width = max(len(ids) for ids, *_ in layouts)
    ids = torch.full((len(layouts), width), pad, dtype=torch.long)
    positions = torch.zeros((len(layouts), width), dtype=torch.long)
    attend = torch.zeros((len(layouts), 1, width, width), dtype=torch.bool)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    for tree, (tree_ids, tree_positions, shared, blocks) in enumerate(layouts):
        ids[tree, : len(tree_ids)] = torch.tensor(tree_ids)
        positions[tree, : len(tree_positions)] = torch.tensor(tree_positions)
        attend[tree, 0, :shared, :shared] = causal[:shared, :shared]
        for start, end in blocks:
            attend[tree, 0, start:end, :shared] = True
            attend[tree, 0, start:end, start:end] = causal[: end - start, : end - start]
        padding = torch.arange(len(tree_ids), width)
        attend[tree, 0, padding, padding] = True  # a padding query reads itself: no empty softmax row
    packed_rows, packed_columns = [], []
    for sample, position in zip(rows.tolist(), columns.tolist()):
        tree, shared, offset = where[sample]
        packed_rows.append(tree)
        packed_columns.append(position if position < shared else offset + position - shared)
    predictors = (torch.tensor(packed_rows, device=device), torch.tensor(packed_columns, device=device))
    return Packed(ids.to(device), positions.to(device), attend.to(device), predictors)


def attention_mask_for(model: Any, attend: Any, dtype: Any) -> Any:
    """The 4D mask in the form the model's attention takes: boolean for sdpa, additive for eager."""
    import torch

    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        return attend
    return torch.zeros(attend.shape, dtype=dtype, device=attend.device).masked_fill(~attend, torch.finfo(dtype).min)
