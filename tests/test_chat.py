import json

from hypothesis import given
from hypothesis import strategies as st

from scope_envs import Message, ToolCall
from scope_envs.core.chat import function_tool, to_openai_messages

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
tool_calls = st.builds(
    ToolCall.create,
    name=st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True),
    args=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    id=st.text(max_size=10),
)
messages = st.one_of(
    st.builds(Message, role=st.sampled_from(["system", "user", "assistant"]), content=st.text()),
    st.builds(
        Message,
        role=st.just("assistant"),
        content=st.none() | st.text(),
        tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    ),
    st.builds(
        Message, role=st.just("tool"), content=st.text(), tool_call_id=st.text(min_size=1), name=st.text(min_size=1)
    ),
)


@given(messages)
def test_message_round_trips_through_openai_dicts(message):
    data = message.to_openai()
    assert Message.from_openai(data) == message
    assert Message.from_openai(json.loads(json.dumps(data))) == message  # survives the wire
    assert Message.from_openai(data).to_openai() == data


def test_openai_dict_round_trip_keeps_unknown_keys_and_content_parts():
    data = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}],
        "reasoning_content": "thinking...",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    message = Message.from_openai(data)
    assert message.text == "Hi there"
    assert message.tool_calls[0].args == {"a": 1}
    assert message.to_openai() == data


def test_tool_call_arguments_keep_their_exact_text():
    raw = '{ "b" : 2,"a":1 }'
    call = ToolCall.from_openai({"id": "x", "type": "function", "function": {"name": "f", "arguments": raw}})
    assert call.to_openai()["function"]["arguments"] == raw
    assert call.args == {"a": 1, "b": 2}


def test_dict_arguments_from_lenient_servers_are_serialised():
    call = ToolCall.from_openai({"function": {"name": "f", "arguments": {"a": [1, 2]}}})
    assert call.args == {"a": [1, 2]}


def test_invalid_messages_raise_clear_errors():
    import pytest

    with pytest.raises(ValueError, match="unknown chat role"):
        Message("robot", "hi")
    with pytest.raises(ValueError, match="function"):
        ToolCall.from_openai({"id": "x"})
    with pytest.raises(ValueError, match="content"):
        Message.from_openai({"role": "user", "content": 3})


def test_helpers():
    schema = function_tool("f", "does f")
    assert schema["function"]["parameters"] == {"type": "object", "properties": {}}
    assert to_openai_messages([{"role": "user", "content": "x"}]) == [{"role": "user", "content": "x"}]
