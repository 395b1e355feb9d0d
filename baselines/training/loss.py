"""The token-level clipped policy-gradient loss, with an optional KL penalty to a reference model
and a truncated importance weight for the gap between the log-probs tokens were sampled with
and those of the training forward (whatever the generation engine: a KV-cached transformers
loop or vLLM)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

AGGREGATIONS = ("token_mean", "sequence_mean", "constant")


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    aggregation: str = "token_mean"  # "constant" is Dr. GRPO's: see `aggregate`
    constant_tokens: float | None = None  # Dr. GRPO's per-sequence token budget (the generation budget)
    is_cap: float = 2.0  # truncated importance sampling for generation/training log-prob mismatch
    kl_log_ratio_cap: float = 20.0  # |log(pi_ref / pi)| beyond this is clamped: exp() must stay finite


@dataclass(frozen=True)
class BatchTotals:
    """What an aggregation divides by, counted over the WHOLE batch of one optimizer step, so that
    the losses of its micro-batches add up to the loss of the batch (gradient accumulation)."""

    tokens: float  # trained tokens
    sequences: int  # sequences with at least one trained token

    @classmethod
    def of(cls, masks: Any) -> BatchTotals:
        """From the loss masks of every sample of the batch (lists or a `[batch, tokens]` tensor)."""
        counts = [float(sum(m)) for m in masks]
        return cls(tokens=sum(counts), sequences=sum(c > 0 for c in counts))


def policy_loss(
    logprobs: Any,
    old_logprobs: Any,
    advantages: Any,
    mask: Any,
    config: LossConfig,
    *,
    ref_logprobs: Any = None,
    behaviour_logprobs: Any = None,
    totals: BatchTotals | None = None,
) -> tuple[Any, dict[str, float]]:
    """Loss and statistics for one batch of sequences.

    All arguments are `[batch, tokens]` tensors aligned on the predicted tokens (`advantages` is
    the sequence's advantage broadcast to its tokens); `mask` is 1 on the trained side's own tokens.
    `old_logprobs` are the training model's log-probs before this update; `behaviour_logprobs`
    those of the engine that sampled the tokens, when it is not the training model (vLLM).
    `totals` are those of the whole batch when this is one micro-batch of it (default: this batch).
    """
    import torch

    mask = mask.float()
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - config.clip_low, 1 + config.clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    weight = None
    if behaviour_logprobs is not None:
        weight = torch.clamp(torch.exp(old_logprobs - behaviour_logprobs), max=config.is_cap).detach()
        per_token = per_token * weight
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None and config.kl_coef > 0:
        cap = config.kl_log_ratio_cap
        log_ratio = torch.clamp(ref_logprobs - logprobs, -cap, cap)
        # k3 (Schulman): for tokens sampled from pi its value estimates KL(pi || ref) without
        # bias and is always >= 0; as a loss, though, its gradient is in expectation that of
        # KL(ref || pi), the reverse direction: E_pi[(1 - ref / pi) grad log pi] = -sum ref grad log pi
        kl = torch.exp(log_ratio) - log_ratio - 1
        per_token = per_token + config.kl_coef * kl
    loss = aggregate(per_token, mask, config, totals)
    tokens = mask.sum().clamp(min=1)
    ratio, kl = ratio.detach(), kl.detach()  # statistics only
    is_clipped = ((ratio < 1 - config.clip_low) & (advantages < 0)) | (
        (ratio > 1 + config.clip_high) & (advantages > 0)
    )
    stats = {
        "clip_fraction": float((is_clipped.float() * mask).sum() / tokens),
        "kl": float((kl * mask).sum() / tokens),
        "ratio_mean": float((ratio * mask).sum() / tokens),
        "ratio_max": float(torch.where(mask > 0, ratio, torch.zeros_like(ratio)).max()),
        "tokens": float(mask.sum()),
    }
    if behaviour_logprobs is not None:
        stats["is_weight_mean"] = float((weight * mask).sum() / tokens)
        gap = (logprobs.detach() - behaviour_logprobs) * mask
        outside = (gap < math.log1p(-config.clip_low)) | (gap > math.log1p(config.clip_high))
        stats["behaviour_log_ratio_abs"] = float(gap.abs().sum() / tokens)
        stats["behaviour_clip_fraction"] = float((outside.float() * mask).sum() / tokens)
    return loss, stats


def aggregate(per_token: Any, mask: Any, config: LossConfig, totals: BatchTotals | None = None) -> Any:
    """The batch's loss from per-token losses; with `totals` of a larger batch, this micro-batch's
    share of it (the shares of all micro-batches sum to the loss of the whole batch)."""
    totals = totals or BatchTotals.of(mask.tolist())
    if config.aggregation == "token_mean":  # every trained token counts the same (DAPO)
        return (per_token * mask).sum() / max(totals.tokens, 1.0)
    if config.aggregation == "sequence_mean":  # each sequence's mean, then the mean (original GRPO)
        per_sequence = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_sequence.sum() / max(totals.sequences, 1)
    if config.aggregation == "constant":
        # Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): each sequence's summed
        # token losses over one constant, its generation budget, then the mean over the batch's
        # sequences: sum / (sequences x constant_tokens)
        if not config.constant_tokens:
            raise ValueError("the constant aggregation needs constant_tokens (the per-sequence token budget)")
        return (per_token * mask).sum() / (max(totals.sequences, 1) * config.constant_tokens)
    raise ValueError(f"unknown aggregation {config.aggregation!r}; choose one of {AGGREGATIONS}")
