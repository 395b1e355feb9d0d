"""Stable-Baselines3 PPO on the persuader's side of the act-level testbed, with no wrapper.

    python examples/sb3_ppo.py --steps 20000

`gymnasium.make("scope/PersuasionActs-v0")` observes a feature vector (a `Box`) and acts with a
`Discrete` act, so SB3's `MlpPolicy` takes it as is; the persuadee is the env's default simulator.
Prints the trained policy's mean reward on held-out personas (random play is about 0.03, always
asking for the amount about 0.30).
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO

import scope_envs  # noqa: F401  (registers the scope/ environments)


def evaluate(model: PPO, episodes: int, seed: int) -> float:
    env = gym.make("scope/PersuasionActs-v0")
    rewards = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode, options={"split": "test"})
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(observation, deterministic=True)
            observation, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        rewards.append(total)
    return float(np.mean(rewards))


def train(steps: int, seed: int = 0, eval_episodes: int = 500, ent_coef: float = 0.0) -> float:
    env = gym.make("scope/PersuasionActs-v0")
    rollout = min(512, steps)  # steps per update (a smoke run of a few hundred steps does one)
    model = PPO("MlpPolicy", env, n_steps=rollout, batch_size=128, ent_coef=ent_coef, seed=seed, verbose=0)
    model.learn(total_timesteps=steps)
    return evaluate(model, eval_episodes, seed=10_000 + seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=500)
    parser.add_argument("--ent-coef", type=float, default=0.0)
    args = parser.parse_args()
    reward = train(args.steps, args.seed, args.eval_episodes, args.ent_coef)
    print(f"mean reward after {args.steps} steps: {reward:.3f}")


if __name__ == "__main__":
    main()
