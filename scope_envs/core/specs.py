"""Policy spec strings (`"scripted"`, `"openai:gpt-5-mini"`, `"hf:Qwen/Qwen3-4B"`): one parser,
one registry of backends.

A spec is `"<backend>:<argument>"`. The registry maps a backend name to a factory called as
`factory(argument, **kwargs)`. The layers above fill it in without `scope_envs` importing them:
a benchmark declares its own backends when it is registered (`register_dialogue_env(...,
policies=...)`), the simulator package registers its backends when imported and also declares
them as entry points of the group `scope_envs.policies`, which are read the first time a spec
names a backend nobody has registered yet (so `gymnasium.make(..., simulator="openai:...")` works
with no other import, as long as the package that provides the backend is installed).

`"scripted"` needs no registry: it is the environment's own rule-based policy for the side.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from typing import Any

from scope_envs.core.scripted import FunctionSimulator

ENTRY_POINT_GROUP = "scope_envs.policies"
SCRIPTED = "scripted"

Factory = Callable[..., Any]
# backend name -> factory, or "module:attribute" of a factory imported on first use (keeps optional
# dependencies such as API clients or torch out of the import of the registry's users).
POLICY_BACKENDS: dict[str, Factory | str] = {}
_entry_points_read = False


def split_spec(spec: str) -> tuple[str, str]:
    """`("openai", "gpt-5-mini")` from `"openai:gpt-5-mini"`; `("scripted", "")` from `"scripted"`."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a policy spec is a non-empty string such as 'scripted' or 'openai:MODEL', got {spec!r}")
    backend, _, argument = spec.strip().partition(":")
    return backend, argument


def import_object(path: str) -> Any:
    """The object named by `"package.module:attribute"`."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    return getattr(importlib.import_module(module_name), attribute)


def register_policy_backend(name: str, factory: Factory | str) -> None:
    """Makes `make_policy("<name>:<argument>", **kwargs)` call `factory(<argument>, **kwargs)`."""
    if not name or ":" in name:
        raise ValueError(f"a backend name is a non-empty word without ':', got {name!r}")
    POLICY_BACKENDS[name] = factory


def policy_backends() -> list[str]:
    """Every backend name a spec may use, `"scripted"` included."""
    _read_entry_points()
    return sorted({SCRIPTED, *POLICY_BACKENDS})


def make_policy(spec: str, *, env: Any = None, side: str | None = None, **kwargs: Any) -> Any:
    """Builds a policy from a spec string.

    * `"scripted"`: the environment's own rule-based policy for `side` (needs `env` and `side`);
    * `"scripted:package.module:Class"`: that class, built with `kwargs`;
    * `"<backend>:<argument>"` for every registered backend (`policy_backends()`).
    """
    backend, argument = split_spec(spec)
    if backend == SCRIPTED:
        return _scripted(argument, env=env, side=side, **kwargs)
    if backend not in POLICY_BACKENDS:
        _read_entry_points()
    if backend not in POLICY_BACKENDS:
        raise ValueError(f"unknown policy spec {spec!r}; known backends: {', '.join(policy_backends())}")
    factory = POLICY_BACKENDS[backend]
    if isinstance(factory, str):
        factory = import_object(factory)
    return factory(argument, **kwargs)


def resolve_policy(policy: Any, *, env: Any = None, side: str | None = None) -> Any:
    """A policy from a spec string, an object with `respond`, or a plain callable."""
    if isinstance(policy, str):
        return make_policy(policy, env=env, side=side)
    if hasattr(policy, "respond"):
        return policy
    if callable(policy):
        return FunctionSimulator(policy)
    raise TypeError(
        f"a policy must be a spec string, an object with respond(), or a callable; got {type(policy).__name__}"
    )


def _scripted(path: str, *, env: Any, side: str | None, **kwargs: Any) -> Any:
    if not path:
        if env is None or side is None:
            raise ValueError(
                "'scripted' picks the environment's rule-based policy: pass env= and side=, "
                "or name a class as 'scripted:module:Class'"
            )
        policies = getattr(env, "scripted_policies", None)
        if not policies or side not in policies:
            raise ValueError(
                f"{type(env).__name__} has no scripted policy for the {side!r} side; plug a simulator in instead"
            )
        path = policies[side]
    policy = import_object(path)(**kwargs)
    if not hasattr(policy, "respond"):
        raise TypeError(f"{path} is not a policy (it has no respond method)")
    return policy


def _read_entry_points() -> None:
    global _entry_points_read
    if _entry_points_read:
        return
    _entry_points_read = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        POLICY_BACKENDS.setdefault(entry.name, entry.value)
