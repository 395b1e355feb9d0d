"""RLlib multi-agent PPO co-training BOTH sides of the act-level testbed, as two policies.

    python examples/rllib_cotraining.py --iterations 20

RLlib's own `ParallelPettingZooEnv` takes the PettingZoo env as made, with no arguments (each side
observes a `Box`; the infos are numeric); the persuader and the persuadee are two policies
updated on their own turns of the same conversations: co-training, in RLlib. The persuadee's
donation decisions answer only requests; an act it may not take now is refused and counts against
the error budget, so it learns the rule from the reward (the mask is in `info["action_mask"]`).
Needs the `rllib` extra (Ray pins its own Gymnasium version; see docs/rl-libraries.md).
"""

from __future__ import annotations

import argparse
from typing import Any

import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
from ray.tune.registry import register_env

from scope_envs.persuasion_acts import parallel_env

SIDES = ("agent", "user")


def config(train_batch: int = 1000) -> PPOConfig:
    register_env("persuasion_acts", lambda _: ParallelPettingZooEnv(parallel_env()))
    return (
        PPOConfig()
        .environment("persuasion_acts")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .multi_agent(policies=set(SIDES), policy_mapping_fn=lambda side, *args, **kwargs: side)
        .training(train_batch_size_per_learner=train_batch, minibatch_size=min(train_batch, 256), num_epochs=4)
    )


def train(iterations: int, train_batch: int = 1000) -> dict[str, Any]:
    """Runs PPO; returns the last iteration's mean episode return of each side."""
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        algorithm = config(train_batch).build_algo()
        for _ in range(iterations):
            result = algorithm.train()
        algorithm.stop()
    finally:
        ray.shutdown()
    returns = result["env_runners"]["agent_episode_returns_mean"]
    return {side: returns.get(side) for side in SIDES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    for side, value in train(args.iterations).items():
        print(f"{side}: mean episode return {value:.3f}")


if __name__ == "__main__":
    main()
