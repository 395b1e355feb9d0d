"""How a run plays its groups: its rollout, the seeds of each group, and held-out evaluation.

The trainer and `scope eval` (which reads a run folder without a trainer) share these, so the
held-out episodes of an evaluation are those the trainer plays at every evaluation of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from scope_envs.core.async_rollout import collect_async
from scope_envs.core.rollout import Episode, RolloutGroup, collect_chat
from scope_envs.core.seeding import derive_seed

ROLLOUTS = {"lockstep": collect_chat, "async": collect_async}
DEFAULT_ROLLOUT = "lockstep"  # the one default of a run, a rollout worker and a Ray rollout
EVALUATION_SALT = 1


def local_rollout(config: Any, env_info: Any) -> Callable[..., list[Episode]]:
    """The env's own rollout (a benchmark's vectorized one), else the chat rollout `config.rollout` names."""
    if config.rollout not in ROLLOUTS:
        raise ValueError(f"rollout must be one of {tuple(ROLLOUTS)}, got {config.rollout!r}")
    return env_info.rollout_function() or ROLLOUTS[config.rollout]


def rollout_groups(seed: int, step: int, players: list[dict[str, Any]], salt: int = 0) -> list[RolloutGroup]:
    """Group g of a step: its players, and a seed derived from (seed, step, g, salt)."""
    return [
        RolloutGroup(derive_seed(seed, step, group, salt), group_players) for group, group_players in enumerate(players)
    ]


# The metrics an evaluation adds to a step's record: this, and this/SIMULATOR for each simulator.
HELDOUT_SUCCESS = "heldout_success"


def heldout_success(
    config: Any,
    policy: Any,
    make_partner: Callable[[str], Any],
    play: Callable[[list[dict[str, Any]], int], list[Episode]],
) -> dict[str, float]:
    """Held-out success: test-split scenarios against each evaluation simulator. `play(players,
    group_size)` plays one group per entry of `players` at step 0 with the evaluation salt, so the
    scenarios and sampling seeds are the same at every evaluation of a run."""
    from scope_envs.core.dialogue import other_side

    side, partner_side = config.side, other_side(config.side)
    results: dict[str, float] = {}
    successes = []
    for spec in config.eval_simulators:
        players = [{side: policy, partner_side: make_partner(spec)}] * config.eval_tasks
        episodes = play(players, config.eval_samples)
        results[f"{HELDOUT_SUCCESS}/{spec}"] = float(np.mean([e.success(side) for e in episodes]))
        successes.extend(e.success(side) for e in episodes)
    results[HELDOUT_SUCCESS] = float(np.mean(successes)) if successes else float("nan")
    return results


def evaluate_run(run: Any, *, initial: bool = False) -> dict[str, float]:
    """`scope eval`: the held-out success of a run folder's newest intact checkpoint (`step`),
    played in this process (never on Ray, whatever the run was trained on); with `initial`, of
    the policy the run started from when it has no checkpoint yet."""
    from scope_envs.core.dialogue import other_side
    from scope_envs.core.registration import find_env
    from scope_envs.core.specs import make_policy

    config = run.config
    run.use_cpu_threads()
    env_info = find_env(config.env)
    probe = run.make_env()
    rollout = local_rollout(config, env_info)
    policy = run.policy(config.side, env=probe, initial=initial)

    def play(players: list[dict[str, Any]], group_size: int) -> list[Episode]:
        groups = rollout_groups(config.seed, 0, players, EVALUATION_SALT)
        key = (config.seed, 0, EVALUATION_SALT)
        return rollout(run.make_env, groups, group_size=group_size, split="test", key=key, before_turn=None)

    partner_side = other_side(config.side)
    results = heldout_success(config, policy, lambda spec: make_policy(spec, env=probe, side=partner_side), play)
    return {"step": run.loaded_step, **results}
