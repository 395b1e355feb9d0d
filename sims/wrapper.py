"""Simulator wrappers: a simulator around a simulator, one concern each, composable.

Like Gymnasium's wrappers, a `SimulatorWrapper` holds the simulator it wraps (`.simulator`), and
passes through what it does not change (determinism, batching, `close`); `unwrapped` reaches the
innermost one. `PersonaPrompting(VerbalizedSampling(sim, k=5))` gives every conversation a
behaviour and verbalizes each turn.

* `VerbalizedSampling` (`sims.verbalized`): each reply drawn from k verbalized candidates;
* `PersonaPrompting` (`sims.persona`): a behaviour prepended to the system prompt per conversation.
"""

from __future__ import annotations

from typing import Any

from scope_envs.core.policy import Simulator


class SimulatorWrapper(Simulator):
    """Base of simulators that wrap one simulator."""

    def __init__(self, simulator: Any) -> None:
        self.simulator = simulator
        self.deterministic = bool(getattr(simulator, "deterministic", False))

    @property
    def unwrapped(self) -> Any:
        inner = self.simulator
        return inner.unwrapped if isinstance(inner, SimulatorWrapper) else inner

    def close(self) -> None:
        self.simulator.close()
