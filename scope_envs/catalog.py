"""The benchmarks SCOPE ships, registered with Gymnasium when `scope_envs` is imported.

Each benchmark lives whole in its own folder; this list only says where. Every entry is a string
imported on first use, so each benchmark stays importable without the others' extras.
"""

from __future__ import annotations

from scope_envs.core.registration import register_dialogue_env


def register_all() -> None:
    register_dialogue_env(
        "P4G",
        "scope_envs.p4g.env:P4GEnv",
        "Persuasion for Good: persuade the user to donate part of a $2 payment",
        reply_rules="scope_envs.p4g.rules:REPLY_RULES",
        human_reference="scope_envs.p4g.human:human_reference",
    )
    register_dialogue_env(
        "Tau2Retail",
        "scope_envs.tau2.env:Tau2RetailEnv",
        "tau2-bench retail: a customer-service agent handles orders under the retail policy",
        reply_rules="scope_envs.tau2.rules:REPLY_RULES",
    )
    register_dialogue_env(
        "Tau2Airline",
        "scope_envs.tau2.env:Tau2AirlineEnv",
        "tau2-bench airline: a customer-service agent handles reservations under the airline policy",
        reply_rules="scope_envs.tau2.rules:REPLY_RULES",
    )
    register_dialogue_env(
        "PersuasionActs",
        "scope_envs.persuasion_acts.env:PersuasionActsEnv",
        "Persuasion for Good at the level of dialogue acts: Discrete actions, fast, calibrated on the corpus",
        rollout="scope_envs.persuasion_acts.rollout:collect",
        policies={"family": "scope_envs.persuasion_acts.simulators:make_family"},
        vector_entry_point="scope_envs.persuasion_acts.vector:PersuasionActsVectorEnv",
    )
    register_dialogue_env(
        "PersuasionActs-v1",
        "scope_envs.persuasion_acts.env:PersuasionActsEnv",
        "Persuasion for Good acts, version 1: latent persuadee types fitted on the corpus; refusals end",
        rollout="scope_envs.persuasion_acts.rollout:collect",
        policies={"mixture": "scope_envs.persuasion_acts.mixture:make_mixture"},
        vector_entry_point="scope_envs.persuasion_acts.vector:PersuasionActsVectorEnv",
        version=1,
    )
    register_dialogue_env(
        "PersuasionActsPlanted",
        "scope_envs.persuasion_acts.env:PersuasionActsEnv",
        "Mechanism test, not a claim about P4G: PersuasionActs-v1's rules with two planted persuadee types "
        "whose best acts differ",
        rollout="scope_envs.persuasion_acts.rollout:collect",
        policies={"planted": "scope_envs.persuasion_acts.mixture:make_planted_mixture"},
        vector_entry_point="scope_envs.persuasion_acts.vector:PersuasionActsVectorEnv",
        version=2,
    )
    register_dialogue_env(
        "CooperBench",
        "scope_envs.cooperbench.env:CooperBenchEnv",
        "CooperBench: two coding agents implement one feature each; merged patch, hidden tests",
        runs_code=True,  # run_command executes shell commands (in its sandbox)
    )
