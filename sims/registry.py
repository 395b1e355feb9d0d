"""`make_simulator(spec)`: simulators from spec strings such as `"scripted"` or `"openai:gpt-5-mini"`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scope_envs.core.policy import import_object
from sims.base import Simulator
from sims.scripted import FunctionSimulator

# prefix -> factory, or "module:attribute" of a factory imported on first use (keeps optional
# dependencies such as API clients or torch out of `import sims`).
BACKENDS: dict[str, Callable[..., Simulator] | str] = {
    "openai": "sims.openai_backend:OpenAISimulator",
    "anthropic": "sims.anthropic_backend:AnthropicSimulator",
    "hf": "sims.hf_backend:make_hf",
    "smollm2": "sims.hf_backend:make_smollm2",
    "vllm": "sims.vllm_backend:make_vllm",
    "family": "sims.persuasion_acts:make_family",  # act-level persuasion testbed
}


def register_backend(prefix: str, factory: Callable[..., Simulator] | str) -> None:
    """Makes `make_simulator("<prefix>:<rest>", **kwargs)` call `factory(<rest>, **kwargs)`."""
    BACKENDS[prefix] = factory


def make_simulator(spec: str, *, env: Any = None, side: str | None = None, **kwargs: Any) -> Simulator:
    """Builds a simulator from a spec string.

    * `"scripted"`: the environment's own rule-based policy for `side` (needs `env` and `side`);
    * `"scripted:package.module:Class"`: that `ScriptedSimulator` class;
    * `"<backend>:<model>"` for every registered backend (`sims.BACKENDS`).
    """
    prefix, _, rest = spec.partition(":")
    if prefix == "scripted":
        return _scripted(rest, env=env, side=side, **kwargs)
    if prefix not in BACKENDS:
        known = ", ".join(["scripted", *sorted(BACKENDS)])
        raise ValueError(f"unknown simulator spec {spec!r}; known backends: {known}")
    factory = BACKENDS[prefix]
    if isinstance(factory, str):
        factory = import_object(factory)
    return factory(rest, **kwargs)


def _scripted(path: str, *, env: Any, side: str | None, **kwargs: Any) -> Simulator:
    if not path:
        policies = getattr(env, "scripted_policies", None)
        if env is None or side is None:
            raise ValueError(
                "'scripted' picks the environment's rule-based policy: pass env= and side=, "
                "or name a class as 'scripted:module:Class'"
            )
        if not policies or side not in policies:
            raise ValueError(
                f"{type(env).__name__} has no scripted policy for the {side!r} side; plug a simulator in instead"
            )
        path = policies[side]
    cls = import_object(path)
    simulator = cls(**kwargs)
    if not hasattr(simulator, "respond"):
        raise TypeError(f"{path} is not a simulator (it has no respond method)")
    return simulator


def as_simulator(policy: Any, *, env: Any = None, side: str | None = None) -> Any:
    """A policy from a spec string, an object with `respond`, or a plain callable."""
    if isinstance(policy, str):
        return make_simulator(policy, env=env, side=side)
    if hasattr(policy, "respond"):
        return policy
    if callable(policy):
        return FunctionSimulator(policy)
    raise TypeError(
        f"a simulator must be a spec string, an object with respond(), or a callable; got {type(policy).__name__}"
    )
