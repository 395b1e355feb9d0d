import json

from hypothesis import given, settings
from hypothesis import strategies as st

from scope_envs.core.actions import MALFORMED_CALL_NAME, parse_action
from scope_envs.core.chat import Message, ToolCall

argument_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True)
arguments = st.dictionaries(st.text(max_size=10), argument_values, max_size=5)


@settings(max_examples=300)
@given(
    st.one_of(
        st.text(), st.binary(), st.integers(), st.none(), st.lists(st.text()), st.dictionaries(st.text(), st.text())
    )
)
def test_never_raises_and_always_explains(action):
    parsed = parse_action(action)
    assert (parsed.message is None) == (parsed.invalid is not None)
    if parsed.message is not None:
        assert parsed.message.role == "assistant"
        assert set(parsed.call_errors) <= set(range(len(parsed.message.tool_calls)))
        parsed.message.text.encode("utf-8")  # whatever is recorded can be sent to an API


@settings(max_examples=300)
@given(st.text().filter(lambda t: not t.lstrip().startswith(("{", "[", "```")) and "<tool_call>" not in t))
def test_plain_text_is_a_message_verbatim_unless_unencodable(text):
    parsed = parse_action(text)
    assert not parsed.message.tool_calls
    try:
        text.encode("utf-8")
        assert parsed.message.content == text
    except UnicodeEncodeError:
        assert parsed.warnings


@given(names, arguments)
def test_json_tool_call_round_trips(name, args):
    for text in (
        json.dumps({"name": name, "arguments": args}),
        json.dumps({"name": name, "arguments": json.dumps(args)}),
        json.dumps([{"name": name, "parameters": args}]),
        json.dumps({"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}),
        json.dumps(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                ],
            }
        ),
        f"Let me check.\n<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>",
        f"```json\n{json.dumps({'name': name, 'arguments': args})}\n```",
    ):
        parsed = parse_action(text)
        assert parsed.call_errors == {}, text
        (call,) = parsed.message.tool_calls
        assert call.name == name and call.args == args


@given(names, arguments, st.integers(min_value=1, max_value=20))
def test_truncated_json_call_is_a_malformed_call_not_text(name, args, cut):
    text = json.dumps({"name": name, "arguments": {**args, "k": "v"}})
    broken = text[: max(len(text) - cut, text.index('"arguments"') + 12)]
    parsed = parse_action(broken)
    (call,) = parsed.message.tool_calls
    assert call.name == name
    assert call.arguments == broken  # the raw attempt is kept, so nothing is lost
    assert "not valid JSON" in parsed.call_errors[0]


def test_message_and_reply_like_objects():
    call = ToolCall.create("f", {"x": 1}, id="c1")
    parsed = parse_action(Message("user", "hi", tool_calls=(call,)))
    assert parsed.message.role == "assistant" and parsed.message.tool_calls == (call,)

    class ReplyLike:
        def to_message(self):
            return Message("assistant", "from a reply")

    assert parse_action(ReplyLike()).message.content == "from a reply"


def test_specific_errors():
    assert parse_action('[{"name": 3}]').call_errors[0] == "a tool call needs a non-empty string 'name'"
    assert "not a JSON object" in parse_action('{"name": "f", "arguments": "[1]"}').call_errors[0]
    assert parse_action('{"not": "a call"}').message.content == '{"not": "a call"}'  # JSON that is not a call is text
    assert parse_action("{broken json without a call").message.content == "{broken json without a call"
    assert parse_action('{"tool_calls": [{"oops": 1}]').message.tool_calls[0].name == MALFORMED_CALL_NAME
    assert parse_action({"unexpected": "dict"}).invalid == "a dict action must be a chat message or a tool call"
    assert parse_action(None).invalid.startswith("an action must be text")
    assert parse_action(b"\xffabc").warnings
    tagged = parse_action('<tool_call>{bad}</tool_call> and <tool_call>{"name": "g"}</tool_call>')
    assert [c.name for c in tagged.message.tool_calls] == [MALFORMED_CALL_NAME, "g"] and list(tagged.call_errors) == [0]
    assert tagged.message.content == "and"


def test_one_megabyte_text_parses_quickly_as_text():
    parsed = parse_action("{" + "x" * 1_000_000)
    assert parsed.message.content.startswith("{x")
