"""`run_episodes`, the public way to play many episodes, against an API in another process: per
episode (ours, its default with an API player) against lockstep and sequential play (the anchors),
and the lean HTTP client against the official SDK's.

    pytest benchmarks/test_run_episodes.py --benchmark-only -s

256 P4G episodes (synthetic personas, 5 agent turns each), the agent played by `openai:agent`
against the loopback latency server of `benchmarks/test_async_rollouts.py` (a process of its own,
replies of 50-250 ms drawn from each request's seed, so every run meets the same latencies), the
user by the env's scripted persuadee; 64 requests in flight (the simulator's `concurrency`).

Printed per run: episodes/s and its share of the in-flight ideal, `64 x episodes / (sum of every
request's latency)`, the throughput of 64 requests always in flight and never waiting on the
client (the sum is taken from the seeds of the very requests the run makes); the process's CPU
per request (`time.process_time`: the rollout, the envs, the scripted user and the client), and
the client's share of it: that CPU less the CPU per request of the same episodes, played the same
way, against an in-process agent that only sleeps (no HTTP). Sequential play runs 4 episodes, one
`run_episodes` call each (its time per episode is what is compared).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_async_rollouts import latency, server_url  # noqa: F401 (a fixture)

from scope_envs.core.episodes import run_episodes
from scope_envs.core.policy import Reply, Simulator
from scope_envs.p4g import P4GEnv

EPISODES = 256
IN_FLIGHT = 64
SEQUENTIAL_EPISODES = 4
SEED = 0
REPLY = "Sure, tell me more."  # what the loopback server says, so that both agents play the same episodes


class SleepingAgent(Simulator):
    """Replies after the latency the loopback server would take, without any HTTP; with
    `sleep=False`, at once, only adding up those latencies (for the ideal)."""

    deterministic = True
    concurrency = IN_FLIGHT

    def __init__(self, *, sleep: bool = True) -> None:
        self.sleep = sleep
        self.calls = 0
        self.latency = 0.0

    async def arespond(self, messages: Any, tools: Any = None, *, seed: int | None = None) -> Reply:
        self.calls += 1
        self.latency += latency(seed)
        if self.sleep:
            await asyncio.sleep(latency(seed))
        return Reply(text=REPLY)


def envs(count: int) -> list[P4GEnv]:
    return [P4GEnv(persona_source="synthetic") for _ in range(count)]


@pytest.fixture(scope="module")
def ideal() -> dict[str, float]:
    """Episodes/s with 64 requests always in flight, for the episodes of each size of run."""
    rates = {}
    for count in (EPISODES, SEQUENTIAL_EPISODES):
        counter = SleepingAgent(sleep=False)
        run_episodes(envs(count), {"agent": counter, "user": "scripted"}, seeds=SEED)
        rates[count] = IN_FLIGHT * count / counter.latency
    return rates


@pytest.fixture(scope="module")
def agents(server_url: str) -> Iterator[dict[str, Any]]:  # noqa: F811
    pytest.importorskip("openai")
    from sims import make_simulator

    def client(kind: str) -> Any:
        return make_simulator(
            "openai:agent", base_url=server_url + "/v1", api_key="sk-local", concurrency=IN_FLIGHT, client=kind
        )

    made = {"http": client("http"), "sdk": client("sdk")}
    yield made
    made["http"].close()
    made["sdk"].close()


@pytest.fixture(scope="module")
def bare_cpu() -> dict[str, float]:
    """CPU per request of the same episodes against the in-process agent (no HTTP), per form of play:
    what the rollout, the envs and the scripted user cost without a client."""
    measured = {}
    for rollout, count in (("auto", EPISODES), ("lockstep", EPISODES), ("sequential", SEQUENTIAL_EPISODES)):
        agent = SleepingAgent()
        run_all(agent, count, rollout)  # warm-up
        calls, cpu = agent.calls, time.process_time()
        run_all(agent, count, rollout)
        measured[rollout] = (time.process_time() - cpu) / (agent.calls - calls)
    return measured


def run_all(agent: Any, count: int, rollout: str) -> None:
    played = envs(count)
    if rollout == "sequential":
        for env, seed in zip(played, range(SEED, SEED + count), strict=True):
            run_episodes([env], {"agent": agent, "user": "scripted"}, seeds=seed)
    else:
        run_episodes(played, {"agent": agent, "user": "scripted"}, seeds=SEED, rollout=rollout)


REPORT: list[str] = []


def play(agent: Any, count: int, rollout: str, ideal: float, bare: float, label: str) -> Callable[[], int]:
    def run() -> int:
        calls, cpu, started = agent.calls, time.process_time(), time.perf_counter()
        run_all(agent, count, rollout)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        requests = agent.calls - calls
        line = (
            f"{label}: {count / wall:.2f} episodes/s = {count / wall / ideal:.0%} of the in-flight ideal {ideal:.1f}; "
            f"CPU {1000 * cpu / requests:.2f} ms per request, of which the client "
            f"{1000 * (cpu / requests - bare):.2f} ms ({requests} requests)"
        )
        REPORT.append(line)
        print("\n" + line)
        return count

    return run


@pytest.mark.parametrize(
    ("anchor", "side"), [("lockstep", "ours"), ("lockstep", "anchor"), ("sequential", "ours"), ("sequential", "anchor")]
)
def test_run_episodes(compare, agents, ideal, bare_cpu, anchor, side):
    rollout, count = ("auto", EPISODES) if side == "ours" else (anchor, EPISODES)
    if side == "anchor" and anchor == "sequential":
        count = SEQUENTIAL_EPISODES
    label = f"run_episodes, {'default' if rollout == 'auto' else rollout} ({count} episodes)"
    run = play(agents["http"], count, rollout, ideal[count], bare_cpu[rollout], label)
    compare(f"run_episodes over HTTP: per episode vs {anchor}, episodes", side, run, rounds=2)


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_lean_client_vs_sdk(compare, agents, ideal, bare_cpu, side):
    client = "http" if side == "ours" else "sdk"
    label = f"run_episodes, default, client={client!r} ({EPISODES} episodes)"
    run = play(agents[client], EPISODES, "auto", ideal[EPISODES], bare_cpu["auto"], label)
    compare("run_episodes over HTTP: lean client vs the SDK's, episodes", side, run, rounds=2)
