"""Rollouts on Ray: two rollout workers on two nodes (ours) against one worker (the anchor), and
one worker on Ray (ours) against the same work in this process (the anchor: Ray's overhead).

    pytest benchmarks/test_ray_scaleout.py --benchmark-only -s

A local two-node cluster (`ray.cluster_utils.Cluster`, one CPU per node). Each rollout plays
`TASKS` tasks of `PER_WORKER` one-episode groups of 20 user turns; the user answers in 50-250 ms
(drawn from each request's seed), as the loopback OpenAI-compatible server of
`benchmarks/test_async_rollouts.py` does (`http`, built in each worker from its spec, with
`PER_WORKER` requests in flight), or as its in-process sleeping simulator does (`sleeping`).
Every worker plays one task at a time, so each has `PER_WORKER` episodes in flight: one worker
plays the tasks one after the other, two play two at a time. The in-process anchor plays the same
tasks one after the other with `collect_async`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("openai")

import test_async_rollouts as single_process  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from test_async_rollouts import AGENT, EXCHANGES, LATENCY, SleepingUser, server_url  # noqa: E402, F401

from baselines.distributed.ray_rollout import RayRollout  # noqa: E402
from baselines.distributed.rollout_worker import FromSpec  # noqa: E402
from scope_envs.core.async_rollout import collect_async  # noqa: E402
from scope_envs.core.rollout import RolloutGroup  # noqa: E402
from sims.testing import SmallTalkEnv  # noqa: E402

PER_WORKER = 8  # episodes in flight per worker (and in the in-process anchor)
TASKS = 4
REPORT: list[str] = []


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    two_nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    two_nodes.add_node(num_cpus=1)
    ray.init(address=two_nodes.address, log_to_driver=False)
    for module in (sys.modules[__name__], single_process):  # their players travel by value
        ray.cloudpickle.register_pickle_by_value(module)
    try:
        yield two_nodes
    finally:
        ray.shutdown()
        two_nodes.shutdown()
        print("\n" + "\n".join(REPORT))


def user_of(backend: str, url: str) -> Any:
    if backend == "sleeping":
        return SleepingUser()
    options = (("base_url", url + "/v1"), ("api_key", "sk-local"), ("concurrency", PER_WORKER))
    return FromSpec("openai:user", "user", options)


def groups_for(user: Any) -> list[RolloutGroup]:
    return [RolloutGroup(seed, {"agent": AGENT, "user": user}) for seed in range(TASKS * PER_WORKER)]


def timed(label: str, play: Any) -> Any:
    episodes = TASKS * PER_WORKER
    ideal = PER_WORKER / (EXCHANGES * sum(LATENCY) / 2)  # episodes/s of one worker that never waits

    def run() -> int:
        started = time.perf_counter()
        played = play()
        wall = time.perf_counter() - started
        assert len(played) == episodes and all(e.turns >= EXCHANGES for e in played)
        REPORT.append(f"{label}: {episodes / wall:.2f} episodes/s ({episodes / wall / ideal:.2f}x one ideal worker)")
        print("\n" + REPORT[-1])
        return episodes

    return run


@pytest.mark.parametrize("backend", ["http", "sleeping"])
@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_two_workers_on_two_nodes_vs_one(compare, cluster, server_url, backend, side):  # noqa: F811
    workers = 2 if side == "ours" else 1
    rollout = RayRollout(
        SmallTalkEnv, {"exchanges": EXCHANGES}, local=collect_async, workers=workers, groups_per_task=PER_WORKER
    )
    groups = groups_for(user_of(backend, server_url))
    play = lambda: rollout(SmallTalkEnv, groups, group_size=1, split="train", key=(0,))  # noqa: E731
    try:
        play()  # warm-up: workers started, clients built
        compare(
            f"{backend}: two workers on two nodes vs one, episodes",
            side,
            timed(f"{backend} ray x{workers}", play),
            rounds=1,
        )
    finally:
        rollout.close()


@pytest.mark.parametrize("backend", ["http", "sleeping"])
@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_one_ray_worker_vs_in_process(compare, cluster, server_url, backend, side):  # noqa: F811
    if side == "ours":
        rollout = RayRollout(
            SmallTalkEnv, {"exchanges": EXCHANGES}, local=collect_async, workers=1, groups_per_task=PER_WORKER
        )
        groups = groups_for(user_of(backend, server_url))
        play = lambda: rollout(SmallTalkEnv, groups, group_size=1, split="train", key=(0,))  # noqa: E731
        close = rollout.close
    else:
        from sims import make_simulator

        user = (
            SleepingUser()
            if backend == "sleeping"
            else make_simulator("openai:user", **dict(user_of(backend, server_url).kwargs))
        )
        groups = groups_for(user)
        make_env = lambda: SmallTalkEnv(exchanges=EXCHANGES)  # noqa: E731

        def play() -> list[Any]:
            tasks = [groups[start : start + PER_WORKER] for start in range(0, len(groups), PER_WORKER)]
            return [e for task in tasks for e in collect_async(make_env, task, group_size=1, split="train")]

        close = getattr(user, "close", lambda: None)
    try:
        play()
        label = f"{backend} {'ray x1' if side == 'ours' else 'in-process'}"
        compare(f"{backend}: Ray with one worker vs in-process, episodes", side, timed(label, play), rounds=1)
    finally:
        close()
