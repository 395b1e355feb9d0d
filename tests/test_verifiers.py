"""verifiers' own evaluation (the `vf-eval` command, its runner and the env server prime-rl's
orchestrator sends rollouts to) plays SCOPE episodes through `baselines.integrations.verifiers_env`:
the model is a real OpenAI-compatible HTTP server on loopback, the user a SCOPE simulator spec, the
reward the env's. The served "model" is the env's own scripted agent, which replies from the
conversation it is sent, so every episode must equal the one SCOPE plays with that agent directly.
A tau2 task is solved the same way, by the env's gold-actions agent, whose tool calls go through
verifiers' rollout. The user seat is also trained a GRPO step: a tiny transformers model served
behind the token endpoint of verifiers' train client, on the tokens verifiers records
(`verifiers_training.py`).

Needs the `verifiers` extra, in its own venv (verifiers pins openai<3), torch first (the CPU wheel):
    pip install torch==2.13.0 && pip install -e ".[verifiers,tau2]" && pytest -m verifiers tests/test_verifiers.py
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
from scope_envs.core.dialogue import AGENT, USER, other_side  # noqa: E402
from scope_envs.core.specs import resolve_policy  # noqa: E402
from scope_envs.core.views import AgentView, UserView, build_env  # noqa: E402

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


@pytest.mark.parametrize("tools", ["direct", "mcp"])
def test_the_agent_calls_a_tau2_domains_tools_which_the_env_executes(tmp_path, tools):
    """A tool call of the model is the agent's action in the SCOPE episode: the env executes it
    and its result goes back to the model under the call's id; the episode scores as SCOPE's.
    `direct`: the harness has the episode execute the call; `mcp`: the harness calls the seat's
    tool server (`SeatToolset`), as any MCP-capable verifiers harness would."""
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
                "env": {
                    "taskset": {"id": "scope-verifiers", "env": "Tau2Retail", "episodes": 1},
                    "agent": {"harness": {"id": "scope-verifiers", "tools": tools}},
                },
                "model": "tool-caller",
                "client": {"base_url": f"{server.url}/v1", "api_key_var": "SCOPE_TEST_KEY"},
                "push": False,
                "rich": None,
                "output_dir": str(tmp_path),
            }
        )
        (episode,) = asyncio.run(run_eval(config))
    offered = {tool["function"]["name"]: tool["function"]["parameters"] for tool in server.requests[0]["body"]["tools"]}
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in agent_tools("Tau2Retail")}
    assert offered == schemas, "the env's tools under their own names and JSON schemas"
    answered = server.requests[1]["body"]["messages"][-1]
    assert answered["role"] == "tool" and answered["tool_call_id"] == "call_0" and "not found" in answered["content"]

    view = AgentView("Tau2Retail", "scripted")  # the same episode, played by SCOPE alone
    view.reset(seed=0, options={"split": "train", "task_id": episode.traces[0].task.data.task_id})
    view.step(Message.from_openai(server.requests[1]["body"]["messages"][-2]))
    _, reward, terminated, truncated, _ = view.step("I could not find your account. Is there anything else?")
    while not (terminated or truncated):
        _, reward, terminated, truncated, _ = view.step("I could not find your account. Is there anything else?")
    (trace,) = episode.traces
    assert episode.ok and trace.reward == reward
    assert trace.info["scope"]["end"] == view.dialogue.end.reason
    view.close()


@pytest.mark.parametrize("tools", ["direct", "mcp"])
def test_the_gold_agent_solves_a_tau2_task_with_tool_calls_through_verifiers_and_earns_a_reward(tmp_path, tools):
    """The served model is the env's gold-actions agent, which recognises the task from what the
    scripted user says and answers each request with the task's next gold tool call, then its
    summary: every call goes through verifiers' rollout (the model's reply, the env executing it,
    the result back under the call's id), and the task's database ends as tau2's gold one."""
    pytest.importorskip("tau2")
    view = AgentView("Tau2Retail")
    gold = resolve_policy("scripted", env=view.dialogue, side=AGENT)

    def respond(protocol, body):
        reply = gold.respond([Message.from_openai(m) for m in body["messages"]], body.get("tools") or [])
        return {"text": reply.text, "tool_calls": [(call.name, call.args) for call in reply.tool_calls]}

    env = {
        "taskset": {"env": "Tau2Retail", "episodes": 1},
        "agent": {"harness": {"id": "scope-verifiers", "tools": tools}},
    }
    with LLMServer(respond) as server:
        (episode,) = eval_episodes(server, tmp_path, env, model="gold-agent")
    (trace,) = episode.traces
    task = view.dialogue.domain.task(trace.task.data.task_id)
    gold_calls = [(action.name, action.arguments) for action in task.evaluation_criteria.actions]
    view.close()
    made = [(call.name, json.loads(call.arguments)) for m in trace.assistant_messages for call in m.tool_calls or []]
    assert len(gold_calls) > 1 and made == gold_calls, "the model's tool calls, as verifiers recorded them"
    assert len(trace.tool_messages) == len(gold_calls), "each answered by a tool message in the trace"
    assert all(m.content and not m.content.startswith("Error") for m in trace.tool_messages)
    sent = [m for request in server.requests for m in request["body"]["messages"][-1:] if m["role"] == "tool"]
    assert len(sent) == len(gold_calls), "each result went back to the model"
    assert episode.ok and trace.info["scope"]["end"] == "user_stop"
    assert trace.reward > 0 and trace.rewards["DB"].score == 1.0, "tau2's reward: the database is the gold one"


