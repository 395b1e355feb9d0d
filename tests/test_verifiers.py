"""verifiers' own evaluation (the `vf-eval` command, its runner and the env server prime-rl's
orchestrator sends rollouts to) plays SCOPE episodes through `baselines.integrations.verifiers_env`:
the model is a real OpenAI-compatible HTTP server on loopback, the user a SCOPE simulator spec, the
reward the env's. The served "model" is the env's own scripted agent, which replies from the
conversation it is sent, so every episode must equal the one SCOPE plays with that agent directly.

Needs the `verifiers` extra, in its own venv (verifiers pins openai<3):
    pip install -e ".[verifiers]" && pytest -m verifiers tests/test_verifiers.py
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers.v1")

from llm_server import LLMServer  # noqa: E402

from scope_envs.core.chat import Message  # noqa: E402
from scope_envs.core.dialogue import AGENT  # noqa: E402
from scope_envs.core.specs import resolve_policy  # noqa: E402
from scope_envs.core.views import AgentView  # noqa: E402

pytestmark = pytest.mark.verifiers

ROOT = Path(__file__).resolve().parents[1]
ENV, SPLIT, EPISODES = "P4G", "test", 6  # the first six test scenarios: donations of 0, 0.20 and 0.60


@pytest.fixture(scope="module", autouse=True)
def _p4g_corpus(p4g_dir):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SCOPE_P4G_DATA", str(p4g_dir))
        yield


@pytest.fixture(scope="module")
def scripted_model():
    """The env's scripted agent behind a real chat-completions server: it answers each request
    from the messages it is sent (unseeded, so from the conversation alone)."""
    agent = resolve_policy("scripted", env=AgentView(ENV).dialogue, side=AGENT)

    def respond(protocol, body):
        return {"text": agent.respond([Message.from_openai(m) for m in body["messages"]]).text}

    with LLMServer(respond) as server:
        yield server


def direct_episodes(task_ids):
    """(reward, agent turns) of each scenario played by SCOPE alone with the same scripted agent."""
    view = AgentView(ENV, "scripted")
    agent = resolve_policy("scripted", env=view.dialogue, side=AGENT)
    results = []
    for seed, task_id in enumerate(task_ids):
        view.reset(seed=seed, options={"split": SPLIT, "task_id": task_id})
        done = False
        while not done:
            _, reward, terminated, truncated, _ = view.step(agent.respond(view.dialogue.views[AGENT]).text)
            done = terminated or truncated
        results.append((reward, sum(m.role == "assistant" for m in view.dialogue.views[AGENT])))
    view.close()
    return results


def first_task_ids(n):
    view = AgentView(ENV)
    ids = view.dialogue.task_ids(SPLIT)[:n]
    view.close()
    return ids


def cli_env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_vf_eval_plays_scope_episodes_scored_by_the_env(scripted_model, tmp_path):
    vf_eval = Path(sys.executable).with_name("vf-eval")
    command = [
        str(vf_eval), "scope-verifiers", "--env.taskset.env", ENV, "--env.taskset.split", SPLIT,
        "--env.taskset.episodes", str(EPISODES), "-r", "2", "-m", "scripted-agent",
        "--client.base-url", f"{scripted_model.url}/v1", "--client.api-key-var", "SCOPE_TEST_KEY",
        "--no-push", "--no-rich", "-o", str(tmp_path),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    (traces,) = tmp_path.glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(episodes) == 2 * EPISODES and all(e["ok"] for e in episodes)
    expected = dict(zip(first_task_ids(EPISODES), direct_episodes(first_task_ids(EPISODES))))
    for episode in episodes:
        (trace,) = episode["traces"]
        reward, turns = expected[trace["task"]["data"]["task_id"]]
        assert trace["rewards"]["scope_reward"]["score"] == reward, "the env's reward is the trace's"
        assert len(trace["calls"]) == turns, "every agent turn went through the model server"
        assert trace["info"]["scope"]["terminated"] or trace["info"]["scope"]["end"] == "max_turns"
    rewards = {r for r, _ in expected.values()}
    assert len(rewards) > 1, "the scenarios differ in outcome, so equality above is informative"


def test_vf_eval_without_an_env_says_which_option_names_one(tmp_path):
    vf_eval = Path(sys.executable).with_name("vf-eval")
    command = [str(vf_eval), "scope-verifiers", "-n", "1", "-m", "m", "--no-push", "--no-rich"]
    run = subprocess.run(command, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "--env.taskset.env" in run.stderr + run.stdout


def test_the_example_evaluates_against_an_openai_compatible_server(scripted_model, tmp_path):
    command = [
        sys.executable, str(ROOT / "examples" / "verifiers_eval.py"), "--env", ENV, "--split", SPLIT,
        "--episodes", str(EPISODES), "--base-url", f"{scripted_model.url}/v1", "--model", "scripted-agent",
        "--output-dir", str(tmp_path),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    print(run.stdout)  # the numbers docs/rl-libraries.md quotes (`-s` shows them)
    expected = [reward for reward, _ in direct_episodes(first_task_ids(EPISODES))]
    assert f"{EPISODES} episodes (0 failed), mean env reward {sum(expected) / EPISODES:.3f}" in run.stdout


def _serve(config_data, queue):
    from verifiers.v1.serve import EnvServer
    from verifiers.v1.utils.loaders import resolve_env_config

    EnvServer.run_server(address_queue=queue, config=resolve_env_config(config_data), address="tcp://127.0.0.1:0")


def test_an_env_server_returns_scored_episodes_as_prime_rl_requests_them(scripted_model):
    """prime-rl's orchestrator sends each rollout to a verifiers env server (`EnvClient.run`)."""
    from verifiers.v1.serve import EnvClient, env_config_data
    from verifiers.v1.utils.loaders import resolve_env_config

    taskset = {"id": "scope-verifiers", "env": ENV, "split": SPLIT, "episodes": EPISODES}
    config = resolve_env_config({"taskset": taskset})
    tasks = list(vf.load_taskset(config.taskset))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    server = context.Process(target=_serve, args=(env_config_data(config), queue), daemon=True)
    server.start()

    async def rollouts():
        client = EnvClient(queue.get(timeout=300))
        try:
            await client.wait_for_server_startup()
            return await asyncio.gather(
                *(
                    client.run(
                        vf.EvalClientConfig(base_url=f"{scripted_model.url}/v1", api_key_var="SCOPE_TEST_KEY"),
                        "scripted-agent",
                        vf.SamplingConfig(),
                        task.data.model_dump(mode="json"),
                    )
                    for task in tasks
                )
            )
        finally:
            await client.close()

    try:
        episodes = asyncio.run(rollouts())
    finally:
        server.terminate()
        server.join(30)
    expected = direct_episodes([task.data.task_id for task in tasks])
    for episode, (reward, turns) in zip(episodes, expected):
        (trace,) = episode.traces
        assert episode.ok and trace.reward == reward and trace.num_turns == turns


