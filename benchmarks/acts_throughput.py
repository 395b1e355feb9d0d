"""Act-level persuasion testbed throughput: agent turns per second in a batched rollout on one core.

A batch of episodes is played to the end by a random persuader against a simulator family (plain
sampling, then Verbalized Sampling); every agent turn is one persuader act plus the persuadee's
reply. The anchor, measured in the same run, is the same game stepped one episode at a time
through the PettingZoo env (`PersuasionActsEnv.step` with the family's text `respond`).
Prints turns/s for each and the ratio. The testbed's target is >= 50,000 agent turns/s batched.

Usage: OMP_NUM_THREADS=1 python benchmarks/acts_throughput.py [--episodes 4096] [--anchor-episodes 50]
(or, under pytest-benchmark with the other benchmarks: pytest benchmarks/ --benchmark-only)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from scope_envs.core.dialogue import AGENT, USER
from scope_envs.persuasion_acts import ActsBatch, PersuasionActsEnv
from scope_envs.persuasion_acts.model import load_reference
from scope_envs.persuasion_acts.simulators import ActFamily

TARGET = 50_000


def play_batched(episodes: int, simulator: ActFamily, seed: int = 0) -> int:
    """Plays a batch of episodes to the end; returns the agent turns played."""
    rng = np.random.default_rng(seed)
    personas = load_reference().personas("train", 1000)
    batch = ActsBatch(personas[rng.integers(len(personas), size=episodes)])
    turns = 0
    while batch.live.any():
        index = np.flatnonzero(batch.live)
        batch.agent_features(index)  # what a policy reads, computed as in training
        batch.step_agent(index, rng.integers(13, size=len(index)))  # any act but closing
        turns += len(index)
        waiting = np.flatnonzero(batch.awaiting_user)
        if len(waiting):
            user_features, allowed = batch.user_features(waiting)
            batch.step_user(waiting, simulator.act(user_features, allowed, rng)[0])
    return turns


def play_one_at_a_time(episodes: int, simulator: ActFamily, seed: int = 0) -> int:
    """Plays episodes one at a time through the PettingZoo env; returns the agent turns played."""
    rng = np.random.default_rng(seed)
    env = PersuasionActsEnv()
    turns = 0
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        while env.agents:
            if env.to_speak == AGENT:
                env.step({AGENT: int(rng.integers(13))})
                turns += 1
            else:
                reply = simulator.respond(env.view(USER), seed=int(rng.integers(2**31)))
                env.step({USER: reply.text})
    return turns


def batched(episodes: int, simulator: ActFamily, seed: int = 0) -> float:
    """Agent turns per second of a batched rollout."""
    started = time.perf_counter()
    return play_batched(episodes, simulator, seed) / (time.perf_counter() - started)


def one_at_a_time(episodes: int, simulator: ActFamily, seed: int = 0) -> float:
    """Agent turns per second through the PettingZoo env, one episode at a time."""
    started = time.perf_counter()
    return play_one_at_a_time(episodes, simulator, seed) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=4096)
    parser.add_argument("--anchor-episodes", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name, simulator in (("plain sampling", ActFamily(0, 3.0)), ("Verbalized Sampling k=5", ActFamily(0, 3.0, k=5))):
        anchor = one_at_a_time(args.anchor_episodes, simulator)
        fast = max(batched(args.episodes, simulator, seed) for seed in range(args.repeats))
        verdict = "meets" if fast >= TARGET else "BELOW"
        print(
            f"{name}: batched {fast:,.0f} agent turns/s ({verdict} the {TARGET:,} target); "
            f"one at a time {anchor:,.0f} turns/s; ratio {fast / anchor:.0f}x"
        )


if __name__ == "__main__":
    main()
