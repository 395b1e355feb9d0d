"""A small order-support dialogue built on `DialogueEnv`, used to test the base contract.

The agent has two tools over a per-episode copy of an order table; the user (the customer)
wants an order cancelled or its status told, and ends with `###STOP###`. Both sides have a
scripted policy, so the env runs end to end with no model.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from scope_envs import DialogueEnv, EpisodeEnd, Message, Reward, Scenario, ToolCall, ToolError
from scope_envs.core.chat import function_tool
from sims import ScriptedSimulator

ORDERS = {
    "O-1001": {"item": "kettle", "status": "processing"},
    "O-1002": {"item": "blender", "status": "shipped"},
    "O-1003": {"item": "toaster", "status": "processing"},
    "O-1004": {"item": "lamp", "status": "delivered"},
}
TASKS = {
    "cancel-1001": {"order_id": "O-1001", "goal": "cancel", "split": "train"},
    "status-1002": {"order_id": "O-1002", "goal": "status", "split": "train"},
    "cancel-1003": {"order_id": "O-1003", "goal": "cancel", "split": "train"},
    "status-1004": {"order_id": "O-1004", "goal": "status", "split": "test"},
    "cancel-1002": {"order_id": "O-1002", "goal": "cancel", "split": "test"},  # not cancellable: shipped
}
AGENT_TOOLS = [
    function_tool(
        "find_order",
        "Look up an order by its id.",
        {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
    ),
    function_tool(
        "cancel_order",
        "Cancel an order that has not shipped.",
        {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "reason": {"type": "string", "enum": ["late", "changed_mind", "other"]},
            },
            "required": ["order_id", "reason"],
            "additionalProperties": False,
        },
    ),
]
STOP = "###STOP###"


class HelpdeskEnv(DialogueEnv):
    metadata = {**DialogueEnv.metadata, "name": "helpdesk_v0"}
    scripted_policies = {"user": "helpdesk_env:ScriptedCustomer", "agent": "helpdesk_env:ScriptedClerk"}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_turns", 12)
        super().__init__(**kwargs)

    def load_scenario(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        split = options.get("split", "train")
        task_id = options.get("task_id") or str(
            rng.choice(sorted(t for t, task in TASKS.items() if task["split"] == split))
        )
        task = TASKS[task_id]
        self.orders = copy.deepcopy(ORDERS)
        wish = "cancel it because it is late" if task["goal"] == "cancel" else "know where it is"
        return Scenario(
            scenario_id=task_id,
            system_prompts={
                "agent": "You are a support clerk. Use the tools to look up and cancel orders.",
                "user": f"You are a customer. Your order id is {task['order_id']}. "
                f"You want to {wish}. Say {STOP} when done.",
            },
            tools={"agent": AGENT_TOOLS},
            opening=[("agent", "Hi! How can I help you today?")],
            data={"task": task},
        )

    def call_tool(self, side: str, call: ToolCall) -> str:
        order = self.orders.get(call.args["order_id"])
        if order is None:
            raise ToolError(f"order {call.args['order_id']} not found")
        if call.name == "cancel_order":
            if order["status"] != "processing":
                raise ToolError(f"order {call.args['order_id']} is {order['status']} and cannot be cancelled")
            order["status"] = "cancelled"
        return json.dumps(order)

    def end_reason(self, side: str, message: Message) -> str | None:
        return "user_stop" if side == "user" and STOP in message.text else None

    def compute_rewards(self, end: EpisodeEnd) -> dict[str, Reward]:
        task = self.scenario.data["task"]
        expected = copy.deepcopy(ORDERS)
        if task["goal"] == "cancel" and expected[task["order_id"]]["status"] == "processing":
            expected[task["order_id"]]["status"] = "cancelled"
        db = float(self.orders == expected)
        stopped = float(end.reason == "user_stop")
        reward = Reward(db * stopped, {"db": db, "user_stop": stopped})
        return {"agent": reward, "user": reward}


ORDER_ID = re.compile(r"O-\d{4}")


class ScriptedCustomer(ScriptedSimulator):
    name = "scripted-customer"

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        prompt = self.system_prompt(messages)
        order_id = ORDER_ID.search(prompt).group(0)
        cancel = "cancel" in prompt
        heard = self.heard(messages)
        last = heard[-1].lower() if heard else ""
        if len(self.said(messages)) >= 4 or "cancelled" in last or "status" in last:
            return f"{rng.choice(['Thanks!', 'Great, thank you.'])} {STOP}"
        if "order id" in last:
            return f"It is {order_id}."
        return "I want to cancel my order." if cancel else "Where is my order?"


class ScriptedClerk(ScriptedSimulator):
    name = "scripted-clerk"

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str | Message:
        heard = " ".join(self.heard(messages))
        found = ORDER_ID.search(heard)
        if found is None:
            return "Could you give me your order id?"
        results = [json.loads(m.text) for m in messages if m.role == "tool" and not m.text.startswith("Error")]
        errors = [m.text for m in messages if m.role == "tool" and m.text.startswith("Error")]
        wants_cancel = "cancel" in heard.lower()
        if errors:
            return f"Sorry, I could not do that: {errors[-1]}"
        if not results:
            return Message("assistant", None, tool_calls=(ToolCall.create("find_order", {"order_id": found.group(0)}),))
        order = results[-1]
        if wants_cancel and order["status"] == "processing":
            return Message(
                "assistant",
                None,
                tool_calls=(ToolCall.create("cancel_order", {"order_id": found.group(0), "reason": "late"}),),
            )
        if order["status"] == "cancelled":
            return f"Your order {found.group(0)} is cancelled."
        return f"The status of your order {found.group(0)} is {order['status']}."
