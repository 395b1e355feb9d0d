"""Simulator fidelity and diversity: how a simulator's conversations compare with people's, and how
collapsed it is across personas.

Inputs are plain: per conversation, the simulated side's turns (text), an outcome (a number, e.g.
the side's reward) and, where the benchmark has an act scheme, a function that labels a turn with an act.

* `diversity`: for one set of conversations (a simulator's, or people's): turn length in words,
  lexical diversity (distinct-1/2 over all turns), and diversity across personas: the entropy
  (bits) of the first replies (exact text, normalised; and clusters of similar replies, as in
  `sims.diagnostics`), of the first replies' acts and of all turns' acts.
* `compare`: a simulator against people on the same scenarios: the outcome distributions (stated
  against stated, actual against actual where both are recorded) and the per-conversation turn
  length, each as a Wasserstein-1 distance with a bootstrap interval beside the people's own
  split-half distance (their floor); the Jensen-Shannon distance between the act distributions,
  beside the people's split-half distance and the tagger's own floor.
* `equal_size_distinct`: distinct-n at a fixed number of words, so samples of different sizes compare.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from scope_envs.core.agreement import act_distance, shares
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
    equal_words: int | None = None  # the sample size of the two below
    distinct_1_equal: float | None = None  # distinct-n at `equal_words` words (`equal_size_distinct`)
    distinct_2_equal: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def diversity(
    turns: Turns,
    act_of: Callable[[str], str] | None = None,
    *,
    threshold: float = 0.8,
    equal_words: int | None = None,
    seed: int = 0,
) -> Diversity:
    """See the module docstring. Conversations without a turn count for length but have no first
    reply. With `equal_words`, distinct-n is also given at that many words (for comparing samples)."""
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
        equal_words=equal_words,
        distinct_1_equal=equal_size_distinct(flat, 1, equal_words, seed=seed) if equal_words else None,
        distinct_2_equal=equal_size_distinct(flat, 2, equal_words, seed=seed) if equal_words else None,
    )


@dataclass(frozen=True)
class DistributionGap:
    """Two samples of a number: the Wasserstein-1 distance with a bootstrap 95% interval (both
    samples resampled), the people's own split-half W1 (two random halves of the human sample:
    the distance below which a simulator is as close as people are to each other), both means."""

    wasserstein: float
    low: float
    high: float
    human_floor: float
    mean_simulated: float
    mean_human: float
    n_simulated: int
    n_human: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_halves(n: int, draws: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """`draws` random splits of `range(n)` into two halves (the odd one out left out)."""
    halves = []
    for _ in range(draws):
        order = rng.permutation(n)
        halves.append((order[: n // 2], order[n // 2 : 2 * (n // 2)]))
    return halves


def distribution_gap(
    simulated: Sequence[float], human: Sequence[float], *, resamples: int = 1000, seed: int = 0
) -> DistributionGap:
    from scipy import stats

    a, b = np.asarray(simulated, dtype=float), np.asarray(human, dtype=float)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("comparing distributions needs at least one value on each side")
    rng = np.random.default_rng(seed)
    boot = [stats.wasserstein_distance(rng.choice(a, len(a)), rng.choice(b, len(b))) for _ in range(resamples)]
    floor = (
        [stats.wasserstein_distance(b[x], b[y]) for x, y in split_halves(len(b), resamples, rng)]
        if len(b) > 1
        else [0.0]
    )
    return DistributionGap(
        wasserstein=float(stats.wasserstein_distance(a, b)),
        low=float(np.percentile(boot, 2.5)),
        high=float(np.percentile(boot, 97.5)),
        human_floor=float(np.mean(floor)),
        mean_simulated=float(a.mean()),
        mean_human=float(b.mean()),
        n_simulated=len(a),
        n_human=len(b),
    )


def equal_size_distinct(texts: Sequence[str], n: int, words: int, *, draws: int = 20, seed: int = 0) -> float:
    """distinct-n of `words` words of whole turns drawn at random (the turns that reach the budget,
    the last one cut to fit), averaged over `draws` draws: distinct-n falls as a sample grows, so
    samples are compared at one size."""
    rng = np.random.default_rng(seed)
    split = [normalise(text).split() for text in texts]
    if sum(len(t) for t in split) < words:
        raise ValueError(f"fewer than {words} words to draw from")
    values = []
    for _ in range(draws):
        chosen, total = [], 0
        for index in rng.permutation(len(split)):
            take = split[index][: words - total]
            chosen.append(" ".join(take))
            total += len(take)
            if total >= words:
                break
        values.append(distinct_n(chosen, n))
    return float(np.mean(values))


@dataclass(frozen=True)
class ActGap:
    """The JS distance between act distributions, the people's own split-half distance (two
    random halves of the conversations) and the tagger's floor (its error alone), when known."""

    distance: float
    human_floor: float
    tagger_floor: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Fidelity:
    outcome: DistributionGap | None
    actual: DistributionGap | None
    length: DistributionGap
    acts: ActGap | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.as_dict() if self.outcome else None,
            "actual": self.actual.as_dict() if self.actual else None,
            "length": self.length.as_dict(),
            "acts": self.acts.as_dict() if self.acts else None,
        }


def words_per_turn(conversation: Sequence[str]) -> float | None:
    return float(np.mean([word_count(t) for t in conversation])) if conversation else None


def _known(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def compare(
    simulated_turns: Turns,
    human_turns: Turns,
    *,
    simulated_outcomes: Sequence[float | None] = (),
    human_outcomes: Sequence[float | None] = (),
    simulated_actual: Sequence[float | None] = (),
    human_actual: Sequence[float | None] = (),
    act_of: Callable[[str], str] | None = None,
    tagger_floor: float | None = None,
    seed: int = 0,
) -> Fidelity:
    """A simulator's conversations against people's (unknown outcomes are left out). Turns of one
    conversation are not independent, so turn length is compared per conversation (its mean words
    per turn); acts are pooled over turns, with the people's split-half distance over conversations."""

    def gap(simulated: Sequence[float | None], human: Sequence[float | None]) -> DistributionGap | None:
        a, b = _known(simulated), _known(human)
        return distribution_gap(a, b, seed=seed) if a and b else None

    length = gap([words_per_turn(c) for c in simulated_turns], [words_per_turn(c) for c in human_turns])
    if length is None:
        raise ValueError("comparing turn lengths needs a conversation with a turn on each side")
    acts = None
    if act_of is not None:
        distance = act_distance(act_distribution(simulated_turns, act_of), act_distribution(human_turns, act_of))
        tagged = [[act_of(t) for t in c] for c in human_turns]
        rng = np.random.default_rng(seed)
        halves = [
            act_distance(shares([a for i in x for a in tagged[i]]), shares([a for i in y for a in tagged[i]]))
            for x, y in split_halves(len(tagged), 200, rng)
        ]
        acts = ActGap(distance, float(np.mean(halves)) if len(tagged) > 1 else 0.0, tagger_floor)
    return Fidelity(gap(simulated_outcomes, human_outcomes), gap(simulated_actual, human_actual), length, acts)
