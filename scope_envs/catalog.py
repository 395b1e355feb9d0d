"""The environments SCOPE ships, registered with Gymnasium when `scope_envs` is imported."""

from __future__ import annotations

from scope_envs.core.registration import register_dialogue_env

# (name, "module:DialogueEnvClass", one-line description); each module stays importable without extras.
BUILTIN: tuple[tuple[str, str, str], ...] = (
    ("P4G", "scope_envs.p4g.env:P4GEnv", "Persuasion for Good: persuade the user to donate part of a $2 payment"),
    (
        "Tau2Retail",
        "scope_envs.tau2.env:Tau2RetailEnv",
        "tau2-bench retail: a customer-service agent handles orders under the retail policy",
    ),
    (
        "Tau2Airline",
        "scope_envs.tau2.env:Tau2AirlineEnv",
        "tau2-bench airline: a customer-service agent handles reservations under the airline policy",
    ),
    (
        "PersuasionActs",
        "scope_envs.persuasion_acts.env:PersuasionActsEnv",
        "Persuasion for Good at the level of dialogue acts: Discrete actions, fast, calibrated on the corpus",
    ),
    (
        "CooperBench",
        "scope_envs.cooperbench.env:CooperBenchEnv",
        "CooperBench: two coding agents implement one feature each; merged patch, hidden tests",
    ),
)


def register_all() -> None:
    for name, entry_point, description in BUILTIN:
        register_dialogue_env(name, entry_point, description)
