"""What an environment needs to know about the policies that play its sides.

The simulator contract itself lives in `sims`; the environments only rely on this protocol,
so `scope_envs` stays importable without `sims`' optional dependencies and never imports
`baselines`. Spec strings such as `"scripted"` are resolved by `sims` on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from scope_envs.core.dialogue import DialogueEnv


MAX_SEED = 2**31 - 1


def turn_seed(episode_seed: int, position: int) -> int:
    """The seed a policy gets for the reply at `position` of an episode: stateless and reproducible."""
    return int(np.random.SeedSequence([episode_seed, position]).generate_state(1)[0] % MAX_SEED)


class PolicyError(RuntimeError):
    """A policy could not produce a usable reply (after its own retries).

    Views and batches turn it into a truncation of that episode (`end_reason == "policy_error"`)
    instead of letting it end the whole run.
    """


@runtime_checkable
class ChatPolicy(Protocol):
    """Anything that answers a view: `respond(messages, tools=None, *, seed=None)`.

    It returns text, a `Message`, or an object with `to_message()` (a `sims.Reply`).
    """

    def respond(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        seed: int | None = None,
    ) -> Any: ...


def resolve_policy(policy: Any, *, env: DialogueEnv | None = None, side: str | None = None) -> ChatPolicy:
    """A policy object from a spec string, a policy object, or a plain callable."""
    from sims import as_simulator  # sims depends on scope_envs.core, so it is imported lazily

    return as_simulator(policy, env=env, side=side)


def import_object(path: str) -> Any:
    """The object named by `"package.module:attribute"`."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    return getattr(importlib.import_module(module_name), attribute)


def is_deterministic(policy: Any) -> bool:
    """True when the policy declares that the same view and seed always give the same reply."""
    return bool(getattr(policy, "deterministic", False))
