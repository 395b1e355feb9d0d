"""`CategoricalSimulator`: a simulator with an explicit reply distribution and a sharpening exponent.

Replies are drawn from `p_ref ** gamma` (normalised): `gamma = 1` reproduces the reference
behaviour, `gamma > 1` concentrates on the modal replies, the formal model of how alignment
sharpens a simulator into mode collapse. Useful for calibrating collapse diagnostics and for
fast studies with known ground truth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.scripted import ScriptedSimulator

Candidates = Sequence[tuple[str, float]]


def sharpen(p_ref: np.ndarray, gamma: float) -> np.ndarray:
    weights = np.power(np.asarray(p_ref, dtype=float), gamma)
    return weights / weights.sum()


class CategoricalSimulator(ScriptedSimulator):
    """`candidates` is a fixed list of `(reply, p_ref)` or a function of the view returning one."""

    def __init__(
        self,
        candidates: Candidates | Callable[[list[Message]], Candidates],
        gamma: float = 1.0,
        name: str | None = None,
    ) -> None:
        if gamma <= 0:
            raise ValueError("gamma must be positive")
        self.candidates = candidates
        self.gamma = gamma
        self.name = name or f"categorical(gamma={gamma:g})"

    def distribution(self, messages: list[Message]) -> tuple[list[str], np.ndarray]:
        pairs = self.candidates(messages) if callable(self.candidates) else self.candidates
        texts = [text for text, _ in pairs]
        return texts, sharpen(np.array([p for _, p in pairs]), self.gamma)

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        texts, probabilities = self.distribution(messages)
        return texts[int(rng.choice(len(texts), p=probabilities))]
