"""Categorical sampling over batches of discrete choices (acts), with masks: one implementation for
simulators and trainable policies alike."""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Log-probabilities over the last axis; choices where `mask` is False get `-inf`."""
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def gumbel(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return -np.log(-np.log(rng.uniform(1e-12, 1.0, shape)))


def sample_rows(logp: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One draw per row of `[N, K]` log-probabilities (Gumbel-max), and the log-probability of each."""
    drawn = np.argmax(logp + gumbel(rng, logp.shape), axis=1)
    return drawn, logp[np.arange(len(drawn)), drawn]
