"""The measure that the mechanism testbed's planted interaction matters (a mechanism test, not a
claim about P4G): scripted persuaders against each planted type and the population.

    python -m scope_envs.persuasion_acts.planted_measure
"""

from __future__ import annotations

import numpy as np

from scope_envs.core.sampling import log_softmax, sample_rows
from scope_envs.persuasion_acts.acts import PERSUADER_ACTS
from scope_envs.persuasion_acts.engine import ActsBatch
from scope_envs.persuasion_acts.env import PERSONAS_PER_SPLIT, rules_of
from scope_envs.persuasion_acts.model import HORIZON, N_PERSONA
from scope_envs.persuasion_acts.planted import APPEALS, MAJORITY, MINORITY, VERSION, planted_population
from scope_envs.persuasion_acts.population import Population, type_at

ASK_AT_ONCE = "ask at once"


def scripted_plans() -> dict[str, tuple[int, ...]]:
    """The scripted persuaders the testbed is measured with, as act sequences whose last act repeats:
    `j` appeals of one kind (`j` = 1..4, each of `APPEALS`), then a proposition, then amount requests
    until the episode ends; asking at once (`j` = 0); closing at once."""
    ask = (PERSUADER_ACTS.index("proposition-of-donation"), PERSUADER_ACTS.index("ask-donation-amount"))
    plans = {"close at once": (PERSUADER_ACTS.index("closing"),), ASK_AT_ONCE: ask}
    for appeal in APPEALS:
        for count in range(1, 5):
            plans[f"{count} x {appeal}, then ask"] = (PERSUADER_ACTS.index(appeal),) * count + ask
    return plans


def play(
    plan: tuple[int, ...],
    population: Population,
    types: np.ndarray,
    personas: np.ndarray,
    rng: np.random.Generator,
    exchanges: int = HORIZON,
) -> np.ndarray:
    """Whether each episode ends in a donation: `plan` against persuadees of these `types` (indices
    into the population's types) and personas, under the testbed's rules."""
    weights = population.family_weights(0, 0.0)
    batch = ActsBatch(personas, exchanges, rules_of(VERSION))
    acts = np.array(plan)
    while batch.live.any():
        live = np.flatnonzero(batch.live)
        batch.step_agent(live, acts[np.minimum(batch.exchange[live], len(acts) - 1)])
        waiting = np.flatnonzero(batch.awaiting_user)
        if len(waiting):
            features, mask = batch.user_features(waiting)
            logits = np.einsum("nf,nrf->nr", features, weights[types[waiting]])
            batch.step_user(waiting, sample_rows(log_softmax(logits, mask), rng)[0])
    return batch.success()


def success_table(
    population: Population | None = None, *, repeats: int = 20, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Each scripted plan's success rate (donation > 0) against the majority type alone, the minority
    alone and the population (the type at each persona's temperament): the 200 test personas
    `repeats` times each, the same draws for every plan and opponent."""
    population = planted_population() if population is None else population
    personas = np.repeat(population.personas("test", PERSONAS_PER_SPLIT["test"]), repeats, axis=0)
    opponents = {
        "majority": np.full(len(personas), MAJORITY),
        "minority": np.full(len(personas), MINORITY),
        "population": type_at(population.prior, personas[:, N_PERSONA]),
    }
    return {
        name: {
            opponent: float(play(plan, population, types, personas, np.random.default_rng([seed, 0x91A7])).mean())
            for opponent, types in opponents.items()
        }
        for name, plan in scripted_plans().items()
    }


def majority_best_loss(table: dict[str, dict[str, float]]) -> tuple[str, str, float]:
    """The plan best against the majority, the plan best against the population, and how much
    success the first loses against the population relative to the second."""
    for_majority = max(table, key=lambda name: table[name]["majority"])
    for_population = max(table, key=lambda name: table[name]["population"])
    return for_majority, for_population, table[for_population]["population"] - table[for_majority]["population"]


def main() -> None:
    table = success_table()
    print("| scripted persuader | majority | minority | population |")
    print("|---|---|---|---|")
    for name, row in table.items():
        print(f"| {name} | {row['majority']:.3f} | {row['minority']:.3f} | {row['population']:.3f} |")
    for_majority, for_population, loss = majority_best_loss(table)
    print(f"\nbest against the majority: {for_majority}; against the population: {for_population}")
    print(f"the majority's best loses {loss:.3f} in success against the population")


if __name__ == "__main__":
    main()
