import asyncio

import pytest
from llm_server import LLMServer

from scope_envs import AgentView, run_episodes
from scope_envs.p4g import P4GEnv
from sims import SimulatorError, make_simulator
from sims.anthropic_backend import OPENING_TURN, to_anthropic
from sims.api import Price
from sims.retry import RetryPolicy, retry_after_seconds
from sims.testing import TOOLS, VIEW, check_simulator

pytest.importorskip("openai")
pytest.importorskip("anthropic")

KEY = "sk-test-secret-0123456789"


class RecordingRetry(RetryPolicy):
    """Retries at once, remembering what the server asked for."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        object.__setattr__(self, "asked", [])

    def delay(self, attempt, retry_after=None, rng=None):
        self.asked.append(retry_after)
        return 0.0


@pytest.fixture
def server():
    with LLMServer() as running:
        yield running


def build(protocol, server, **kwargs):
    kwargs.setdefault("retry", RecordingRetry())
    base_url = server.url + "/v1" if protocol == "openai" else server.url
    return make_simulator(f"{protocol}:test-model", base_url=base_url, api_key=KEY, **kwargs)


@pytest.fixture(params=["openai", "anthropic"])
def protocol(request):
    return request.param


def test_conformance(protocol, server):
    simulator = build(protocol, server)
    check_simulator(simulator)
    simulator.close()


def test_text_tool_calls_seed_and_usage(protocol, server):
    simulator = build(protocol, server, price=Price(1.0, 2.0))
    reply = simulator.respond(VIEW, seed=42)
    assert reply.text == "echo: Hello! How can I help you today?" and reply.metadata["attempts"] == 1
    call = simulator.respond([*VIEW, {"role": "user", "content": "call lookup"}], TOOLS).tool_calls[0]
    assert call.name == "lookup" and call.args == {"query": "x"} and call.id
    body = server.requests[0]["body"]
    if protocol == "openai":
        assert body["seed"] == 42 and body["messages"] == VIEW
        assert server.requests[1]["body"]["tools"] == TOOLS
        assert simulator.usage.prompt_tokens == 22 and simulator.usage.cost_usd == pytest.approx((22 + 2 * 14) / 1e6)
    else:
        assert body["system"] == VIEW[0]["content"] and "seed" not in body
        assert server.requests[1]["body"]["tools"][0]["input_schema"] == TOOLS[0]["function"]["parameters"]
        assert simulator.usage.prompt_tokens == 26 and simulator.usage.completion_tokens == 10
    simulator.close()


@pytest.mark.parametrize("fault", ["429", "500", "503", "malformed", "empty", "timeout"])
def test_transient_faults_are_retried(protocol, server, fault):
    retry = RecordingRetry()
    simulator = build(protocol, server, retry=retry, timeout=0.5)
    server.fail(fault, fault)
    reply = simulator.respond(VIEW)
    assert reply.text.startswith("echo:") and reply.metadata["attempts"] == 3 and simulator.retries == 2
    if fault == "429":
        assert retry.asked == [0.05, 0.05]  # the server's retry-after was honoured
    simulator.close()


def test_persistent_failure_is_a_simulator_error_and_a_truncation(protocol, server):
    simulator = build(protocol, server, retry=RecordingRetry(max_attempts=3))
    server.fail(*["500"] * 20)
    with pytest.raises(SimulatorError, match="failed after 3 attempts; last error: HTTP 500"):
        simulator.respond(VIEW)
    view = AgentView(P4GEnv(persona_source="synthetic"), simulator=simulator)
    view.reset(seed=0)
    _, reward, terminated, truncated, info = view.step("Hello, would you donate?")
    assert reward == 0.0
    assert truncated and not terminated and info["end_reason"] == "policy_error" and "HTTP 500" in info["end_detail"]
    simulator.close()


def test_client_errors_are_not_retried_and_never_leak_the_key(protocol, server):
    simulator = build(protocol, server)
    server.fail("context")  # a 400 about this conversation only: its episode fails (fatal errors: test_api_errors)
    with pytest.raises(SimulatorError) as raised:
        simulator.respond(VIEW)
    assert "HTTP 400" in str(raised.value) and "not retried" in str(raised.value)
    assert KEY not in str(raised.value) and "<redacted>" in str(raised.value)
    assert len(server.requests) == 1
    assert KEY not in repr(simulator) and KEY not in str(simulator.config())
    simulator.close()


def test_concurrency_limit(protocol, server):
    server.delay = 0.15
    limited = build(protocol, server, concurrency=2)
    limited.respond_batch([VIEW] * 6)
    assert server.max_in_flight == 2
    server.max_in_flight = 0
    wide = build(protocol, server, concurrency=8)
    wide.respond_batch([VIEW] * 6)
    assert server.max_in_flight == 6  # the batch really is concurrent
    limited.close()
    wide.close()


def test_async_callers_from_their_own_loop(protocol, server):
    simulator = build(protocol, server)

    async def many():
        return await asyncio.gather(
            *(simulator.arespond([*VIEW[:1], {"role": "user", "content": str(i)}]) for i in range(5))
        )

    assert [r.text for r in asyncio.run(many())] == [f"echo: {i}" for i in range(5)]
    simulator.close()


def test_structured_output_request(protocol, server):
    simulator = build(protocol, server)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    simulator.respond_json(VIEW, schema)
    body = server.requests[-1]["body"]
    if protocol == "openai":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": schema, "strict": True},
        }
    else:
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    simulator.close()


def test_api_simulators_play_batched_episodes(server):
    simulator = build("openai", server, concurrency=4)
    results = run_episodes(
        [P4GEnv(persona_source="synthetic", exchanges=2) for _ in range(4)],
        {"agent": "scripted", "user": simulator},
        seeds=0,
    )
    assert [r.end_reason for r in results] == ["max_turns"] * 4 and simulator.calls == 8
    simulator.close()


def test_missing_key_and_model_are_clear(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(SimulatorError, match="OPENAI_API_KEY"):
        make_simulator("openai:gpt-5-mini")
    with pytest.raises(SimulatorError, match="ANTHROPIC_API_KEY"):
        make_simulator("anthropic:claude-sonnet-4-5")
    with pytest.raises(ValueError, match="needs a model name"):
        make_simulator("openai:", base_url="http://127.0.0.1:9/v1")


def test_anthropic_view_conversion():
    view = [
        {"role": "system", "content": "rules"},
        {
            "role": "assistant",
            "content": "I start.",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "content": "result 1", "tool_call_id": "c1", "name": "f"},
        {"role": "user", "content": "and you?"},
        {"role": "user", "content": "hello?"},
    ]
    system, turns = to_anthropic(view)
    assert system == "rules"
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": OPENING_TURN}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I start."},
                {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "result 1"},
                {"type": "text", "text": "and you?"},
                {"type": "text", "text": "hello?"},
            ],
        },
    ]


def test_retry_policy_and_retry_after_parsing():
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=5.0)
    import random

    rng = random.Random(0)
    assert all(0 <= policy.delay(3, rng=rng) <= 5.0 for _ in range(100))
    assert policy.delay(0, retry_after=120) == 5.0
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_seconds({}) is None
