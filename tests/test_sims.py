import asyncio

import pytest
from helpdesk_env import HelpdeskEnv, ScriptedCustomer

from scope_envs import Message, PolicyError, ToolCall
from sims import (
    FunctionSimulator,
    Reply,
    ScriptedSimulator,
    Simulator,
    SimulatorError,
    make_simulator,
    register_backend,
    run_sync,
)
from sims.registry import BACKENDS

VIEW = [
    {"role": "system", "content": "You are a customer. Your order id is O-1001. You want to cancel it."},
    {"role": "user", "content": "Hi!"},
]


class SyncEcho(Simulator):
    def respond(self, messages, tools=None, *, seed=None):
        return Reply(text=f"{messages[-1]['content']}:{seed}")


class AsyncEcho(Simulator):
    async def arespond(self, messages, tools=None, *, seed=None):
        await asyncio.sleep(0)
        return Reply(text=f"async {messages[-1]['content']}:{seed}")


def test_forms_are_derived_from_either_implementation():
    views = [[{"role": "user", "content": str(i)}] for i in range(3)]
    for simulator, prefix in ((SyncEcho(), ""), (AsyncEcho(), "async ")):
        assert simulator.respond(views[0], seed=4).text == f"{prefix}0:4"
        assert asyncio.run(simulator.arespond(views[1], seed=5)).text == f"{prefix}1:5"
        assert [r.text for r in simulator.respond_batch(views, seeds=[1, 2, 3])] == [
            f"{prefix}{i}:{i + 1}" for i in range(3)
        ]
        assert [r.text for r in asyncio.run(simulator.arespond_batch(views))] == [f"{prefix}{i}:None" for i in range(3)]


def test_sync_form_works_inside_a_running_event_loop():
    async def inside():
        return AsyncEcho().respond([{"role": "user", "content": "x"}]).text

    assert asyncio.run(inside()) == "async x:None"


def test_a_simulator_must_implement_one_form():
    class Nothing(Simulator):
        pass

    with pytest.raises(NotImplementedError, match="respond\\(\\) or arespond\\(\\)"):
        Nothing().respond([])


def test_batch_arguments_must_align():
    with pytest.raises(ValueError, match="same length"):
        SyncEcho().respond_batch([[], []], seeds=[1])


def test_reply_conversions():
    call = ToolCall.create("f", {"a": 1}, id="c")
    reply = Reply(tool_calls=(call,), token_ids=[1, 2], logprobs=[-0.1, -0.2])
    assert reply.to_message() == Message("assistant", None, tool_calls=(call,))
    assert Reply.coerce("hi").text == "hi"
    assert Reply.coerce({"role": "assistant", "content": "x"}).text == "x"
    assert Reply.coerce(Message("assistant", None, tool_calls=(call,))).tool_calls == (call,)
    with pytest.raises(TypeError, match="got int"):
        Reply.coerce(3)


def test_scripted_simulator_is_deterministic_given_a_seed_or_the_view():
    customer = ScriptedCustomer()
    stop_view = [*VIEW, {"role": "assistant", "content": "cancel"}, {"role": "user", "content": "It is cancelled."}]
    by_seed = {customer.respond(stop_view, seed=s).text for s in range(20)}
    assert len(by_seed) == 2  # it varies with the seed ...
    assert len({customer.respond(stop_view, seed=3).text for _ in range(5)}) == 1  # ... and only with the seed
    assert len({customer.respond(stop_view).text for _ in range(5)}) == 1  # unseeded: derived from the view
    assert customer.deterministic and customer.respond(VIEW).metadata["simulator"] == "scripted-customer"


def test_scripted_helpers():
    messages = [Message.from_openai(m) for m in VIEW] + [Message("assistant", "me"), Message("user", "you")]
    assert ScriptedSimulator.system_prompt(messages).startswith("You are a customer")
    assert ScriptedSimulator.heard(messages) == ["Hi!", "you"] and ScriptedSimulator.said(messages) == ["me"]


def test_function_simulator_with_and_without_seed():
    assert FunctionSimulator(lambda messages, tools: "plain").respond(VIEW).text == "plain"
    assert FunctionSimulator(lambda messages, tools, seed: f"seed {seed}").respond(VIEW, seed=9).text == "seed 9"
    tool_reply = FunctionSimulator(
        lambda m, t: {"role": "assistant", "content": None, "tool_calls": [call.to_openai()]}
    )
    call = ToolCall.create("f", {}, id="1")
    assert tool_reply.respond(VIEW).tool_calls == (call,)


def test_make_simulator_specs():
    env = HelpdeskEnv()
    assert isinstance(make_simulator("scripted", env=env, side="user"), ScriptedCustomer)
    assert isinstance(make_simulator("scripted:helpdesk_env:ScriptedCustomer"), ScriptedCustomer)
    with pytest.raises(ValueError, match="pass env= and side="):
        make_simulator("scripted")
    with pytest.raises(ValueError, match=r"known backends: .*scripted"):
        make_simulator("nosuch:model")


class NamedEcho(SyncEcho):
    def __init__(self, model, temperature=1.0):
        self.name, self.temperature = model, temperature


def test_registered_backends_receive_the_rest_of_the_spec():
    register_backend("echo", NamedEcho)
    register_backend("echo-lazy", "test_sims:NamedEcho")  # imported on first use
    try:
        simulator = make_simulator("echo:org/model:v2", temperature=0.5)
        assert simulator.name == "org/model:v2" and simulator.temperature == 0.5
        assert make_simulator("echo-lazy:m").name == "m"
    finally:
        BACKENDS.pop("echo", None)
        BACKENDS.pop("echo-lazy", None)


def test_simulator_error_is_a_policy_error():
    assert issubclass(SimulatorError, PolicyError)
    assert run_sync(asyncio.sleep(0, result=7)) == 7


def test_a_background_loop_serves_callers_from_any_thread_or_loop():
    """The loop that API clients and vLLM's asynchronous engine live on (sims.background_loop)."""
    import threading

    from sims.background_loop import BackgroundLoop

    made_on = []
    background = BackgroundLoop("test", setup=lambda: made_on.append(asyncio.get_event_loop()))

    async def where() -> object:
        return asyncio.get_running_loop()

    assert not background.running
    first = background.submit(where).result(timeout=5)
    from_other_loop = asyncio.run(background.wait(where))
    from_thread: list[object] = []
    worker = threading.Thread(target=lambda: from_thread.append(background.submit(where).result(timeout=5)))
    worker.start()
    worker.join()
    assert first is from_other_loop is from_thread[0] is made_on[0], "one loop, set up once, for every caller"
    closed = []

    async def finish() -> None:
        closed.append(True)

    background.close(finish)
    assert closed == [True] and not background.running

    attempts = []

    def broken() -> None:
        attempts.append(1)
        raise RuntimeError("no engine")

    failing = BackgroundLoop("broken", setup=broken)
    with pytest.raises(RuntimeError, match="no engine"):
        failing.submit(where)
    with pytest.raises(RuntimeError, match="setup failed earlier"):
        failing.submit(where)
    assert len(attempts) == 1, "a failed setup (an engine start) is not retried by every caller"