def agent_tools(env):
    view = AgentView(env)
    view.reset(seed=0)
    tools = view.dialogue.chat_infos[AGENT]["tools"]
    view.close()
    return tools


def eval_episodes(server, tmp_path, env, model="m", **eval_fields):
    """Episodes of `run_eval` (vf-eval's runner) with the plugin's `env` config against `server`."""
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    config = EvalConfig.model_validate(
        {
            "env": {**env, "taskset": {"id": "scope-verifiers", **env["taskset"]}},
            "model": model,
            "client": {"base_url": f"{server.url}/v1", "api_key_var": "SCOPE_TEST_KEY"},
            "push": False,
            "rich": None,
            "output_dir": str(tmp_path),
            **eval_fields,
        }
    )
    return asyncio.run(run_eval(config))


def direct_user_episodes(task_ids, user_reward):
    """(user reward, user's components, user turns) of each scenario played by SCOPE alone: the
    scripted user against the scripted agent, through the user's view."""
    view = UserView(ENV, "scripted", user_reward=user_reward)
    user = resolve_policy("scripted", env=view.dialogue, side=USER)
    results = []
    for seed, task_id in enumerate(task_ids):
        view.reset(seed=seed, options={"split": SPLIT, "task_id": task_id})
        done = False
        while not done:
            _, reward, terminated, truncated, _ = view.step(user.respond(view.dialogue.views[USER]).text)
            done = terminated or truncated
        components = view.dialogue.chat_infos[USER]["reward_info"]["components"]
        results.append((reward, components, sum(m.role == "assistant" for m in view.dialogue.views[USER])))
    view.close()
    return results


@pytest.fixture(scope="module")
def scripted_players():
    """The env's scripted agent and scripted user behind one chat-completions server, each
    answering the requests made under its own model name (`agent`, `user`)."""
    dialogue = AgentView(ENV).dialogue
    players = {side: resolve_policy("scripted", env=dialogue, side=side) for side in (AGENT, USER)}

    def respond(protocol, body):
        player = players[body["model"]]
        return {"text": player.respond([Message.from_openai(m) for m in body["messages"]]).text}

    with LLMServer(respond) as server:
        yield server


