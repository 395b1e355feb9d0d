"""Simulators of `PersuasionActs-v1`: the fitted population and families that approximate it.

`MixtureFamily(None)` is the population itself (spec `mixture:population`): the type at the
persona's temperament under the fitted prior, then that type's replies. `MixtureFamily(f, gamma,
spread=s)` is a simulator family (spec `mixture:F@GAMMA/spreadS`, as one LLM simulator would be):
reply weights `W_k + s * E_fk`; aligned sharpening `gamma` concentrates it on the modal types
(`pi ** gamma`) and on its modal replies (`p ** gamma`). Verbalized Sampling (`/vsK`) is modelled
as asking for the distribution rather than a sample: the type is read at the temperament under the
unsharpened prior, and the reply comes from `k` candidates as in version 0 (`draw_reply`): drawn
uniformly among them (`/vsK`, the paper's main runs) or by their verbalized reference probabilities
(`/vsKprob`, its ablation, the draw docs/study/v1/preregistration.md fixed). Reading the type at the
unsharpened prior is the favourable reading of VS, fixed there before any remedy was run.

`MixtureFamily(..., version=2)` is the same on the mechanism testbed's planted population
(`scope_envs.persuasion_acts.planted`), with specs of its own backend: `planted:population`,
`planted:F@GAMMA/spreadS`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.sampling import log_softmax
from scope_envs.core.scripted import ScriptedSimulator
from scope_envs.persuasion_acts.acts import PERSUADEE_ACTS, act_text
from scope_envs.persuasion_acts.env import replay, rules_of
from scope_envs.persuasion_acts.planted import VERSION as PLANTED
from scope_envs.persuasion_acts.planted import population_for
from scope_envs.persuasion_acts.population import TEMPERAMENT, sharpened, type_at
from scope_envs.persuasion_acts.simulators import (
    check_verbalized,
    draw_reply,
    parse_family_spec,
    reply_probabilities,
    verbalized_option,
)

POPULATION = "population"
BACKENDS = {1: "mixture", 2: "planted"}  # the spec backend of each version's population and families


class MixtureFamily(ScriptedSimulator):
    """The fitted population (`family=None`) or a family approximating it."""

    def __init__(
        self,
        family: int | None = None,
        gamma: float = 1.0,
        *,
        spread: float = 1.0,
        k: int | None = None,
        draw: str = "random",
        version: int = 1,
    ) -> None:
        if gamma <= 0:
            raise ValueError("gamma must be positive")
        check_verbalized(k, draw)
        population = population_for(version)
        self.family, self.gamma, self.k, self.draw, self.version = family, float(gamma), k, draw, version
        self.spread = 0.0 if family is None else float(spread)
        self.prior = population.prior
        self.weights = population.family_weights(0 if family is None else family, self.spread)
        head = POPULATION if family is None else str(family)
        self.name = f"{BACKENDS[version]}:{head}" + (f"@{self.gamma:g}" if self.gamma != 1 else "")
        self.name += verbalized_option(k, draw) + (f"/spread{self.spread:g}" if family is not None else "")

    def verbalized(self, k: int, draw: str = "random") -> MixtureFamily:
        return MixtureFamily(self.family, self.gamma, spread=self.spread, k=k, draw=draw, version=self.version)

    def types_of(self, features: np.ndarray, *, verbalized: bool = False) -> np.ndarray:
        """The type each row's persuadee plays: its temperament's quantile of the type distribution."""
        prior = self.prior if verbalized else sharpened(self.prior, self.gamma)
        return type_at(prior, features[:, TEMPERAMENT])

    def log_reference(self, features: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        logits = np.einsum("nf,nrf->nr", features, self.weights[types])
        return log_softmax(logits, mask)

    def distribution(self, features: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """`[N, replies]`: exactly the probabilities `act` draws each row's reply with."""
        types = self.types_of(features, verbalized=self.k is not None)
        log_ref = self.log_reference(features, mask, types)
        return reply_probabilities(log_ref, mask, self.gamma, self.k, draw=self.draw)

    def act(self, features: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        types = self.types_of(features, verbalized=self.k is not None)
        return draw_reply(self.log_reference(features, mask, types), mask, self.gamma, self.k, rng, draw=self.draw)

    def typed_linear_weights(self) -> tuple[np.ndarray, Any] | None:
        """A typed linear policy's start for co-training: each type's weights, sharpened (`gamma * W`),
        and how a row's type is read (this family's `types_of`), which is exactly this simulator's
        plain sampling; None where the population has one type (`linear_weights` is then exact)."""
        if self.k is not None:
            raise ValueError(f"{self.name}: Verbalized Sampling is not a linear policy; drop the /vs option")
        if len(self.prior) == 1:
            return None
        return self.gamma * self.weights, self.types_of

    def linear_weights(self) -> np.ndarray:
        """A linear policy's start for co-training: the modal type's weights, sharpened (`gamma * W`),
        which is this simulator wherever its sharpened prior puts the persuadee in the modal type."""
        if self.k is not None:
            raise ValueError(f"{self.name}: Verbalized Sampling is not a linear policy; drop the /vs option")
        return self.gamma * self.weights[int(np.argmax(self.prior))]

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        features, mask = replay(messages, "user", rules=rules_of(self.version)).user_features()
        return act_text(PERSUADEE_ACTS, int(self.act(features, mask, rng)[0][0]))


def make_mixture(spec: str, **kwargs: Any) -> MixtureFamily:
    """`"population"`, `"3"`, `"3@10"`, `"3@10/vs5"`, `"3@10/vs5prob"`, `"3/spread0.5"`: the population
    or a family (`/vsK`: Verbalized Sampling's random draw; `/vsKprob`: its draw by probability)."""
    try:
        head, gamma, options = parse_family_spec(spec, **kwargs)
        if head == POPULATION:
            if gamma != 1.0 or "spread" in options:
                raise ValueError("the population is the fitted model itself: no gamma or spread")
            return MixtureFamily(None, **options)
        return MixtureFamily(int(head), gamma, **options)
    except ValueError as error:
        backend = BACKENDS[kwargs.get("version", 1)]
        raise ValueError(
            f"bad {backend} spec {spec!r}: use {backend}:population[/vsK|/vsKprob] or "
            f"{backend}:ID[@GAMMA][/vsK|/vsKprob][/spreadS] ({error})"
        ) from error


def planted_persuadee() -> MixtureFamily:
    """The planted population as the env's scripted persuadee (spec `planted:population`)."""
    return MixtureFamily(None, version=PLANTED)


def make_planted_mixture(spec: str, **kwargs: Any) -> MixtureFamily:
    """The `planted` spec backend: `"population"`, `"7@10/spread0.25"`, `"7@10/vs5/spread0.25"`: the
    planted population or a family approximating it, as `mixture:` specs are on version 1."""
    return make_mixture(spec, version=PLANTED, **kwargs)
