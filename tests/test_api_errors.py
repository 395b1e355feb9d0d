"""API errors that no retry fixes end the run, and no error carries the API key, however it is
inspected: message, chained exceptions, formatted traceback (with locals), pickle."""

import pickle
import traceback

import pytest
from llm_server import LLMServer

from scope_envs import AgentView, run_episodes
from scope_envs.core.policy import FatalPolicyError, PolicyError
from scope_envs.p4g import P4GEnv
from sims import SimulatorError, make_simulator
from sims.retry import RetryPolicy

pytest.importorskip("openai")
pytest.importorskip("anthropic")

KEY = "sk-test-secret-0123456789"
NO_WAIT = RetryPolicy(max_attempts=2, initial_delay=0.0)


@pytest.fixture
def server():
    with LLMServer() as running:
        yield running


@pytest.fixture(params=["openai", "anthropic"])
def protocol(request):
    return request.param


def build(protocol, server):
    base_url = server.url + "/v1" if protocol == "openai" else server.url
    return make_simulator(f"{protocol}:test-model", base_url=base_url, api_key=KEY, retry=NO_WAIT)


def raised_by(simulator, view=None):
    with pytest.raises(Exception) as raised:
        simulator.respond(view or [{"role": "user", "content": "Hello"}])
    return raised.value


@pytest.mark.parametrize("status", ["401", "403"])
def test_a_rejected_key_is_fatal_at_once(protocol, server, status):
    simulator = build(protocol, server)
    server.fail_always(status)
    error = raised_by(simulator)
    assert isinstance(error, FatalPolicyError) and not isinstance(error, PolicyError)
    variable = "OPENAI_API_KEY" if protocol == "openai" else "ANTHROPIC_API_KEY"
    assert f"HTTP {status}" in str(error) and variable in str(error) and KEY not in str(error)
    assert len(server.requests) == 1  # never retried
    simulator.close()


@pytest.mark.parametrize("status", ["404", "400"])
def test_an_unknown_model_or_a_refused_request_shape_is_fatal(protocol, server, status):
    simulator = build(protocol, server)
    server.fail_always(status)
    error = raised_by(simulator)
    assert isinstance(error, FatalPolicyError) and "test-model" in str(error) and "configuration" in str(error)
    assert len(server.requests) == 1
    simulator.close()


def test_a_too_long_conversation_fails_only_its_episode(protocol, server):
    simulator = build(protocol, server)
    server.fail("context")
    assert isinstance(raised_by(simulator), SimulatorError)
    assert simulator.respond([{"role": "user", "content": "short"}]).text == "echo: short"  # the next one passes
    simulator.close()


def test_a_fatal_error_ends_views_and_batches_instead_of_truncating_episodes(server):
    simulator = build("openai", server)
    server.fail_always("401")
    view = AgentView(P4GEnv(persona_source="synthetic"), simulator=simulator)
    view.reset(seed=0)
    with pytest.raises(FatalPolicyError, match="HTTP 401"):
        view.step("Hello, would you donate?")
    envs = [P4GEnv(persona_source="synthetic", exchanges=2) for _ in range(3)]
    with pytest.raises(FatalPolicyError, match="HTTP 401"):
        run_episodes(envs, {"agent": "scripted", "user": simulator}, seeds=0)
    simulator.close()


def chain(error):
    """`error` and every exception linked to it, suppressed contexts included."""
    seen = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


@pytest.mark.parametrize("fault", ["400", "401", "404", "context", "500"])
def test_no_exception_carries_the_key(protocol, server, fault):
    """The client's own exception holds the request and its headers: it must not ride along as the
    `__context__` of the error raised (multiprocessing pickles and formats whole chains)."""
    simulator = build(protocol, server)
    server.fail_always(fault)
    error = raised_by(simulator)
    assert chain(error) == [error], [type(e).__name__ for e in chain(error)]
    formatted = "".join(traceback.format_exception(error))
    with_locals = "".join(traceback.TracebackException.from_exception(error, capture_locals=True).format())
    for text in (str(error), repr(error), formatted, with_locals, repr(pickle.dumps(error))):
        assert KEY not in text and KEY[3:] not in text
    simulator.close()


def test_an_episode_ended_by_an_api_error_does_not_record_the_key(server):
    simulator = build("openai", server)
    server.fail_always("context")  # the server echoes the credential in its message
    view = AgentView(P4GEnv(persona_source="synthetic"), simulator=simulator)
    view.reset(seed=0)
    *_, info = view.step("Hello, would you donate?")
    assert info["end_reason"] == "policy_error" and "HTTP 400" in info["end_detail"]
    assert KEY not in repr(info) and "<redacted>" in info["end_detail"]
    simulator.close()
