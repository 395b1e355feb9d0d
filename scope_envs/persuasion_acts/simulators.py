"""Simulators of the act-level persuasion testbed: parametric families and their Verbalized Sampling.

`ActFamily(family, gamma)` is one simulator family (see `scope_envs.persuasion_acts.model`):
plain sampling draws the persuadee's reply from `p_ref ** gamma`. `ActFamily.verbalized(k, draw)`
is Verbalized Sampling on it: the sharpened model lists `k` distinct candidate replies (drawn
without replacement from `p_ref ** gamma`, so its modes come first) and verbalizes their
probabilities under its reference behaviour; one is drawn uniformly among them (`draw="random"`,
the paper's main runs and the default) or in proportion to those probabilities (`draw="prob"`, its
ablation: with `k` as large as the reply set it recovers `p_ref` exactly). Both are vectorized
(`act`) for the trainer's batched rollouts and are plain simulators (`respond`) for the env's
views, reading the state back from the text of the view.

Spec strings: `family:3` (gamma 1), `family:3@2.5` (gamma 2.5), `family:3@2.5/vs5` (with VS, k 5, the
random draw), `family:3@2.5/vs5prob` (the draw by verbalized probability), `family:3/spread0.5`
(families half as far from the shared reference as by default).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.sampling import gumbel, log_softmax, sample_rows
from scope_envs.core.scripted import ScriptedSimulator
from scope_envs.persuasion_acts.acts import CLOSING, PERSUADEE_ACTS, PERSUADER_ACTS, STRATEGIES, act_text
from scope_envs.persuasion_acts.env import replay
from scope_envs.persuasion_acts.model import AGENT_FEATURES, HORIZON, load_reference

VS_DRAWS = ("random", "prob")  # uniform over the listed candidates, or by their verbalized probabilities


class ActFamily(ScriptedSimulator):
    """A persuadee simulator family with reference weights `W_f` and alignment sharpening `gamma`."""

    def __init__(
        self, family: int = 0, gamma: float = 1.0, *, spread: float = 1.0, k: int | None = None, draw: str = "random"
    ) -> None:
        if gamma <= 0:
            raise ValueError("gamma must be positive")
        check_verbalized(k, draw)
        self.family, self.gamma, self.spread, self.k, self.draw = int(family), float(gamma), float(spread), k, draw
        self.weights = load_reference().family_weights(self.family, self.spread)
        self.name = f"family:{self.family}@{self.gamma:g}" + verbalized_option(k, draw)
        self.name += f"/spread{self.spread:g}" if self.spread != 1.0 else ""

    def verbalized(self, k: int, draw: str = "random") -> ActFamily:
        return ActFamily(self.family, self.gamma, spread=self.spread, k=k, draw=draw)

    def linear_weights(self) -> np.ndarray:
        """`W` such that plain sampling draws from `softmax(W x)` over the allowed replies: a linear
        policy initialised with it starts as exactly this simulator (`gamma * W_f`)."""
        if self.k is not None:
            raise ValueError(f"{self.name}: Verbalized Sampling is not a linear policy; drop the /vs option")
        return self.gamma * self.weights

    def log_reference(self, features: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """`log p_ref(reply | features)` of this family, `[N, replies]`."""
        return log_softmax(features @ self.weights.T, mask)

    def distribution(self, features: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The probabilities its replies are drawn with (`reply_probabilities`): for plain sampling
        `p_ref ** gamma`, normalised."""
        return reply_probabilities(self.log_reference(features, mask), mask, self.gamma, self.k, draw=self.draw)

    def act(self, features: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Replies for a batch and their log-probabilities: under `p_ref ** gamma` for plain
        sampling; with Verbalized Sampling, of the final draw given the listed candidates."""
        return draw_reply(self.log_reference(features, mask), mask, self.gamma, self.k, rng, draw=self.draw)

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        batch = replay(messages, "user")
        features, mask = batch.user_features()
        return act_text(PERSUADEE_ACTS, int(self.act(features, mask, rng)[0][0]))


def check_verbalized(k: int | None, draw: str) -> None:
    if k is not None and k < 1:
        raise ValueError("Verbalized Sampling needs k >= 1 candidates")
    if draw not in VS_DRAWS:
        raise ValueError(f"draw must be one of {VS_DRAWS}, got {draw!r}")


def verbalized_option(k: int | None, draw: str) -> str:
    """The `/vsK` (random draw) or `/vsKprob` option of a simulator's name; empty without VS."""
    if k is None:
        return ""
    return f"/vs{k}" + ("prob" if draw == "prob" else "")


def draw_reply(
    log_ref: np.ndarray,
    mask: np.ndarray,
    gamma: float,
    k: int | None,
    rng: np.random.Generator,
    *,
    draw: str = "random",
) -> tuple[np.ndarray, np.ndarray]:
    """A simulator's replies and their log-probabilities, given its reference `log_ref`: plain
    sampling draws from `p_ref ** gamma`; Verbalized Sampling (`k`) lists `k` distinct candidates
    drawn without replacement from `p_ref ** gamma` (Gumbel top-k) and draws one of them uniformly
    (`draw="random"`) or in proportion to the reference probabilities it verbalizes for them
    (`draw="prob"`); the log-probability is then the final draw's, given the listed candidates."""
    sharpened = log_softmax(gamma * log_ref, mask)
    if k is None:
        return sample_rows(sharpened, rng)
    keys = np.where(mask, sharpened + gumbel(rng, sharpened.shape), -np.inf)
    candidates = np.argsort(-keys, axis=1)[:, :k]
    listed = np.zeros_like(mask)
    np.put_along_axis(listed, candidates, True, axis=1)
    listed &= mask
    weights = log_ref if draw == "prob" else np.zeros_like(log_ref)
    return sample_rows(log_softmax(weights, listed), rng)


def reply_probabilities(
    log_ref: np.ndarray, mask: np.ndarray, gamma: float, k: int | None, *, draw: str = "random"
) -> np.ndarray:
    """`[N, replies]`: exactly the probabilities with which `draw_reply` replies. Verbalized
    Sampling's are summed over every candidate list: the probability of each set of listed
    candidates (a Plackett-Luce draw without replacement from `p_ref ** gamma`, by dynamic
    programming over subsets of the replies), times the final draw's probability within it."""
    sharpened = log_softmax(gamma * log_ref, mask)
    if k is None:
        return np.exp(sharpened)
    states, replies = mask.shape
    listed = np.minimum(k, mask.sum(axis=1))  # how many candidates each row lists
    subsets = 1 << replies
    members = (np.arange(subsets)[:, None] >> np.arange(replies)) & 1 == 1  # [subset, reply]
    size = members.sum(axis=1)
    weights = np.where(mask, sharpened, -np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        # log of the sharpened mass outside each subset: what the next candidate is drawn from
        outside = np.logaddexp.reduce(np.where(members[None], -np.inf, weights[:, None, :]), axis=2)
        log_listing = np.full((states, subsets), -np.inf)
        log_listing[:, 0] = 0.0
        for subset in np.flatnonzero(size < listed.max()):  # in increasing order: a subset before its supersets
            growing = size[subset] < listed
            for reply in np.flatnonzero(~members[subset]):
                step = log_listing[:, subset] + weights[:, reply] - outside[:, subset]
                step = np.where(growing & np.isfinite(weights[:, reply]), step, -np.inf)
                log_listing[:, subset | 1 << reply] = np.logaddexp(log_listing[:, subset | 1 << reply], step)
    final = np.where(size[None] == listed[:, None], np.exp(log_listing), 0.0)  # [N, subset]
    if draw == "random":
        within = members[None].astype(float) / listed[:, None, None]
    else:
        reference = np.exp(log_softmax(log_ref, mask))[:, None, :] * members[None]
        within = reference / np.maximum(reference.sum(axis=2, keepdims=True), 1e-300)
    return np.einsum("ns,nsr->nr", final, within)


class ScriptedPersuader(ScriptedSimulator):
    """A reasonable rule-based persuader: greets, makes three strategy moves drawn from the ten,
    proposes a donation, asks for the amount while the persuadee keeps listening, then closes."""

    name = "scripted-persuader"
    PLAN = ("greeting", "strategy", "strategy", "strategy", "proposition-of-donation", *["ask-donation-amount"] * 3)

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        said = sum(m.role == "assistant" for m in messages)
        return act_text(PERSUADER_ACTS, int(self.act_at(np.array([said]), rng)[0][0]))

    def act(self, features: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized: the exchange is read from the persuader's `progress` feature."""
        progress = features[:, AGENT_FEATURES.index("progress")]
        return self.act_at(np.rint(progress * HORIZON).astype(int), rng)

    def act_at(self, exchange: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The acts at these exchanges (0-based) and their log-probabilities."""
        planned = np.array([PERSUADER_ACTS.index(a) if a != "strategy" else -1 for a in self.PLAN] + [CLOSING])
        acts = planned[np.minimum(exchange, len(self.PLAN))]
        strategy = acts < 0
        drawn = rng.integers(len(STRATEGIES), size=len(acts))
        acts[strategy] = PERSUADER_ACTS.index(STRATEGIES[0]) + drawn[strategy]
        return acts, np.where(strategy, -np.log(len(STRATEGIES)), 0.0)


def parse_family_spec(spec: str, **kwargs: Any) -> tuple[str, float, dict[str, Any]]:
    """`"3@2.5/vs5/spread0.5"` -> `("3", 2.5, {"k": 5, "draw": "random", "spread": 0.5})`: family,
    gamma, options; `/vs5prob` draws by the verbalized probabilities (`"draw": "prob"`)."""
    head, *options = spec.split("/")
    family, _, gamma = head.partition("@")
    for option in options:
        if option.startswith("vs"):
            count = option[2:].removesuffix("prob")
            kwargs["k"], kwargs["draw"] = int(count), "prob" if option.endswith("prob") else "random"
        elif option.startswith("spread"):
            kwargs["spread"] = float(option[6:])
        else:
            raise ValueError(f"unknown option {option!r}")
    return family, float(gamma) if gamma else 1.0, kwargs


def make_family(spec: str, **kwargs: Any) -> ActFamily:
    """`"3"`, `"3@2.5"`, `"3@2.5/vs5"`, `"3@2.5/vs5prob"`, `"3/spread0.5"`: family, gamma, Verbalized
    Sampling's k (and its draw), spread."""
    try:
        family, gamma, options = parse_family_spec(spec, **kwargs)
        return ActFamily(int(family), gamma, **options)
    except ValueError as error:
        raise ValueError(
            f"bad family spec {spec!r}: use family:ID[@GAMMA][/vsK|/vsKprob][/spreadS] ({error})"
        ) from error
