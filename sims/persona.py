"""Persona-guided prompting: a baseline diversification that asks the simulator to play a
character with varied behaviour (patience, clarity, consistency, focus, verbosity)."""

from __future__ import annotations

from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.policy import Reply, Tools, View, as_messages
from scope_envs.core.scripted import view_digest
from sims.wrapper import SimulatorWrapper

BEHAVIOURS: dict[str, tuple[str, ...]] = {
    "patience": (
        "You are very patient.",
        "You are somewhat impatient and want this over quickly.",
        "You get irritated easily.",
    ),
    "clarity": ("You express yourself clearly.", "You are sometimes confused and misunderstand what you are told."),
    "consistency": (
        "You stay consistent.",
        "Now and then you contradict something you said earlier, then correct yourself.",
    ),
    "focus": ("You stay on topic.", "You occasionally drift into an off-topic remark before coming back."),
    "verbosity": ("You answer in few words.", "You are chatty and give more detail than needed."),
}


def behaviour_for(system_prompt: str, seed: int) -> list[str]:
    """One option per dimension, fixed for a conversation (its system prompt) and a seed."""
    rng = np.random.default_rng([seed, view_digest([Message("system", system_prompt)])])
    return [str(options[int(rng.integers(len(options)))]) for options in BEHAVIOURS.values()]


class PersonaPrompting(SimulatorWrapper):
    """Wraps a simulator: its system prompt opens with a behaviour drawn per conversation."""

    def __init__(self, simulator: Any, seed: int = 0) -> None:
        super().__init__(simulator)
        self.seed = seed
        self.name = f"persona({getattr(simulator, 'name', type(simulator).__name__)})"

    def prompted(self, messages: View) -> tuple[list[Message], str]:
        """The view with the behaviour prepended to its system prompt, and the behaviour."""
        view = as_messages(messages)
        has_system = bool(view) and view[0].role == "system"
        system = view[0].text if has_system else ""
        traits = " ".join(behaviour_for(system, self.seed))
        prefix = f"Play your part with this behaviour: {traits}"
        return [
            Message("system", f"{prefix}\n\n{system}" if system else prefix),
            *(view[1:] if has_system else view),
        ], traits

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return self.respond_batch([messages], [tools], seeds=[seed])[0]

    def respond_batch(self, batch: Any, tools: Any = None, *, seeds: Any = None) -> list[Reply]:
        prompted = [self.prompted(view) for view in batch]
        replies = self.simulator.respond_batch([view for view, _ in prompted], tools, seeds=seeds)
        for reply, (_, traits) in zip(replies, prompted):
            reply.metadata["persona_behaviour"] = traits
        return replies


def persona_spec(simulator: Any, seed: int | None = None) -> PersonaPrompting:
    """The `persona[SEED]:SPEC` wrapper of the spec grammar."""
    return PersonaPrompting(simulator, seed=seed or 0)
