"""Simulators: swappable chat policies that play either side of a SCOPE conversation."""

from sims.base import Reply, Simulator, SimulatorError, Usage, run_sync
from sims.registry import BACKENDS, as_simulator, make_simulator, register_backend
from sims.scripted import FunctionSimulator, ScriptedSimulator

__all__ = [
    "BACKENDS",
    "FunctionSimulator",
    "Reply",
    "ScriptedSimulator",
    "Simulator",
    "SimulatorError",
    "Usage",
    "as_simulator",
    "make_simulator",
    "register_backend",
    "run_sync",
]
