"""Simulator fidelity and diversity: how a simulator's conversations compare with people's, and how
collapsed it is across personas.

Inputs are plain: per conversation, the simulated side's turns (text), an outcome (a number, e.g.
the side's reward) and, where the benchmark has an act scheme, a function that labels a turn with an act.

* `diversity`: for one set of conversations (a simulator's, or people's): turn length in words,
  lexical diversity (distinct-1/2 over all turns), and diversity across personas: the entropy
  (bits) of the first replies (exact text, normalised; and clusters of similar replies, as in
  `sims.diagnostics`), of the first replies' acts and of all turns' acts.
* `compare`: a simulator against people on the same scenarios: the outcome distributions
  (Wasserstein-1 distance and the two-sample Kolmogorov-Smirnov statistic and p-value, from
  `scipy.stats`), the same for turn lengths, and the Jensen-Shannon distance between the act
  distributions.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from sims.diagnostics import cluster, distinct_n, embed

Turns = Sequence[Sequence[str]]


def entropy_bits(labels: Sequence[Any]) -> float:
    """The entropy (bits) of the empirical distribution of `labels` (0 for one label or none)."""
    counts = np.array(list(Counter(labels).values()), dtype=float)
    if counts.sum() == 0:
        return 0.0
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum()) + 0.0  # + 0.0: no negative zero for a single label


def normalise(text: str) -> str:
    """Lower case, words only: replies that differ in punctuation or spacing are the same reply."""
    return " ".join(re.findall(r"[\w$']+", text.lower()))


def word_count(text: str) -> int:
    return len(normalise(text).split())


def act_distribution(turns: Turns, act_of: Callable[[str], str]) -> dict[str, float]:
    counts = Counter(act_of(turn) for conversation in turns for turn in conversation)
    total = sum(counts.values())
    return {act: count / total for act, count in sorted(counts.items())} if total else {}


@dataclass(frozen=True)
class Diversity:
    conversations: int
    turns_per_conversation: float
    words_per_turn: float
    distinct_1: float
    distinct_2: float
    first_reply_entropy: float  # bits, over exact (normalised) first replies
    first_reply_unique_share: float
    first_reply_cluster_entropy: float  # bits, over clusters of similar first replies
    first_act_entropy: float | None = None
    act_entropy: float | None = None
    acts: dict[str, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def diversity(turns: Turns, act_of: Callable[[str], str] | None = None, *, threshold: float = 0.8) -> Diversity:
    """See the module docstring. Conversations without a turn count for length but have no first reply."""
    if not turns:
        raise ValueError("diversity needs at least one conversation")
    flat = [turn for conversation in turns for turn in conversation]
    firsts = [conversation[0] for conversation in turns if conversation]
    normalised = [normalise(text) for text in firsts]
    clusters = cluster(embed(normalised, "tfidf")[0], threshold) if firsts else []
    acts = act_distribution(turns, act_of) if act_of is not None else None
    return Diversity(
        conversations=len(turns),
        turns_per_conversation=float(np.mean([len(c) for c in turns])),
        words_per_turn=float(np.mean([word_count(t) for t in flat])) if flat else 0.0,
        distinct_1=distinct_n(flat, 1),
        distinct_2=distinct_n(flat, 2),
        first_reply_entropy=entropy_bits(normalised),
        first_reply_unique_share=len(set(normalised)) / len(normalised) if normalised else 0.0,
        first_reply_cluster_entropy=entropy_bits(clusters),
        first_act_entropy=entropy_bits([act_of(t) for t in firsts]) if act_of is not None else None,
        act_entropy=entropy_bits([act_of(t) for t in flat]) if act_of is not None else None,
        acts=acts,
    )


@dataclass(frozen=True)
class DistributionGap:
    """Two samples of a number: Wasserstein-1 distance, KS statistic and p-value, and both means."""

    wasserstein: float
    ks_statistic: float
    ks_p_value: float
    mean_simulated: float
    mean_human: float
    n_simulated: int
    n_human: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def distribution_gap(simulated: Sequence[float], human: Sequence[float]) -> DistributionGap:
    from scipy import stats

    a, b = np.asarray(simulated, dtype=float), np.asarray(human, dtype=float)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("comparing distributions needs at least one value on each side")
    ks = stats.ks_2samp(a, b)
    return DistributionGap(
        wasserstein=float(stats.wasserstein_distance(a, b)),
        ks_statistic=float(ks.statistic),
        ks_p_value=float(ks.pvalue),
        mean_simulated=float(a.mean()),
        mean_human=float(b.mean()),
        n_simulated=len(a),
        n_human=len(b),
    )


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


@dataclass(frozen=True)
class Fidelity:
    outcome: DistributionGap | None
    length: DistributionGap
    act_js_distance: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.as_dict() if self.outcome else None,
            "length": self.length.as_dict(),
            "act_js_distance": self.act_js_distance,
        }


def compare(
    simulated_turns: Turns,
    human_turns: Turns,
    *,
    simulated_outcomes: Sequence[float | None] = (),
    human_outcomes: Sequence[float | None] = (),
    act_of: Callable[[str], str] | None = None,
) -> Fidelity:
    """A simulator's conversations against people's (unknown outcomes are left out)."""
    simulated_known = [o for o in simulated_outcomes if o is not None]
    human_known = [o for o in human_outcomes if o is not None]
    outcome = distribution_gap(simulated_known, human_known) if simulated_known and human_known else None
    length = distribution_gap(
        [word_count(t) for c in simulated_turns for t in c], [word_count(t) for c in human_turns for t in c]
    )
    acts = None
    if act_of is not None:
        acts = act_distance(act_distribution(simulated_turns, act_of), act_distribution(human_turns, act_of))
    return Fidelity(outcome, length, acts)
