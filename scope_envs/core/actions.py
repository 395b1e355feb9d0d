"""Turns whatever a policy produced into a chat message, without ever raising.

An action is text, a `Message`, an OpenAI message dict, or any object with `to_message()` (a
simulator's `Reply`). Text is a tool call when it is a JSON tool call (`{"name": ..., "arguments":
{...}}`, an OpenAI tool call, a message with `tool_calls`, or a list of calls) or holds
`<tool_call>...</tool_call>` blocks, the format of Hermes- and Qwen-style chat templates; the
text content of a message without structured tool calls is read the same way.
Text that looks like a tool call but does not parse becomes a malformed call carrying its raw
text, so the env can answer it with a tool error and the transcript stays valid OpenAI format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from scope_envs.core.chat import Message, ToolCall

MALFORMED_CALL_NAME = "malformed_tool_call"
SURROGATES = "the text held unpaired surrogates; they were replaced with U+FFFD"
_TAGGED_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_CODE_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)
_LOOKS_LIKE_CALL = re.compile(r"\A[\[{].*[\"'](?:name|tool_calls|function)[\"']\s*:", re.DOTALL)
_NAME_IN_BROKEN_JSON = re.compile(r"[\"']name[\"']\s*:\s*[\"']([A-Za-z0-9_.\-]{1,64})[\"']")


@dataclass(frozen=True)
class ParsedAction:
    """The message to record for the speaker, and what was wrong with it.

    `invalid` is set when nothing usable could be made of the action (it is then not recorded);
    `call_errors` maps the index of a tool call in `message.tool_calls` to the error the env answers.
    """

    message: Message | None
    call_errors: dict[int, str] = field(default_factory=dict)
    invalid: str | None = None
    warnings: tuple[str, ...] = ()


def clean_text(text: str) -> tuple[str, bool]:
    """Text that encodes as UTF-8: surrogate pairs are joined, lone surrogates become U+FFFD."""
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"), True


def parse_action(action: Any) -> ParsedAction:
    """Parses one action; never raises. Every string of the result encodes as UTF-8."""
    try:
        return _repaired(_parse(action))
    except Exception as error:  # a parser bug must not take a training run down with it
        return ParsedAction(None, invalid=f"could not read the action: {type(error).__name__}: {error!r}"[:500])


def _repaired(parsed: ParsedAction) -> ParsedAction:
    """Lone surrogates anywhere in the message (content parts, tool names, arguments, ids; JSON
    escapes such as `"\\ud800"` decode to them) become U+FFFD, as they do in plain text."""
    message = parsed.message
    if message is None:
        return parsed
    clean = replace(
        message,
        content=_clean(message.content),
        tool_calls=tuple(
            replace(call, name=_clean(call.name), arguments=_clean(call.arguments), id=_clean(call.id))
            for call in message.tool_calls
        ),
        extra=_clean(dict(message.extra)),
    )
    if clean == message:
        return parsed
    warnings = parsed.warnings if SURROGATES in parsed.warnings else (*parsed.warnings, SURROGATES)
    return replace(parsed, message=clean, warnings=warnings)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)[0]
    if isinstance(value, list):
        return [_clean(item) for item in value]
    if isinstance(value, dict):
        return {_clean(key): _clean(item) for key, item in value.items()}
    return value


def _parse(action: Any) -> ParsedAction:
    warnings: list[str] = []
    if hasattr(action, "to_message") and not isinstance(action, (str, bytes, Mapping, Message)):
        action = action.to_message()
    if isinstance(action, (bytes, bytearray)):
        decoded = bytes(action).decode("utf-8", "replace")
        if decoded.encode("utf-8") != bytes(action):
            warnings.append("the action was not valid UTF-8; undecodable bytes were replaced with U+FFFD")
        action = decoded
    if isinstance(action, Message):
        return _from_message(action, warnings)
    if isinstance(action, Mapping):
        return _from_json_value(dict(action), raw=None, warnings=warnings)
    if not isinstance(action, str):
        return ParsedAction(
            None,
            invalid=f"an action must be text, a Message or a tool call, got {type(action).__name__}",
            warnings=tuple(warnings),
        )
    text, replaced = clean_text(action)
    if replaced:
        warnings.append(SURROGATES)
    return _from_text(text, warnings)


def _from_message(message: Message, warnings: list[str]) -> ParsedAction:
    if not message.tool_calls and isinstance(message.content, str):
        return _from_text(message.content, warnings)  # text is read the same way however it arrives
    content = message.content
    if isinstance(content, str):
        content, replaced = clean_text(content)
        if replaced:
            warnings.append(SURROGATES)
    message = replace(message, role="assistant", content=content, tool_call_id=None)
    errors = {index: error for index, call in enumerate(message.tool_calls) if (error := _argument_error(call))}
    return ParsedAction(message, errors, warnings=tuple(warnings))


def _from_text(text: str, warnings: list[str]) -> ParsedAction:
    if "<tool_call>" in text:
        return _from_tagged_text(text, warnings)
    stripped = text.strip()
    fenced = _CODE_FENCE.match(stripped)
    candidate = fenced.group(1) if fenced else stripped
    if not candidate.startswith(("{", "[")):
        return ParsedAction(Message("assistant", text), warnings=tuple(warnings))
    try:
        value = json.loads(candidate)
    except (ValueError, RecursionError) as error:
        if _LOOKS_LIKE_CALL.match(candidate):
            return _malformed(text, f"the tool call is not valid JSON ({error})", None, warnings)
        return ParsedAction(Message("assistant", text), warnings=tuple(warnings))
    return _from_json_value(value, raw=text, warnings=warnings)


def _from_tagged_text(text: str, warnings: list[str]) -> ParsedAction:
    outside = _TAGGED_CALL.sub("", text).strip() or None
    calls: list[ToolCall] = []
    errors: dict[int, str] = {}
    for block in _TAGGED_CALL.findall(text):
        try:
            value = json.loads(block)
            call, error = _call_from_value(value)
        except (ValueError, RecursionError) as parse_error:
            call, error = None, f"the tool call is not valid JSON ({parse_error})"
        if call is None:
            call = _malformed_call(block)
        if error:
            errors[len(calls)] = error
        calls.append(call)
    return ParsedAction(Message("assistant", outside, tool_calls=tuple(calls)), errors, warnings=tuple(warnings))


def _from_json_value(value: Any, raw: str | None, warnings: list[str]) -> ParsedAction:
    """A parsed JSON value (or a dict action): a message dict, one call, or a list of calls."""
    if isinstance(value, dict) and ("role" in value or "tool_calls" in value):
        try:
            message = Message.from_openai({"role": "assistant", **value})
        except ValueError as error:
            return _malformed(
                raw or json.dumps(value, default=str),
                f"the message is not a valid chat message ({error})",
                value,
                warnings,
            )
        return _from_message(message, warnings)
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, dict) and _is_call_shaped(item) for item in items):
        if raw is None:
            return ParsedAction(
                None, invalid="a dict action must be a chat message or a tool call", warnings=tuple(warnings)
            )
        return ParsedAction(Message("assistant", raw), warnings=tuple(warnings))
    calls: list[ToolCall] = []
    errors: dict[int, str] = {}
    for item in items:
        call, error = _call_from_value(item)
        if call is None:
            call = _malformed_call(json.dumps(item, ensure_ascii=False, default=str))
        if error:
            errors[len(calls)] = error
        calls.append(call)
    return ParsedAction(Message("assistant", None, tool_calls=tuple(calls)), errors, warnings=tuple(warnings))


def _is_call_shaped(item: dict[str, Any]) -> bool:
    return "name" in item or "function" in item


def _call_from_value(value: Any) -> tuple[ToolCall | None, str | None]:
    """A call from `{"name", "arguments"|"parameters"|"args"}` or an OpenAI tool call dict."""
    if not isinstance(value, dict):
        return None, f"a tool call must be a JSON object, got {type(value).__name__}"
    if "function" in value and isinstance(value["function"], dict):
        try:
            call = ToolCall.from_openai(value)
        except ValueError as error:
            return None, str(error)
        return _checked(call)
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, "a tool call needs a non-empty string 'name'"
    call_id = value.get("id") if isinstance(value.get("id"), str) else ""
    arguments = next((value[k] for k in ("arguments", "parameters", "args") if k in value), {})
    if isinstance(arguments, str):
        return _checked(ToolCall(name.strip(), arguments, id=call_id))
    return _checked(ToolCall(name.strip(), json.dumps(arguments, ensure_ascii=False, default=str), id=call_id))


def _checked(call: ToolCall) -> tuple[ToolCall, str | None]:
    return call, _argument_error(call)


def _argument_error(call: ToolCall) -> str | None:
    try:
        call.args  # noqa: B018  (parsing is the check)
    except ValueError as error:
        return f"the arguments of '{call.name}' are not a JSON object ({error})"
    return None


def _malformed_call(raw: str) -> ToolCall:
    found = _NAME_IN_BROKEN_JSON.search(raw)
    return ToolCall(found.group(1) if found else MALFORMED_CALL_NAME, raw)


def _malformed(raw: str, error: str, value: Any, warnings: list[str]) -> ParsedAction:
    message = Message("assistant", None, tool_calls=(_malformed_call(raw),))
    return ParsedAction(message, {0: error}, warnings=tuple(warnings))
