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

Wrappers compose in front of a spec, one meaning per prefix: `"vs5:openai:gpt-5-mini"` is
Verbalized Sampling with k = 5 around `openai:gpt-5-mini` (`"vs:..."`, the default k),
`"persona:vs:scripted"` persona prompting around that. A wrapper is registered like a backend
(`register_spec_wrapper`; `sims` registers `vs` and `persona`), and a spec's wrappers are peeled
by `parse_spec`, the one parser, so `format_spec(parse_spec(s)) == s` and a label written as a
spec builds the policy it names. Layers above add sources of their own to the same grammar
(`pool:RUN` and run folders, in `baselines`) and apply wrappers around them with `wrap_policy`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scope_envs.core.errors import UsageError
from scope_envs.core.scripted import FunctionSimulator

ENTRY_POINT_GROUP = "scope_envs.policies"
WRAPPER_ENTRY_POINT_GROUP = "scope_envs.policy_wrappers"
SCRIPTED = "scripted"

Factory = Callable[..., Any]
# backend name -> factory, or "module:attribute" of a factory imported on first use (keeps optional
# dependencies such as API clients or torch out of the import of the registry's users).
POLICY_BACKENDS: dict[str, Factory | str] = {}
# backend name -> the env classes ("module:Class") of the benchmarks that registered it; a backend
# no benchmark registered (an API, a local model) serves every env
BACKEND_ENVS: dict[str, set[str]] = {}
# wrapper name -> factory(policy, parameter, **kwargs), or "module:attribute" of one
SPEC_WRAPPERS: dict[str, Factory | str] = {}
_entry_points_read = False
_WRAPPER = re.compile(r"([a-z][a-z_]*?)([0-9]*)")


@dataclass(frozen=True)
class Spec:
    """A parsed spec: its wrappers, outermost first, each `(name, parameter or None)`, and the
    spec they wrap (a backend spec, or a source of a layer above such as `pool:RUN`)."""

    wrappers: tuple[tuple[str, int | None], ...]
    base: str

    def __str__(self) -> str:
        return format_spec(self)


def parse_spec(spec: str) -> Spec:
    """`parse_spec("vs3:family:3") == Spec((("vs", 3),), "family:3")`; a prefix is a wrapper only
    when a wrapper of that name is registered, so backends keep every other name."""
    split_spec(spec)  # the one check of what a spec is
    wrappers, rest = [], spec.strip()
    while True:
        head, sep, tail = rest.partition(":")
        match = _WRAPPER.fullmatch(head)
        if sep and tail and match and match.group(1) not in SPEC_WRAPPERS:
            _read_entry_points()  # a wrapper of a package nobody imported yet
        if not (sep and tail and match and match.group(1) in SPEC_WRAPPERS):
            break
        wrappers.append((match.group(1), int(match.group(2)) if match.group(2) else None))
        rest = tail
    return Spec(tuple(wrappers), rest)


def format_spec(spec: Spec) -> str:
    """The spec string of a parsed spec (the inverse of `parse_spec`)."""
    prefix = "".join(f"{name}{'' if parameter is None else parameter}:" for name, parameter in spec.wrappers)
    return prefix + spec.base


def wrapped(name: str, spec: str, parameter: int | None = None) -> str:
    """The spec of `spec` wrapped in `name` (`wrapped("vs", "scripted", 5) == "vs5:scripted"`)."""
    inner = parse_spec(spec)
    return format_spec(Spec(((name, parameter), *inner.wrappers), inner.base))


def register_spec_wrapper(name: str, factory: Factory | str) -> None:
    """Makes `make_policy("<name>[K]:<spec>")` call `factory(policy_of_spec, K or None)`."""
    if not re.fullmatch(r"[a-z][a-z_]*", name):
        raise ValueError(f"a wrapper name is a lower-case word, got {name!r}")
    SPEC_WRAPPERS[name] = factory


def wrap_policy(policy: Any, wrappers: tuple[tuple[str, int | None], ...]) -> Any:
    """`policy` inside `wrappers` (outermost first, as `Spec.wrappers` lists them)."""
    for name, parameter in reversed(wrappers):
        factory = SPEC_WRAPPERS[name]
        if isinstance(factory, str):
            factory = import_object(factory)
        policy = factory(policy, parameter)
    return policy


def split_spec(spec: str) -> tuple[str, str]:
    """`("openai", "gpt-5-mini")` from `"openai:gpt-5-mini"`; `("scripted", "")` from `"scripted"`."""
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(f"a policy spec is a non-empty string such as 'scripted' or 'openai:MODEL', got {spec!r}")
    backend, _, argument = spec.strip().partition(":")
    return backend, argument


def import_object(path: str) -> Any:
    """The object named by `"package.module:attribute"`."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    return getattr(importlib.import_module(module_name), attribute)


def register_policy_backend(name: str, factory: Factory | str, *, env_class: str | None = None) -> None:
    """Makes `make_policy("<name>:<argument>", **kwargs)` call `factory(<argument>, **kwargs)`;
    `env_class` (`"module:Class"`): a backend of that benchmark's env, not of every env."""
    if not name or ":" in name:
        raise ValueError(f"a backend name is a non-empty word without ':', got {name!r}")
    POLICY_BACKENDS[name] = factory
    if env_class is not None:
        BACKEND_ENVS.setdefault(name, set()).add(env_class)


def policy_backends(env: Any = None) -> list[str]:
    """Every backend name a spec may use, `"scripted"` included; with `env`, those for that env:
    the ones of its own benchmark and the ones of every env."""
    _read_entry_points()
    names = {SCRIPTED, *POLICY_BACKENDS}
    if env is not None:
        classes = {f"{cls.__module__}:{cls.__qualname__}" for cls in type(env).__mro__}
        names = {name for name in names if name not in BACKEND_ENVS or BACKEND_ENVS[name] & classes}
    return sorted(names)


def check_spec(spec: str, *, env: Any = None, also: tuple[str, ...] = ()) -> None:
    """Builds nothing; raises the error of a spec whose backend nobody registered (nor is in
    `also`, the backends of a layer above), listing the known backends for `env` and `also`."""
    if split_spec(parse_spec(spec).base)[0] not in (*policy_backends(), *also):
        known = ", ".join(sorted({*policy_backends(env), *also}))
        path = spec.startswith(("/", "./", "../", "~")) and not os.path.exists(os.path.expanduser(spec))
        note = " (and no such file or folder)" if path else ""  # where a layer above takes paths (run folders)
        raise UsageError(f"unknown policy spec {spec!r}{note}; known backends: {known}")


def make_policy(spec: str, *, env: Any = None, side: str | None = None, **kwargs: Any) -> Any:
    """Builds a policy from a spec string.

    * `"scripted"`: the environment's own rule-based policy for `side` (needs `env` and `side`);
    * `"scripted:package.module:Class"`: that class, built with `kwargs`;
    * `"<backend>:<argument>"` for every registered backend (`policy_backends()`);
    * any of them behind registered wrappers, `"vs5:<spec>"` (see `parse_spec`).
    """
    parsed = parse_spec(spec)
    if parsed.wrappers:
        return wrap_policy(make_policy(parsed.base, env=env, side=side, **kwargs), parsed.wrappers)
    check_spec(spec, env=env)
    backend, argument = split_spec(spec)
    if backend == SCRIPTED:
        return _scripted(argument, env=env, side=side, **kwargs)
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
    for entry in importlib.metadata.entry_points(group=WRAPPER_ENTRY_POINT_GROUP):
        SPEC_WRAPPERS.setdefault(entry.name, entry.value)
