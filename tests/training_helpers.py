"""Policies used by the training tests."""

from __future__ import annotations

from sims import ScriptedSimulator

# a tiny random language model as the P4G persuader against `ParityPersuadee`: seconds a step
TINY_P4G = [
    "env=P4G",
    "policy=tiny",
    "groups_per_step=2",
    "group_size=3",
    "max_new_tokens=8",
    "env_kwargs={persona_source: synthetic, exchanges: 2}",
    "simulators=[scripted:training_helpers:ParityPersuadee]",
    "eval_simulators=[scripted]",
    "eval_tasks=2",
]

# Population Co-Training on the act-level testbed, a snapshot and a checkpoint every step: milliseconds a step
TINY_POPULATION = [
    "env=PersuasionActs",
    "policy=linear",
    "method=population",
    "simulator_policy=family:0@3",
    "simulators=[family:0@3]",
    "eval_simulators=[family:100]",
    "groups_per_step=2",
    "group_size=2",
    "micro_batch=64",
    "eval_tasks=1",
    "eval_every=100",
    "tensorboard=false",
    "pool_every=1",
    "pool_size=2",
    "steps=2",
    "checkpoint_every=1",
]


class ParityPersuadee(ScriptedSimulator):
    """Donates $1 when the persuader's last message has an even number of characters: a reward
    that varies across a group of random-text episodes, so updates are never trivially zero."""

    def reply(self, messages, tools, rng):
        heard = self.heard(messages)
        return "Okay. [DONATE $1]" if heard and len(heard[-1]) % 2 == 0 else "No, thank you."
