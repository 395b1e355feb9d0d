"""`scope play ENV --human agent|user --opponent SPEC`: a person plays one side in a terminal.

Type a message and press Enter to say it. Commands: `/tools` lists your tools with their
arguments; `/call NAME` asks for each argument in turn (or `/call NAME {"json": "arguments"}`);
the call is validated against the tool's schema before it is sent; `/quit` ends the game. At the
end the end reason and the reward breakdown are printed and the episode is appended to a JSONL file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from baselines.apps.people.game import GameSettings, HumanGame, InvalidMove
from baselines.training.records import append_records

MAX_INPUT_CHARS = 4000


def describe_tools(tools: list[dict[str, Any]]) -> str:
    """The tools, one per line, with their arguments (`name: type`, `*` marking the required ones)."""
    lines = []
    for schema in tools:
        function = schema.get("function", {})
        parameters = function.get("parameters") or {}
        required = set(parameters.get("required", []))
        arguments = ", ".join(
            f"{name}{'*' if name in required else ''}: {spec.get('type', 'any')}"
            for name, spec in (parameters.get("properties") or {}).items()
        )
        description = " ".join(str(function.get("description", "")).split())[:100]
        lines.append(f"  {function.get('name')}({arguments})  {description}")
    return "\n".join(lines) or "  (no tools on this side)"


def print_entries(entries: list[dict[str, Any]], human: str, out: TextIO) -> None:
    for entry in entries:
        message, who = entry["message"], "you" if entry["side"] == human else entry["side"]
        for call in message.get("tool_calls") or []:
            print(f"[{who}: tool call] {call['function']['name']}({call['function']['arguments']})", file=out)
        if message["role"] == "tool":
            print(f"[tool result for {who}] {message.get('content')}", file=out)
        elif message.get("content"):
            print(f"[{who}] {message['content']}", file=out)


def _ask_arguments(schema: dict[str, Any], ask: Callable[[str], str]) -> dict[str, Any]:
    parameters = schema.get("function", {}).get("parameters") or {}
    required = set(parameters.get("required", []))
    arguments: dict[str, Any] = {}
    for name, spec in (parameters.get("properties") or {}).items():
        kind = spec.get("type", "any")
        raw = ask(f"  {name} ({kind}{', required' if name in required else ', Enter to skip'}): ").strip()
        if not raw and name not in required:
            continue
        if kind == "string":
            arguments[name] = raw
            continue
        try:
            arguments[name] = json.loads(raw)
        except json.JSONDecodeError:
            arguments[name] = raw  # the schema check reports the type
    return arguments


def play_in_terminal(
    settings: GameSettings, save: str | Path, *, ask: Callable[[str], str] = input, out: TextIO | None = None
) -> int:
    import sys

    out = out or sys.stdout
    game = HumanGame(settings)
    state = game.start()
    print(
        f"You play the {game.side} of {settings.env} (scenario {state['scenario_id']}) against {settings.opponent}.",
        file=out,
    )
    print("Type a message and press Enter. /tools lists your tools, /call NAME calls one, /quit ends.", file=out)
    system = state["messages"][0]["content"] if state["messages"] else ""
    print(f"--- your instructions ---\n{system}\n---", file=out)
    shown = 0
    while True:
        print_entries(state["log"][shown:], game.side, out)
        shown = len(state["log"])
        if state["over"]:
            break
        try:
            line = ask("> ")
        except EOFError:
            line = "/quit"
        if len(line) > MAX_INPUT_CHARS:
            print(f"! at most {MAX_INPUT_CHARS} characters a turn", file=out)
            continue
        command, _, rest = line.strip().partition(" ")
        try:
            if command == "/quit":
                break
            if command == "/tools":
                print(describe_tools(game.tools()), file=out)
                continue
            if command == "/call":
                name, _, raw = rest.strip().partition(" ")
                schemas = {t["function"]["name"]: t for t in game.tools()}
                if name not in schemas:
                    raise InvalidMove(f"unknown tool {name!r}; /tools lists yours")
                arguments = json.loads(raw) if raw.strip() else _ask_arguments(schemas[name], ask)
                if not isinstance(arguments, dict):
                    raise InvalidMove("tool arguments are a JSON object")
                state = game.call_tool(name, arguments)
            else:
                state = game.say(line)
        except (InvalidMove, json.JSONDecodeError) as error:
            print(f"! {error}", file=out)
            continue
        if state["error"]:
            print(f"! {state['error']}", file=out)
    record = game.record()
    if game.over:
        info = state["reward_info"]
        print(f"=== ended: {state['end_reason']} after {record.turns} turns ===", file=out)
        for side in info:
            label = "you" if side == game.side else side
            print(f"{label}: reward {info[side].get('reward')}  components {info[side].get('components')}", file=out)
    else:
        print("=== you left before the end ===", file=out)
    append_records(save, [record])
    print(f"episode saved to {save}", file=out)
    return 0
