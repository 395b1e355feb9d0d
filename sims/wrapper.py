"""Simulator wrappers: a simulator around a simulator, one concern each, composable.

Like Gymnasium's wrappers, a `SimulatorWrapper` holds the simulator it wraps (`.simulator`), and
passes through what it does not change (determinism, batching, `close`); `unwrapped` reaches the
innermost one. `PersonaPrompting(VerbalizedSampling(sim, k=5))` gives every conversation a
behaviour and verbalizes each turn.

* `VerbalizedSampling` (`sims.verbalized`): each reply drawn from k verbalized candidates;
* `PersonaPrompting` (`sims.persona`): a behaviour prepended to the system prompt per conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scope_envs.core.policy import Reply, Simulator, Tools, View


class SimulatorWrapper(Simulator):
    """Base of simulators that wrap one simulator; by itself it passes every call through."""

    def __init__(self, simulator: Any) -> None:
        self.simulator = simulator
        self.deterministic = bool(getattr(simulator, "deterministic", False))
        self.name = f"{type(self).__name__}({getattr(simulator, 'name', type(simulator).__name__)})"

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return Reply.coerce(self.simulator.respond(messages, tools, seed=seed))

    def respond_batch(
        self, batch: Sequence[View], tools: Sequence[Tools] | None = None, *, seeds: Sequence[int | None] | None = None
    ) -> list[Reply]:
        if hasattr(self.simulator, "respond_batch"):
            return [Reply.coerce(r) for r in self.simulator.respond_batch(batch, tools, seeds=seeds)]
        return super().respond_batch(batch, tools, seeds=seeds)

    @property
    def unwrapped(self) -> Any:
        inner = self.simulator
        return inner.unwrapped if isinstance(inner, SimulatorWrapper) else inner

    def close(self) -> None:
        self.simulator.close()