def test_the_model_plays_the_user_seat_against_a_scope_agent_scored_by_the_user_reward(scripted_players, tmp_path):
    env = {"seats": "user", "taskset": {"env": ENV, "split": SPLIT, "episodes": EPISODES, "agent_policy": "scripted"}}
    env["taskset"]["env_kwargs"] = {"user_reward": "adversarial"}
    episodes = eval_episodes(scripted_players, tmp_path, env, model=USER)
    expected = dict(zip(first_task_ids(EPISODES), direct_user_episodes(first_task_ids(EPISODES), "adversarial")))
    assert len(episodes) == EPISODES and all(e.ok for e in episodes)
    for episode in episodes:
        (trace,) = episode.traces
        reward, components, turns = expected[trace.task.data.task_id]
        assert trace.agent.name == USER and trace.agent.trainable
        assert trace.reward == reward, "the env's user reward is the trace's"
        assert {name: trace.rewards[name].score for name in components} == components, "the user's own outcome"
        assert trace.num_turns == turns and trace.info["scope"]["side"] == USER
    assert len({reward for reward, _, _ in expected.values()}) > 1


def direct_two_player_episodes(task_ids, user_reward):
    """(agent reward, user reward, agent turns, user turns) of each scenario played by SCOPE alone
    on the two-sided env, each side answered by its unseeded scripted player as the server does."""
    dialogue = build_env(ENV, user_reward=user_reward)
    players = {side: resolve_policy("scripted", env=dialogue, side=side) for side in (AGENT, USER)}
    results = []
    for seed, task_id in enumerate(task_ids):
        dialogue.reset(seed=seed, options={"split": SPLIT, "task_id": task_id})
        while dialogue.end is None:
            side = dialogue.to_speak
            reply = players[side].respond(dialogue.views[side]).text
            dialogue.step({side: reply, other_side(side): ""})
        rewards = [dialogue.chat_infos[side]["reward_info"]["reward"] for side in (AGENT, USER)]
        turns = [sum(m.role == "assistant" for m in dialogue.views[side]) for side in (AGENT, USER)]
        results.append((*rewards, *turns))
    dialogue.close()
    return results


@pytest.mark.parametrize("user_reward", ["adversarial", "cooperative"])
def test_both_seats_are_two_verifiers_agents_each_trace_scored_by_its_side(scripted_players, tmp_path, user_reward):
    taskset = {"env": ENV, "split": SPLIT, "episodes": EPISODES, "env_kwargs": {"user_reward": user_reward}}
    env = {"seats": "both", "taskset": taskset, "agent": {"model": AGENT}, "user": {"model": USER}}
    episodes = eval_episodes(scripted_players, tmp_path, env)
    ids = first_task_ids(EPISODES)
    expected = dict(zip(ids, direct_two_player_episodes(ids, user_reward)))
    assert len(episodes) == EPISODES and all(e.ok for e in episodes)
    for episode in episodes:
        traces = {trace.agent.name: trace for trace in episode.traces}
        assert set(traces) == {AGENT, USER} and all(t.agent.trainable for t in traces.values())
        agent_reward, user_reward_value, agent_turns, user_turns = expected[episode.task.data.task_id]
        assert user_reward_value == (1.0 - agent_reward if user_reward == "adversarial" else agent_reward)
        assert traces[AGENT].reward == agent_reward and traces[AGENT].num_turns == agent_turns
        assert traces[USER].reward == user_reward_value and traces[USER].num_turns == user_turns
        assert traces[USER].rewards["success"].score == (
            1.0 - traces[AGENT].rewards["success"].score
            if user_reward == "adversarial"
            else traces[AGENT].rewards["success"].score
        ), "the user's own success"
    assert len({rewards[0] for rewards in expected.values()}) > 1


