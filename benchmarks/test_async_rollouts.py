"""Per-episode asynchronous rollouts (ours) against lockstep and sequential ones (the anchors), and
dynamic batching of a local model (ours) against one request at a time (the anchor).

    pytest benchmarks/test_async_rollouts.py --benchmark-only -s

Rollouts: 64 episodes, 64 requests in flight, the user played by a simulator whose replies take
50-250 ms (uniform, drawn from each request's seed, so every rollout meets the same latencies),
the agent by an instant function; 20 user turns per episode. Two backends:

* `http`: `openai:user` (its default, lean client) against a loopback OpenAI-compatible server (`tests/llm_server.py`,
  in a process of its own, so that `time.process_time` counts the client alone);
* `in-process`: a simulator whose `arespond` only sleeps: the rollout's own overhead, without
  an HTTP client.

Printed per rollout: episodes/s, its share of the ideal (in-flight limit / mean episode latency,
that is 64 / (20 x 150 ms)), and the client CPU per request. Sequential rollouts play 4 episodes
(their time per episode is what is compared). Dynamic batching: 16 episodes of a small talk whose
user is the tiny transformers model, through `sims.batching.DynamicBatching` with batches of up to
16 vs 1.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scope_envs.core.async_rollout import collect_async
from scope_envs.core.policy import Reply, Simulator
from scope_envs.core.rollout import RolloutGroup, collect_chat
from scope_envs.core.scripted import FunctionSimulator
from sims.testing import SmallTalkEnv

EPISODES = 64
IN_FLIGHT = 64
EXCHANGES = 20  # user turns per episode
LATENCY = (0.05, 0.25)
SEQUENTIAL_EPISODES = 4
TESTS = Path(__file__).resolve().parents[1] / "tests"

SERVER = f"""
import random, sys, time
from http.server import BaseHTTPRequestHandler
sys.path.insert(0, {str(TESTS)!r})
from llm_server import LLMServer

BaseHTTPRequestHandler.protocol_version = "HTTP/1.1"  # keep-alive, as API servers do
BaseHTTPRequestHandler.disable_nagle_algorithm = True  # as API servers do: no 40 ms delayed-ACK stalls

def reply(protocol, body):
    time.sleep(random.Random(body.get("seed")).uniform(*{LATENCY!r}))
    return {{"text": "Sure, tell me more."}}

with LLMServer(reply) as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""


def latency(seed: int | None) -> float:
    return random.Random(seed).uniform(*LATENCY)


class SleepingUser(Simulator):
    """Replies after the latency the loopback server would take, without any HTTP."""

    deterministic = True

    def __init__(self) -> None:
        self.calls = 0

    async def arespond(self, messages: Any, tools: Any = None, *, seed: int | None = None) -> Reply:
        self.calls += 1
        await asyncio.sleep(latency(seed))
        return Reply(text="Sure, tell me more.")


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    process = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield process.stdout.readline().strip()
    finally:
        process.stdin.close()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def users(server_url: str) -> Iterator[dict[str, Any]]:
    pytest.importorskip("openai")
    from sims import make_simulator

    http = make_simulator("openai:user", base_url=server_url + "/v1", api_key="sk-local", concurrency=IN_FLIGHT)
    yield {"http": http, "in-process": SleepingUser()}
    http.close()


AGENT = FunctionSimulator(lambda messages, tools, rng: "Hello! What can I do for you?")
REPORT: list[str] = []


def play(collect: Callable[..., Any], user: Any, episodes: int, label: str) -> Callable[[], int]:
    groups = [RolloutGroup(seed, {"agent": AGENT, "user": user}) for seed in range(episodes)]
    ideal = IN_FLIGHT / (EXCHANGES * sum(LATENCY) / 2)

    def run() -> int:
        calls, cpu, started = user.calls, time.process_time(), time.perf_counter()
        if collect is sequential:
            for group in groups:
                collect_chat(lambda: SmallTalkEnv(exchanges=EXCHANGES), [group], group_size=1, split="train")
        else:
            collect(lambda: SmallTalkEnv(exchanges=EXCHANGES), groups, group_size=1, split="train")
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        requests = user.calls - calls
        REPORT.append(
            f"{label}: {episodes / wall:.2f} episodes/s = {episodes / wall / ideal:.0%} of the ideal "
            f"{ideal:.1f}; client CPU {1000 * cpu / requests:.2f} ms per request ({requests} requests)"
        )
        print("\n" + REPORT[-1])
        return episodes

    return run


def sequential() -> None:
    """A marker: one episode after the other (each a lockstep rollout of one)."""


@pytest.mark.parametrize("backend", ["in-process", "http"])
@pytest.mark.parametrize(
    ("anchor", "side"), [("lockstep", "ours"), ("lockstep", "anchor"), ("sequential", "ours"), ("sequential", "anchor")]
)
def test_async_rollouts(compare, users, backend, anchor, side):
    user = users[backend]
    if side == "ours":
        run = play(collect_async, user, EPISODES, f"{backend} async ({EPISODES} episodes)")
    elif anchor == "lockstep":
        run = play(collect_chat, user, EPISODES, f"{backend} lockstep ({EPISODES} episodes)")
    else:
        run = play(sequential, user, SEQUENTIAL_EPISODES, f"{backend} sequential ({SEQUENTIAL_EPISODES} episodes)")
    compare(f"{backend}: async vs {anchor}, episodes", side, run, rounds=1)


@pytest.fixture(scope="module")
def tiny_user() -> Any:
    pytest.importorskip("torch")
    from sims.hf_backend import HFSimulator
    from sims.testing import tiny_chat_model

    model, tokenizer = tiny_chat_model(0)
    return HFSimulator(model, tokenizer=tokenizer, name="tiny", max_new_tokens=16, device="cpu")


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_dynamic_batching(compare, tiny_user, side):
    from sims.batching import DynamicBatching

    user = DynamicBatching(tiny_user, max_batch=16 if side == "ours" else 1)
    groups = [RolloutGroup(seed, {"agent": AGENT, "user": user}) for seed in range(16)]

    def run() -> int:
        calls, started = user.batch_calls, time.perf_counter()
        collect_async(lambda: SmallTalkEnv(exchanges=4), groups, group_size=1, split="train")
        wall = time.perf_counter() - started
        REPORT.append(
            f"tiny model, 16 concurrent episodes, batches of up to {user.max_batch}: {16 / wall:.2f} episodes/s, "
            f"{user.batch_calls - calls} generate calls"
        )
        print("\n" + REPORT[-1])
        return 16

    compare("tiny local model: dynamic batching (16) vs one at a time, episodes", side, run, rounds=1)
