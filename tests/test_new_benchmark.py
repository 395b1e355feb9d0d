"""A new benchmark, written whole in this one module: no file of the library is edited to add it.

`Bookshop`: the agent (a shop assistant) has a price list behind a tool and can hand the customer
over to a colleague with another tool; the customer (the user) wants the price of one book and
ends the conversation with `[[THANKS]]`. The module defines the env, both scripted players, the
benchmark's dialogue rule (what Verbalized Sampling must keep in every candidate) and the
registration; the tests then use it the way every shipped benchmark is used: `gymnasium.make`,
the conformance checker, `scope play`, `scope train`, `scope diagnose`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from scope_envs import (
    AGENT,
    USER,
    DialogueEnv,
    EpisodeEnd,
    Message,
    Reward,
    Scenario,
    ScriptedSimulator,
    ToolCall,
    ToolError,
    ToolResult,
    register_dialogue_env,
)
from scope_envs.core.chat import function_tool
from scope_envs.core.rules import ReplyRule
from scope_envs.testing import check_env

THANKS = "[[THANKS]]"
PRICES = {"dune": 9.5, "emma": 4.0, "ulysses": 12.25, "beloved": 7.75}
TASKS = {f"price-{title}": {"title": title, "split": "test" if title == "beloved" else "train"} for title in PRICES}
TOOLS = [
    function_tool(
        "lookup_price",
        "The price of a book, by title.",
        {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
    ),
    function_tool("hand_over", "Hand the customer over to a colleague; ends the conversation."),
]
REPLY_RULES = (ReplyRule(applies_when=THANKS, rule=f"A reply that ends the conversation must contain {THANKS}."),)


class BookshopEnv(DialogueEnv):
    metadata = {**DialogueEnv.metadata, "name": "bookshop_v0"}
    scripted_policies = {"user": "test_new_benchmark:Customer", "agent": "test_new_benchmark:Clerk"}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_turns", 8)
        super().__init__(**kwargs)

    def load_scenario(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        task_id = options.get("task_id")
        if task_id is None:
            split = options.get("split", "train")
            task_id = str(rng.choice(sorted(t for t, task in TASKS.items() if task["split"] == split)))
        if task_id not in TASKS:
            raise ValueError(f"unknown Bookshop task_id {task_id!r}; known: {', '.join(TASKS)}")
        title = TASKS[task_id]["title"]
        self.quoted: set[str] = set()
        return Scenario(
            task_id,
            {
                AGENT: "You are a bookshop assistant. Look prices up with your tool.",
                USER: f"You want to know the price of '{title}'. Say {THANKS} once you know it.",
            },
            tools={AGENT: TOOLS},
            data={"title": title},
            metadata={"split": TASKS[task_id]["split"]},
        )

    def call_tool(self, side: str, call: ToolCall) -> str | ToolResult:
        if call.name == "hand_over":
            return ToolResult("Handed over to a colleague.", end_reason="handed_over")
        title = str(call.args["title"]).lower()
        if title not in PRICES:
            raise ToolError(f"no book titled {call.args['title']!r}")
        self.quoted.add(title)
        return json.dumps({"title": title, "price": PRICES[title]})

    def end_reason(self, side: str, message: Message) -> str | None:
        return "thanked" if side == USER and THANKS in message.text else None

    def compute_rewards(self, end: EpisodeEnd) -> dict[str, Reward]:
        looked_up = float(self.scenario.data["title"] in self.quoted)
        thanked = float(end.reason == "thanked")
        value = looked_up * thanked
        return {side: Reward(value, {"looked_up": looked_up, "thanked": thanked}) for side in (AGENT, USER)}


class Customer(ScriptedSimulator):
    name = "bookshop-customer"

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        title = re.search(r"price of '([^']+)'", self.system_prompt(messages))[1]
        heard = self.heard(messages)
        if heard and re.search(r"\d+\.\d\d", heard[-1]):
            return f"{rng.choice(['Thanks!', 'Great.'])} {THANKS}"
        return f"How much is {title}?"


class Clerk(ScriptedSimulator):
    name = "bookshop-clerk"

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str | Message:
        quotes = [json.loads(m.text) for m in messages if m.role == "tool" and not m.text.startswith("Error")]
        if quotes:
            return f"{quotes[-1]['title'].title()} costs ${quotes[-1]['price']:.2f}."
        asked = re.search(r"How much is (.+)\?", " ".join(self.heard(messages)))
        if asked is None:
            return "Hello! Which book are you looking for?"
        return Message("assistant", None, tool_calls=(ToolCall.create("lookup_price", {"title": asked[1]}),))


register_dialogue_env(
    "Bookshop",
    "test_new_benchmark:BookshopEnv",
    "a bookshop: the agent looks up a price for the customer",
    reply_rules="test_new_benchmark:REPLY_RULES",
)


def test_gymnasium_make_plays_both_views():
    env = gym.make("scope_envs:scope/Bookshop-v0", simulator="scripted")
    _, info = env.reset(seed=0)
    title = re.search(r"How much is (.+)\?", info["messages"][-1]["content"])
    assert title is None  # the agent speaks first
    _, _, terminated, _, info = env.step("Hello! Which book?")
    assert not terminated
    asked = re.search(r"How much is (.+)\?", info["messages"][-1]["content"])[1]
    env.step(json.dumps({"name": "lookup_price", "arguments": {"title": asked}}))
    _, reward, terminated, truncated, info = env.step(f"It costs ${PRICES[asked.lower()]:.2f}.")
    assert terminated and not truncated and reward == 1.0 and info["end_reason"] == "thanked"

    user_view = gym.make("scope/Bookshop-User-v0", agent="scripted")
    _, info = user_view.reset(seed=1, options={"task_id": "price-emma"})
    _, reward, terminated, _, info = user_view.step("How much is Emma?")
    _, reward, terminated, _, info = user_view.step(f"Thanks. {THANKS}")
    assert terminated and reward == 1.0


def test_a_tool_can_end_the_conversation():
    env = BookshopEnv()
    env.reset(seed=0)
    _, _, terminated, truncated, infos = env.step({AGENT: json.dumps({"name": "hand_over", "arguments": {}})})
    assert terminated[AGENT] and not truncated[AGENT] and infos[AGENT]["end_reason"] == "handed_over"
    assert infos[AGENT]["reward_info"]["components"] == {"looked_up": 0.0, "thanked": 0.0}


def test_the_conformance_checker_passes():
    check_env(BookshopEnv)


def test_verbalized_sampling_keeps_the_benchmarks_rule():
    from sims.verbalized import vs_instruction

    prompt = BookshopEnv().reset(seed=0)[1][USER]["messages"][0]["content"]
    assert REPLY_RULES[0].rule in vs_instruction(prompt, 5)
    assert REPLY_RULES[0].rule not in vs_instruction("You are a helpful assistant.", 5)


def test_scope_play(capsys):
    from baselines.cli import main

    assert main(["play", "Bookshop", "--episodes", "2", "--json"]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["end_reason"] for r in results] == ["thanked", "thanked"]
    assert all(r["rewards"] == {"agent": 1.0, "user": 1.0} for r in results)


def test_scope_train_two_steps(tmp_path, capsys):
    pytest.importorskip("torch")
    from baselines.cli import main

    out = tmp_path / "run"
    settings = ["env=Bookshop", "policy=tiny", "steps=2", "groups_per_step=2", "group_size=2", "max_new_tokens=6"]
    settings += ["eval_every=2", "eval_tasks=1", "tensorboard=false", f"output_dir={out}"]
    assert main(["train", *settings]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and "heldout_success" in records[-1]
    assert (out / "checkpoints" / "latest").read_text() == "step-000002"


def test_scope_diagnose(tmp_path, capsys):
    from baselines.cli import main

    arguments = ["diagnose", "--env", "Bookshop", "--side", "user", "--simulator", "scripted"]
    arguments += ["--states", "2", "--samples", "2", "--embedding", "tfidf", "--plot", str(tmp_path / "c.png")]
    assert main([*arguments, "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    assert report["states"] == 2 and (tmp_path / "c.png").is_file()
