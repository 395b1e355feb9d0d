"""Training methods as objects: each method is one small class (`Method`) in one module.

A method declares which sides train (`learners`), who plays the other side of each rollout group
(`opponents`), the rewards and advantage estimator of each learner, what happens after a step
(`after_step`: a population's snapshot), what it adds to a step's metrics, and what it keeps in
GPU memory (`memory`, read by `scope plan`). The one `Trainer` runs any of them.

A config names its method by a registered name (`method: population`) or by `module:Class`
(`method: my_methods:Annealed`), so a new method is one module and no other edit: subclass
`Method` (or a shipped method) and name it in the config, or call `register_method`.
"""

from __future__ import annotations

import importlib

from baselines.training.methods.base import LearnerSpec, MemoryTerms, Method

# the shipped methods, imported when first named
_REGISTRY: dict[str, str | type[Method]] = {
    "single": "baselines.training.methods.single:Single",
    "ensemble": "baselines.training.methods.ensemble:EnsembleMethod",
    "vs": "baselines.training.methods.vs:VerbalizedSamplingMethod",
    "cotrain": "baselines.training.methods.cotrain:CoTrain",
    "curriculum": "baselines.training.methods.curriculum:Curriculum",
    "population": "baselines.training.methods.population:PopulationCoTrain",
}


def register_method(name: str, method: str | type[Method]) -> None:
    """Makes `method` (a `Method` subclass, or its `"module:Class"`) the method of `name`."""
    _REGISTRY[name] = method


def method_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def method_class(name: str) -> type[Method]:
    """The class of a method name, or of `"module:Class"`; a ValueError naming the choices."""
    entry = _REGISTRY.get(name)
    if entry is None and ":" not in name:
        raise ValueError(f"method must be one of {method_names()} or a 'module:Class', got {name!r}")
    entry = entry or name
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        try:
            entry = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"method {name!r}: cannot import {module}:{attribute} ({error})") from error
    if not (isinstance(entry, type) and issubclass(entry, Method)):
        raise ValueError(f"method {name!r} is {entry!r}, not a subclass of baselines.training.methods.Method")
    return entry


def method_for(config: object) -> Method:
    """The method object of a training config (`config.method`)."""
    return method_class(config.method)(config)


__all__ = [
    "LearnerSpec",
    "MemoryTerms",
    "Method",
    "method_class",
    "method_for",
    "method_names",
    "register_method",
]
