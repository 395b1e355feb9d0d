"""Simulators of `PersuasionActs-v1`: the fitted population and families that approximate it.

`MixtureFamily(None)` is the population itself (spec `mixture:population`): the type at the
persona's temperament under the fitted prior, then that type's replies. `MixtureFamily(f, gamma,
spread=s)` is a simulator family (spec `mixture:F@GAMMA/spreadS`, as one LLM simulator would be):
reply weights `W_k + s * E_fk`; aligned sharpening `gamma` concentrates it on the modal types
(`pi ** gamma`) and on its modal replies (`p ** gamma`). Verbalized Sampling (`/vsK`) is modelled
as asking for the distribution rather than a sample: the type is read at the temperament under the
unsharpened prior, and the reply comes from `k` candidates as in version 0 (`draw_reply`). This is
the favourable reading of VS, fixed before any remedy was run (docs/study/v1/preregistration.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.sampling import log_softmax
from scope_envs.core.scripted import ScriptedSimulator
from scope_envs.persuasion_acts.acts import PERSUADEE_ACTS, act_text
from scope_envs.persuasion_acts.env import replay, rules_of
from scope_envs.persuasion_acts.population import TEMPERAMENT, load_population, sharpened, type_at
from scope_envs.persuasion_acts.simulators import draw_reply, parse_family_spec

POPULATION = "population"


class MixtureFamily(ScriptedSimulator):
    """The fitted population (`family=None`) or a family approximating it."""

    def __init__(
        self, family: int | None = None, gamma: float = 1.0, *, spread: float = 1.0, k: int | None = None
    ) -> None:
        if gamma <= 0:
            raise ValueError("gamma must be positive")
        if k is not None and k < 1:
            raise ValueError("Verbalized Sampling needs k >= 1 candidates")
        population = load_population()
        self.family, self.gamma, self.k = family, float(gamma), k
        self.spread = 0.0 if family is None else float(spread)
        self.prior = population.prior
        self.weights = population.family_weights(0 if family is None else family, self.spread)
        head = POPULATION if family is None else str(family)
        self.name = f"mixture:{head}" + (f"@{self.gamma:g}" if self.gamma != 1 else "")
        self.name += (f"/vs{k}" if k else "") + (f"/spread{self.spread:g}" if family is not None else "")

    def verbalized(self, k: int) -> MixtureFamily:
        return MixtureFamily(self.family, self.gamma, spread=self.spread, k=k)

    def types_of(self, features: np.ndarray, *, verbalized: bool = False) -> np.ndarray:
        """The type each row's persuadee plays: its temperament's quantile of the type distribution."""
        prior = self.prior if verbalized else sharpened(self.prior, self.gamma)
        return type_at(prior, features[:, TEMPERAMENT])

    def log_reference(self, features: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        logits = np.einsum("nf,nrf->nr", features, self.weights[types])
        return log_softmax(logits, mask)

    def act(self, features: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        types = self.types_of(features, verbalized=self.k is not None)
        return draw_reply(self.log_reference(features, mask, types), mask, self.gamma, self.k, rng)

    def linear_weights(self) -> np.ndarray:
        """A linear policy's start for co-training: the modal type's weights, sharpened (`gamma * W`),
        which is this simulator wherever its sharpened prior puts the persuadee in the modal type."""
        if self.k is not None:
            raise ValueError(f"{self.name}: Verbalized Sampling is not a linear policy; drop the /vs option")
        return self.gamma * self.weights[int(np.argmax(self.prior))]

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        features, mask = replay(messages, "user", rules=rules_of(1)).user_features()
        return act_text(PERSUADEE_ACTS, int(self.act(features, mask, rng)[0][0]))


def make_mixture(spec: str, **kwargs: Any) -> MixtureFamily:
    """`"population"`, `"3"`, `"3@10"`, `"3@10/vs5"`, `"3/spread0.5"`: the population or a family."""
    try:
        head, gamma, options = parse_family_spec(spec, **kwargs)
        if head == POPULATION:
            if gamma != 1.0 or "spread" in options:
                raise ValueError("the population is the fitted model itself: no gamma or spread")
            return MixtureFamily(None, **options)
        return MixtureFamily(int(head), gamma, **options)
    except ValueError as error:
        raise ValueError(
            f"bad mixture spec {spec!r}: use mixture:population[/vsK] or mixture:ID[@GAMMA][/vsK][/spreadS] ({error})"
        ) from error
