"""sb3-contrib MaskablePPO on the persuadee's side of the act-level testbed, with no wrapper.

    python examples/sb3_maskable_ppo.py --steps 5000

The persuadee may state a donation decision only in answer to a proposition or a request for the
amount; the env's `action_masks()` says which acts are allowed, and `MaskablePPO` reads it (through
SB3's `env_method`) so that the policy never wastes a turn on a forbidden act. The persuader is the
env's scripted one; the persuadee's reward is adversarial (1 - the persuader's).
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
from sb3_contrib import MaskablePPO

import scope_envs  # noqa: F401  (registers the scope/ environments)


def evaluate(model: MaskablePPO, episodes: int, seed: int) -> tuple[float, int]:
    """Mean reward, and how many of the policy's acts the env refused (0 when masking works)."""
    env = gym.make("scope/PersuasionActs-User-v0")
    rewards, refused = [], 0
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode, options={"split": "test"})
        done, total = False, 0.0
        while not done:
            masks = env.unwrapped.action_masks()
            action, _ = model.predict(observation, action_masks=masks, deterministic=True)
            observation, reward, terminated, truncated, info = env.step(action)
            refused += "error" in info
            total, done = total + float(reward), terminated or truncated
        rewards.append(total)
    return float(np.mean(rewards)), refused


def train(steps: int, seed: int = 0, eval_episodes: int = 200) -> tuple[float, int]:
    env = gym.make("scope/PersuasionActs-User-v0")
    model = MaskablePPO("MlpPolicy", env, n_steps=256, batch_size=64, seed=seed, verbose=0)
    model.learn(total_timesteps=steps)
    return evaluate(model, eval_episodes, seed=10_000 + seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=200)
    args = parser.parse_args()
    reward, refused = train(args.steps, args.seed, args.eval_episodes)
    print(f"persuadee mean reward after {args.steps} steps: {reward:.3f}; acts refused: {refused}")


if __name__ == "__main__":
    main()
