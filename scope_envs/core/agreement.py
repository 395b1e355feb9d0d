"""Agreement between two labellings of the same units: the shares of each label, the
Jensen-Shannon distance between two label distributions, and how well a tagger agrees with
human labels (accuracy, Cohen's kappa, per-label F1, and the floor its error puts under a
distance between label distributions).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


def act_distance(simulated: dict[str, float], human: dict[str, float]) -> float:
    """The Jensen-Shannon distance (base 2: 0 identical, 1 disjoint) between two act distributions."""
    from scipy.spatial.distance import jensenshannon

    acts = sorted(set(simulated) | set(human))
    if not acts:
        return 0.0
    p = np.array([simulated.get(a, 0.0) for a in acts])
    q = np.array([human.get(a, 0.0) for a in acts])
    if p.sum() == 0 or q.sum() == 0:
        return 1.0 if p.sum() != q.sum() else 0.0
    distance = float(jensenshannon(p, q, base=2))
    return 0.0 if math.isnan(distance) else distance


def shares(labels: Sequence[str]) -> dict[str, float]:
    counts = Counter(labels)
    total = sum(counts.values())
    return {label: count / total for label, count in sorted(counts.items())} if total else {}


@dataclass(frozen=True)
class TaggerQuality:
    """An act tagger against human labels of the same units: accuracy, the accuracy of always
    answering the most frequent label, Cohen's kappa, F1 per act, and its floor: the JS distance
    between the act distribution it reports and the one the annotators gave (a distance of that
    size can be the tagger's error alone)."""

    units: int
    accuracy: float
    majority: float
    kappa: float
    f1: dict[str, float]
    floor: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def tagger_quality(expected: Sequence[str], predicted: Sequence[str]) -> TaggerQuality:
    if len(expected) != len(predicted) or not expected:
        raise ValueError("tagger_quality needs as many predicted labels as expected ones, at least one")
    n = len(expected)
    accuracy = sum(e == p for e, p in zip(expected, predicted)) / n
    truth, guess = Counter(expected), Counter(predicted)
    chance = sum(truth[label] * guess[label] for label in truth) / n**2
    kappa = (accuracy - chance) / (1 - chance) if chance < 1 else 1.0
    f1 = {}
    for label in sorted(set(expected) | set(predicted)):
        hits = sum(e == p == label for e, p in zip(expected, predicted))
        f1[label] = 2 * hits / (truth[label] + guess[label])
    return TaggerQuality(
        n, accuracy, truth.most_common(1)[0][1] / n, kappa, f1, act_distance(shares(predicted), shares(expected))
    )
