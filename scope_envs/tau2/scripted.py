"""Scripted tau2-bench policies: a user that follows its task's instructions literally, and an agent
that replays a task's gold actions.

Both read everything from their view and hold no state. The user reads its scenario from the
`<scenario>` block of its system prompt and states its reason for calling and what it knows, in the
first person; it confirms what the agent proposes, answers questions with what it knows, and stops
(`###STOP###`) when the agent asks whether there is anything else. The gold agent recognises the
task from what the user said (the task whose reason for calling and known information the user
stated), then makes the task's gold tool calls in order, says the information the task requires
the agent to communicate, and asks whether there is anything else.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import numpy as np

from scope_envs.core.chat import Message, ToolCall, tool_name
from scope_envs.core.scripted import ScriptedSimulator
from scope_envs.tau2.prompts import TRANSFER_TOOL, USER_STOP, USER_TRANSFER

MAX_USER_TURNS = 10
ANYTHING_ELSE = "Is there anything else I can help you with?"
SECTION_HEADERS = {
    "Reason for call:": "reason_for_call",
    "Known info:": "known_info",
    "Unknown info:": "unknown_info",
    "Task instructions:": "task_instructions",
}
# Tools that only one domain has, to tell the domain from the agent's tool list.
DOMAIN_MARKERS = {"find_user_id_by_email": "retail", "book_reservation": "airline"}

_FIRST_PERSON = [
    (r"\byou are\b", "I am"),
    (r"\bYou are\b", "I am"),
    (r"\byou were\b", "I was"),
    (r"\bYou were\b", "I was"),
    (r"\b[Yy]ou're\b", "I'm"),
    (r"\b[Yy]ou've\b", "I've"),
    (r"\b[Yy]ou'd\b", "I'd"),
    (r"\b[Yy]ou'll\b", "I'll"),
    (r"\bYou name\b", "My name"),
    (r"\byourself\b", "myself"),
    (r"\byours\b", "mine"),
    (r"\byour\b", "my"),
    (r"\bYour\b", "My"),
    (r"\b(to|for|with|told|tell|give|gave|help|send|sent|let|ask|asked|call|contact|offer|offered|by) you\b", r"\1 me"),
    (r"\b[Yy]ou\b", "I"),
]


def first_person(text: str) -> str:
    """A task instruction ("You want to ...") as the user would say it ("I want to ...")."""
    for pattern, replacement in _FIRST_PERSON:
        text = re.sub(pattern, replacement, text)
    return text


def _squash(text: str) -> str:
    return " ".join(text.split())


def parse_scenario(system_prompt: str) -> dict[str, str]:
    """The sections of a tau2 user scenario (reason_for_call, known_info, ...) from the user's prompt."""
    match = re.search(r"<scenario>\n(.*)\n</scenario>", system_prompt, flags=re.DOTALL)
    if match is None:
        return {}
    lines = match.group(1).split("\n")
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped in SECTION_HEADERS:
            current = SECTION_HEADERS[stripped]
            sections[current] = []
        elif stripped.startswith("Domain:"):
            sections["domain"] = [stripped.removeprefix("Domain:").strip()]
            current = None
        elif stripped in {"Instructions:", "Persona:"}:
            current = None if stripped == "Instructions:" else "persona"
            if current:
                sections[current] = []
        elif current is not None:
            sections[current].append(line.removeprefix("\t\t") if current != "persona" else line.removeprefix("\t"))
    return {key: "\n".join(value) for key, value in sections.items()}


def opening_request(scenario: dict[str, str]) -> str:
    """What a literal user says first: its reason for calling and what it knows, in the first person."""
    parts = [scenario.get("reason_for_call", ""), scenario.get("known_info", "")]
    return " ".join(_squash(first_person(part)) for part in parts if part.strip())


class ScriptedTau2User(ScriptedSimulator):
    """A tau2 user that follows its scenario literally; see the module docstring."""

    name = "tau2-scripted-user"

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> str:
        scenario = parse_scenario(self.system_prompt(messages))
        said, heard = self.said(messages), self.heard(messages)
        if not said:
            return opening_request(scenario) or "Hi, I need some help."
        if len(said) >= MAX_USER_TURNS:
            return f"I have to go now, thank you. {USER_STOP}"
        last = heard[-1].lower() if heard else ""
        if "transfer" in last and ("human" in last or "agent" in last):
            return USER_TRANSFER
        if "anything else" in last:
            return f"No, that's all. Thank you! {USER_STOP}"
        if any(cue in last for cue in ("confirm", "proceed", "yes/no", "would you like", "shall i", "do you want")):
            return "Yes, please go ahead."
        if any(cue in last for cue in ("email", "zip", "name", "user id", "order id", "reservation id")):
            known = _squash(first_person(scenario.get("known_info", "")))
            return known or "I'm sorry, I don't have that information."
        return "Okay, please go ahead."


@lru_cache(maxsize=4)
def _task_index(domain_name: str) -> list[tuple[str, str, Any]]:
    from scope_envs.tau2.domain import load_domain

    index = []
    for task in load_domain(domain_name).tasks.values():
        instructions = task.user_scenario.instructions
        if isinstance(instructions, str):
            request = _squash(first_person(instructions))
            details = ""
        else:
            request = opening_request(
                {"reason_for_call": instructions.reason_for_call, "known_info": instructions.known_info or ""}
            )
            details = _squash(first_person(instructions.task_instructions))
        index.append((request, details, task))
    return index


def find_task(domain_name: str, user_text: str) -> Any:
    """The task whose literal opening request the user said (the first of equals), or None."""
    said = _squash(user_text)
    matches = [(details, task) for request, details, task in _task_index(domain_name) if request and request in said]
    if not matches:
        return None
    exact = [task for details, task in matches if details and details in said]
    return (exact or [task for _, task in matches])[0]


def communicated(info: list[str], texts: list[str]) -> bool:
    """tau2's COMMUNICATE check: every string appears in some agent message, ignoring case and commas."""
    return all(any(item.lower() in text.lower().replace(",", "") for text in texts) for item in info)


class GoldActionsAgent(ScriptedSimulator):
    """An agent that replays the gold actions of the task the user describes; see the module docstring."""

    name = "tau2-gold-agent"

    def reply(self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator) -> Message | str:
        names = {tool_name(schema) for schema in tools}
        domain_name = next((domain for marker, domain in DOMAIN_MARKERS.items() if marker in names), None)
        if domain_name is None:
            return "I'm sorry, I cannot help with this request."
        task = find_task(domain_name, " ".join(self.heard(messages)))
        if task is None:
            return "Could you please tell me what you need help with, and your name or user id?"
        criteria = task.evaluation_criteria
        actions = list(criteria.actions or []) if criteria is not None else []
        info = list(criteria.communicate_info or []) if criteria is not None else []
        done = sum(len(message.tool_calls) for message in messages if message.role == "assistant")
        told = communicated(info, self.said(messages))
        if done < len(actions):
            action = actions[done]
            if action.name == TRANSFER_TOOL and info and not told:
                return f"Here is what I found: {'; '.join(info)}."
            return Message("assistant", None, tool_calls=(ToolCall.create(action.name, action.arguments),))
        summary = f" For your reference: {'; '.join(info)}." if info and not told else ""
        return f"Thank you for your patience, your request is complete.{summary} {ANYTHING_ELSE}"