def test_reward_components_are_rewards_whose_weights_are_configurable(scripted_model, tmp_path):
    env = {
        "taskset": {"env": ENV, "split": SPLIT, "episodes": EPISODES, "task": {"rewards": {"success": {"weight": 0.5}}}}
    }
    episodes = eval_episodes(scripted_model, tmp_path, env, model="scripted-agent")
    expected = dict(zip(first_task_ids(EPISODES), direct_episodes(first_task_ids(EPISODES))))
    successes = set()
    for episode in episodes:
        (trace,) = episode.traces
        reward, _ = expected[trace.task.data.task_id]
        rewards = trace.rewards
        assert set(rewards) == {"scope_reward", "donation", "success"}
        assert (rewards["scope_reward"].weight, rewards["donation"].weight, rewards["success"].weight) == (1, 0, 0.5)
        assert rewards["scope_reward"].score == reward
        assert trace.reward == pytest.approx(reward + 0.5 * rewards["success"].score)
        successes.add(rewards["success"].score)
    assert successes == {0.0, 1.0}, "the weight was seen applied to both outcomes"


def test_the_taskset_system_prompt_override_reaches_the_model_and_weights_come_from_the_command_line(tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You are an optimised persuader. Be brief.")
    with LLMServer(lambda protocol, body: {"text": "Would you donate $1 to Save the Children?"}) as server:
        vf_eval = Path(sys.executable).with_name("vf-eval")
        command = [
            str(vf_eval), "scope-verifiers", "--env.taskset.env", ENV, "--env.taskset.split", SPLIT,
            "--env.taskset.episodes", "1", "--env.taskset.system-prompt", str(prompt), "-m", "m",
            "--env.taskset.task.rewards.success.weight", "0.5",
            "--client.base-url", f"{server.url}/v1", "--client.api-key-var", "SCOPE_TEST_KEY",
            "--no-push", "--no-rich", "-o", str(tmp_path),
        ]  # fmt: skip
        run = subprocess.run(command, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        assert server.requests
        for request in server.requests:
            (system,) = [m for m in request["body"]["messages"] if m["role"] == "system"]
            assert system["content"] == prompt.read_text()
    (traces,) = tmp_path.glob("*/traces.jsonl")
    (episode,) = [json.loads(line) for line in traces.read_text().splitlines()]
    assert episode["traces"][0]["rewards"]["success"]["weight"] == 0.5, "a reward's weight from the command line"


def test_the_seat_tool_server_answers_only_its_own_loopback_host():
    """Threat model (docs/security.md): a page in a local browser must not reach the tool server
    by DNS rebinding, so another Host header or a browser Origin is refused before any tool runs."""
    import httpx

    from baselines.integrations.verifiers_tools import SeatToolset

    acted = []
    toolset = SeatToolset([], lambda message: acted.append(message) or [])
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

    async def probe():
        async with toolset.serve() as server, httpx.AsyncClient() as client:
            own = await client.post(server.url, json=body, headers=headers)
            rebound = await client.post(server.url, json=body, headers={**headers, "Host": "attacker.example"})
            browser = await client.post(server.url, json=body, headers={**headers, "Origin": "http://attacker.example"})
            return own.status_code, rebound.status_code, browser.status_code

    own, rebound, browser = asyncio.run(probe())
    assert own == 200 and rebound >= 400 and browser >= 400 and not acted


# The user seat's two replies: a refusal (the adversarial user reward: 1) and a $1 donation,
# which ends the episode at once (1 - $1 of the $2 maximum: 0.5).
REFUSE, DONATE = "No, thank you.", "Yes, I will give. [DONATE $1]"
USER_GROUP = 8


def test_the_user_seat_trains_a_grpo_step_on_a_group_verifiers_rolled_out_and_scored(tmp_path):
    """A tiny transformers model (built from a config) plays the persuadee through verifiers' train
    client, sampled at temperature 1 behind a real loopback `/inference/v1/generate`; verifiers
    records each turn's token ids, which of them were sampled and their log-probs, and scores each
    rollout with the env's user reward. One GRPO step on exactly those tokens (the project's
    advantages and loss, verifiers' log-probs as the old ones) updates the served model. It is first
    tuned to answer the opening with either reply and a second turn with the refusal, so that the
    group's rewards differ and its first reply decides them."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from renderers import create_renderer
    from renderers.base import load_tokenizer
    from renderers.configs import DefaultRendererConfig
    from verifiers_training import GenerateServer, grpo_step, one_thread, reply_logprob

    from sims.testing import fine_tune_on_completions, tiny_chat_model

    model, tokenizer = tiny_chat_model()
    tokenizer_dir = tmp_path / "tokenizer"
    tokenizer.save_pretrained(tokenizer_dir)
    renderer = create_renderer(load_tokenizer(str(tokenizer_dir)), DefaultRendererConfig())
    env_kwargs = {"exchanges": 2, "user_reward": "adversarial"}
    view = UserView(ENV, "scripted", **env_kwargs)
    view.reset(seed=0, options={"split": SPLIT, "task_id": first_task_ids(1)[0]})
    opening = renderer.render([m.to_openai() for m in view.dialogue.views[USER]], add_generation_prompt=True).token_ids
    view.step(REFUSE)
    second = renderer.render([m.to_openai() for m in view.dialogue.views[USER]], add_generation_prompt=True).token_ids
    view.close()

    def reply(text):
        return tokenizer(text + tokenizer.eos_token, add_special_tokens=False).input_ids

    env = {"seats": "user", "taskset": {"env": ENV, "split": SPLIT, "episodes": 1, "env_kwargs": env_kwargs}}
    with one_thread(), GenerateServer(model, "tiny-user", seed=0) as server:
        fine_tune_on_completions(
            model, [(opening, reply(REFUSE)), (opening, reply(DONATE)), (second, reply(REFUSE))], steps=240
        )
        client = {
            "type": "train",  # verifiers' train client: it renders the tokens and records them
            "base_url": f"{server.url}/v1",
            "api_key_var": "SCOPE_TEST_KEY",
            "renderer_model_name": str(tokenizer_dir),
            "renderer": {"name": "default"},
        }
        sampling = {"temperature": 1.0, "max_tokens": 32}
        episodes = eval_episodes(
            server,
            tmp_path,
            env,
            "tiny-user",
            client=client,
            sampling=sampling,
            num_rollouts=USER_GROUP,
            max_concurrent=1,
        )
        assert len(episodes) == USER_GROUP and all(e.ok for e in episodes)
        assert server.requests[0]["prompt_ids"] == opening, "verifiers rendered the opening the model was tuned on"
        traces = [episode.traces[0] for episode in episodes]
        for trace in traces:
            assert trace.agent.name == USER and trace.agent.trainable
            donation = trace.rewards["donation"].score
            assert trace.reward == trace.rewards["scope_reward"].score == 1.0 - donation / 2.0, "the user's reward"
            sampled = [t for branch in trace.branches for t, s in zip(branch.token_ids, branch.sampled_mask) if s]
            replies = "".join(m.content or "" for m in trace.assistant_messages)
            assert tokenizer.decode(sampled).replace(tokenizer.eos_token, "") == replies, "the mask is the replies"
        assert len({trace.reward for trace in traces}) > 1, "a group whose rewards differ: its advantages are not 0"

        best, worst = max(traces, key=lambda t: t.reward), min(traces, key=lambda t: t.reward)
        (best_prompt, best_reply), (worst_prompt, worst_reply) = first_reply(best), first_reply(worst)
        assert best_prompt == worst_prompt == opening

        def margin():
            return reply_logprob(model, best_prompt, best_reply) - reply_logprob(model, worst_prompt, worst_reply)

        before = margin()
        advantages, stats = grpo_step(model, torch.optim.Adam(model.parameters(), lr=1e-3), traces)
        assert advantages[traces.index(best)] > 0 > advantages[traces.index(worst)]
        assert stats["recorded_gap"] < 1e-4, "verifiers' log-probs are the model's own on the tokens marked sampled"
        assert margin() > before, "the step made the higher-reward first reply likelier than the lower-reward one"


def first_reply(trace):
    """The prompt token ids of a trace's first turn and the token ids the model sampled for it."""
    branch = trace.branches[0]
    start = branch.sampled_mask.index(True)
    end = start
    while end < len(branch.sampled_mask) and branch.sampled_mask[end]:
        end += 1
    return branch.token_ids[:start], branch.token_ids[start:end]