def test_the_agent_calls_a_tau2_domains_tools_which_the_env_executes(tmp_path):
    """A tool call of the model is the agent's action in the SCOPE episode: the env executes it
    and its result goes back to the model under the call's id; the episode scores as SCOPE's."""
    pytest.importorskip("tau2")
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    lookup = ("find_user_id_by_name_zip", {"first_name": "No", "last_name": "Body", "zip": "00000"})

    def respond(protocol, body):
        if not any(message["role"] == "tool" for message in body["messages"]):
            return {"text": "", "tool_calls": [lookup]}  # once, on its first turn
        return {"text": "I could not find your account. Is there anything else?"}

    with LLMServer(respond) as server:
        config = EvalConfig.model_validate(
            {
                "env": {"taskset": {"id": "scope-verifiers", "env": "Tau2Retail", "episodes": 1}},
                "model": "tool-caller",
                "client": {"base_url": f"{server.url}/v1", "api_key_var": "SCOPE_TEST_KEY"},
                "push": False,
                "rich": None,
                "output_dir": str(tmp_path),
            }
        )
        (episode,) = asyncio.run(run_eval(config))
    offered = {tool["function"]["name"] for tool in server.requests[0]["body"]["tools"]}
    assert lookup[0] in offered
    answered = server.requests[1]["body"]["messages"][-1]
    assert answered["role"] == "tool" and answered["tool_call_id"] == "call_0" and "not found" in answered["content"]

    view = AgentView("Tau2Retail", "scripted")  # the same episode, played by SCOPE alone
    view.reset(seed=0, options={"split": "train", "task_id": episode.traces[0].task.data.task_id})
    call = Message.from_openai(server.requests[1]["body"]["messages"][-2])
    view.step(call)
    _, reward, terminated, truncated, _ = view.step("I could not find your account. Is there anything else?")
    while not (terminated or truncated):
        _, reward, terminated, truncated, _ = view.step("I could not find your account. Is there anything else?")
    (trace,) = episode.traces
    assert episode.ok and trace.reward == reward
    assert trace.info["scope"]["end"] == view.dialogue.end.reason
    view.close()
