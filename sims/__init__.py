"""Simulators: swappable chat policies that play either side of a SCOPE conversation.

The contract (`Simulator`, `Reply`, `ScriptedSimulator`, ...) is defined at the bottom layer,
`scope_envs.core`, and re-exported here; this package holds what is benchmark-independent on top of
it: backends (API models, local models), wrappers (Verbalized Sampling, persona prompting) and
opponents (who plays the other side of a rollout group: fixed, ensemble, checkpoint pool, live).
"""

from scope_envs.core.policy import PolicyError, Reply, Simulator, SimulatorError, Usage, run_sync
from scope_envs.core.scripted import FunctionSimulator, ScriptedSimulator
from sims.persona import PersonaPrompting
from sims.registry import BACKENDS, as_simulator, make_simulator, policy_backends, register_backend
from sims.verbalized import VerbalizedSampling, verbalize
from sims.wrapper import SimulatorWrapper

__all__ = [
    "BACKENDS",
    "FunctionSimulator",
    "PersonaPrompting",
    "PolicyError",
    "Reply",
    "ScriptedSimulator",
    "Simulator",
    "SimulatorError",
    "SimulatorWrapper",
    "Usage",
    "VerbalizedSampling",
    "as_simulator",
    "make_simulator",
    "policy_backends",
    "register_backend",
    "run_sync",
    "verbalize",
]
