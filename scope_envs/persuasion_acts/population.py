"""The persuadee population of `PersuasionActs-v1`: latent types fitted on the P4G corpus.

Version 0's persuadee answers every act the same way up to a persona shift, so the best act is the
same for everyone and a simulator that has lost its minority replies costs the agent nothing.
Version 1 makes that cost possible, and fits rather than tunes it (`fit_population.py`):

* **Types.** A persuadee is one of `K` latent types drawn from the prior `pi`; each type has its
  own masked softmax over replies, linear in the features of the moment (`USER_FEATURES_V1`: v0's
  features and how many requests came before), so types react differently to each act (an act x
  type interaction). `K` is chosen by held-out log-likelihood on corpus dialogues.
* **Refusals end.** A refusal of a request ends the episode without a donation, and a persuadee
  answers at most `max_requests` requests (the most any corpus persuader made); both are read from
  the corpus, and how often a corpus refusal was final is recorded in `population.json`.
* **Collapse where the paper puts it.** A simulator family `f` approximates the population with
  its own reply weights (`W_k + spread * E_fk`) and, when aligned (`gamma > 1`), concentrates on the
  modal types (`pi ** gamma`, normalised) as well as on its modal replies (`p ** gamma`).

The type is part of the scenario: each persona carries a `temperament` quantile `u`, and a
simulator plays the type at `u` of its own (possibly sharpened) type distribution. A simulator thus
stays stateless (the type is read back from the features or the persona's text) and every family
meets the same `u`, so a sharpened family maps more of `u` to its modal type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from scope_envs.persuasion_acts.acts import PERSUADEE_ACTS
from scope_envs.persuasion_acts.model import N_PERSONA, USER_FEATURES, user_features

POPULATION_PATH = Path(__file__).with_name("population.json")
REQUEST_SCALE = 4.0  # requests are scaled by this in the features
FITTED_FEATURES: tuple[str, ...] = (*USER_FEATURES, "requests")
USER_FEATURES_V1: tuple[str, ...] = (*FITTED_FEATURES, "temperament")
TEMPERAMENT = len(USER_FEATURES_V1) - 1


def user_features_v1(
    act: np.ndarray,
    repeats: np.ndarray,
    positive: np.ndarray,
    negative: np.ndarray,
    exchange: np.ndarray,
    requests: np.ndarray,
    persona: np.ndarray,
) -> np.ndarray:
    """`[N, len(USER_FEATURES_V1)]`; `persona` is `[N, N_PERSONA + 1]`: the Big Five and the temperament."""
    persona = np.asarray(persona, float)
    base = user_features(act, repeats, positive, negative, exchange, persona[:, :N_PERSONA])
    return np.column_stack([base, np.asarray(requests, float) / REQUEST_SCALE, persona[:, N_PERSONA]])


@dataclass(frozen=True)
class Population:
    """The fitted persuadee population: type prior, per-type reply weights, rules and fit record."""

    prior: np.ndarray  # [K]
    weights: np.ndarray  # [K, N_PERSUADEE, len(FITTED_FEATURES)]
    persona_correlation: np.ndarray
    max_requests: int
    meta: dict

    @property
    def types(self) -> int:
        return len(self.prior)

    def family_weights(self, family: int, spread: float) -> np.ndarray:
        """`[K, N_PERSUADEE, len(USER_FEATURES_V1)]`: family `f`'s reply weights (zero on temperament)."""
        noise = np.random.default_rng([0x5C0FE, 1, int(family)]).standard_normal(self.weights.shape)
        weights = self.weights + spread * noise
        return np.concatenate([weights, np.zeros((*weights.shape[:2], 1))], axis=2)

    def personas(self, split: str, count: int) -> np.ndarray:
        """`count` personas of a split: the Big Five correlated as in the corpus, and a temperament
        quantile in (0, 1); fixed per split."""
        stream = {"train": 1, "test": 2}[split]
        rng = np.random.default_rng([0xB16, 1, stream])
        traits = rng.standard_normal((count, N_PERSONA)) @ np.linalg.cholesky(self.persona_correlation).T
        temperament = rng.uniform(0.0005, 0.9995, count)
        return np.round(np.column_stack([np.clip(traits, -4.0, 4.0), temperament]), 3)


def sharpened(prior: np.ndarray, gamma: float) -> np.ndarray:
    logits = gamma * np.log(np.maximum(prior, 1e-300))
    out = np.exp(logits - logits.max())
    return out / out.sum()


def type_at(prior: np.ndarray, quantile: np.ndarray) -> np.ndarray:
    """The type at each temperament quantile of a type distribution (its inverse CDF)."""
    edges = np.cumsum(prior)[:-1]
    return np.searchsorted(edges, np.asarray(quantile), side="right")


@lru_cache(maxsize=4)
def load_population(path: str | Path = POPULATION_PATH) -> Population:
    data = json.loads(Path(path).read_text())
    if tuple(data["features"]) != FITTED_FEATURES or tuple(data["persuadee_acts"]) != PERSUADEE_ACTS:
        raise ValueError(f"{path} was fitted for other features or acts: regenerate it with fit_population.py")
    return Population(
        np.array(data["prior"]),
        np.array(data["weights"]),
        np.array(data["persona_correlation"]),
        int(data["max_requests"]),
        data["meta"],
    )
