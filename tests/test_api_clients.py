"""The two clients of each API backend, the lean one (the default) and the official SDK, behave the
same: replies, tool calls, usage, retries, fatal errors and the key kept out of every error.
(The fault tests of test_sims_api.py and test_api_errors.py run the default client.)"""

import pytest
from llm_server import LLMServer

from scope_envs.core.policy import FatalPolicyError
from sims import make_simulator
from sims.retry import RetryPolicy
from sims.testing import TOOLS, VIEW, check_simulator

pytest.importorskip("openai")
pytest.importorskip("anthropic")

KEY = "sk-test-secret-0123456789"
NO_WAIT = RetryPolicy(max_attempts=4, initial_delay=0.0)


@pytest.fixture
def server():
    with LLMServer() as running:
        yield running


@pytest.fixture(params=["openai", "anthropic"])
def protocol(request):
    return request.param


def build(protocol, server, client, **kwargs):
    base_url = server.url + "/v1" if protocol == "openai" else server.url
    return make_simulator(
        f"{protocol}:test-model", base_url=base_url, api_key=KEY, retry=NO_WAIT, client=client, **kwargs
    )


def test_the_lean_client_is_the_default_for_openai(protocol, server):
    simulator = make_simulator(f"{protocol}:m", base_url=server.url, api_key=KEY)
    assert simulator.config()["client"] == ("http" if protocol == "openai" else "sdk")
    with pytest.raises(ValueError, match="client must be one of"):
        make_simulator(f"{protocol}:m", base_url=server.url, api_key=KEY, client="curl")


def test_both_clients_give_the_same_replies_and_requests(protocol, server):
    outcomes = []
    for client in ("http", "sdk"):
        simulator = build(protocol, server, client)
        check_simulator(simulator)
        server.requests.clear()
        text = simulator.respond(VIEW, seed=3)
        call = simulator.respond([*VIEW, {"role": "user", "content": "call lookup"}], TOOLS).tool_calls[0]
        outcomes.append(
            (
                text.text,
                text.usage,
                text.metadata["finish_reason"],
                (call.name, call.args),
                [r["body"] for r in server.requests],
                server.requests[0]["path"],
            )
        )
        assert any(KEY in value for value in server.requests[0]["headers"].values())
        simulator.close()
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("client", ["http", "sdk"])
def test_faults_mean_the_same_with_either_client(protocol, server, client):
    simulator = build(protocol, server, client, timeout=0.5)
    server.fail("429", "malformed", "timeout")
    reply = simulator.respond(VIEW)
    assert reply.text.startswith("echo:") and reply.metadata["attempts"] == 4 and simulator.retries == 3
    server.fail_always("401")
    with pytest.raises(FatalPolicyError) as raised:
        simulator.respond(VIEW)
    assert "HTTP 401" in str(raised.value) and KEY not in str(raised.value)
    assert raised.value.__context__ is None and raised.value.__cause__ is None
    simulator.close()


def test_organization_and_project_headers(server, monkeypatch):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-42")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-7")
    for client in ("http", "sdk"):
        simulator = build("openai", server, client)
        simulator.respond(VIEW)
        sent = {name.lower(): value for name, value in server.requests[-1]["headers"].items()}
        assert sent["openai-organization"] == "org-42" and sent["openai-project"] == "proj-7"
        simulator.close()
