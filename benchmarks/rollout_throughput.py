"""Rollout throughput: batched generation vs one episode at a time, SmolLM2 as the P4G persuader.

Prints episodes/s and generated tokens/s for both and their ratio (batched / one-at-a-time),
measured in the same run. Usage: python benchmarks/rollout_throughput.py [--episodes 8]
"""

from __future__ import annotations

import argparse
import time

from baselines.training.config import TrainConfig
from baselines.training.trainer import Trainer


def measure(trainer: Trainer, groups: int, group_size: int) -> tuple[float, float]:
    started = time.perf_counter()
    players, _ = trainer.players(0, groups)
    episodes = trainer.collect(0, group_size=group_size, split="train", players=players)
    elapsed = time.perf_counter() - started
    return len(episodes) / elapsed, sum(e.generated_tokens for e in episodes) / elapsed


def make_trainer(policy: str, max_new_tokens: int) -> Trainer:
    config = TrainConfig(
        env="P4G",
        policy=policy,
        env_kwargs={"persona_source": "synthetic", "exchanges": 2},
        max_new_tokens=max_new_tokens,
        tensorboard=False,
        output_dir="runs/benchmark_rollouts",
    ).validate()
    return Trainer(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--policy", default="smollm2")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    trainer = make_trainer(args.policy, args.max_new_tokens)
    one_eps, one_tps = 0.0, 0.0
    for _ in range(args.episodes):  # one episode at a time: batch size 1 throughout
        eps, tps = measure(trainer, 1, 1)
        one_eps += eps / args.episodes
        one_tps += tps / args.episodes
    batch_eps, batch_tps = measure(trainer, 1, args.episodes)
    print(f"one at a time: {one_eps:.3f} episodes/s, {one_tps:.1f} tokens/s")
    print(f"batched ({args.episodes}): {batch_eps:.3f} episodes/s, {batch_tps:.1f} tokens/s")
    print(f"ratio batched / one-at-a-time: {batch_eps / one_eps:.2f}x episodes/s, {batch_tps / one_tps:.2f}x tokens/s")


if __name__ == "__main__":
    main()
