"""CooperBench env on the jinja tasks (the PyPI Jinja2 3.0.3 sdist): tools, episodes, grading."""

import json
from pathlib import Path

import pytest
from local_data import COOPERBENCH, data_dir, why_skipped

from scope_envs.cooperbench import parallel_env, probe_isolation
from scope_envs.cooperbench.scripted import GoldPatchCoder, gold_edits
from scope_envs.core.chat import Message, ToolCall
from scope_envs.testing import check_env

DATA = data_dir(COOPERBENCH)
ISOLATION = probe_isolation()
pytestmark = pytest.mark.skipif(DATA is None, reason=why_skipped(COOPERBENCH))


@pytest.fixture(scope="module")
def env():
    built = parallel_env(data_dir=DATA, tasks=["pallets_jinja_task/task1621"])
    yield built
    built.close()


def call(env, side, name, **args):
    """One tool call of `side`; returns (output text, error or None)."""
    _, _, _, _, infos = env.step({side: Message("assistant", None, tool_calls=(ToolCall.create(name, args),))})
    return infos[side]["messages"][-1]["content"], infos[side]["tool_results"][0]["error"]


def play(env, task_id, agent, user, seed=0):
    _, infos = env.reset(seed=seed, options={"task_id": task_id})
    policies = {"agent": agent, "user": user}
    while env.agents:
        side = infos["agent"]["to_speak"]
        reply = policies[side].respond(infos[side]["messages"], infos[side]["tools"], seed=seed)
        _, rewards, terminated, truncated, infos = env.step({side: reply.to_message()})
    return rewards, terminated, truncated, infos


class IdleCoder(GoldPatchCoder):
    """Changes nothing: finishes at once (its partner's feature alone is then graded)."""

    def reply(self, messages, tools, rng):
        if not any(c.name == "finish" for m in messages for c in m.tool_calls):
            return Message("assistant", None, tool_calls=(ToolCall.create("finish", {}),))
        return "Nothing from me."


def test_items_splits_and_prompts(env):
    assert len(env.items) == 45 and len(env.task_ids("test")) + len(env.task_ids("train")) == 45
    assert set(env.task_ids("test")) <= {item.item_id for item in env.items}
    _, infos = env.reset(seed=3, options={"task_id": "pallets_jinja_task/task1621:1+6"})
    agent_prompt, user_prompt = (infos[s]["messages"][0]["content"] for s in ("agent", "user"))
    assert "Your feature: 1" in agent_prompt and "fallback_searchpath" in agent_prompt
    assert "Your feature: 6" in user_prompt and "fallback_searchpath" not in user_prompt
    assert infos["agent"]["scenario"]["features"] == {"agent": 1, "user": 6}
    assert {t["function"]["name"] for t in infos["user"]["tools"]} == {
        "list_files", "read_file", "write_file", "replace_in_file", "run_command", "finish"
    }  # fmt: skip


def test_file_tools_work_and_refuse_paths_leading_out(env):
    env.reset(seed=0, options={"task_id": "pallets_jinja_task/task1621:1+2"})
    listing, error = call(env, "agent", "list_files", path="src", max_depth=2)
    assert error is None and "src/jinja2/loaders.py" in listing
    text, error = call(env, "agent", "read_file", path="src/jinja2/loaders.py", start_line=1, end_line=3)
    assert error is None and text.splitlines()[0].strip().startswith("1")
    assert call(env, "agent", "write_file", path="notes/plan.txt", content="a\nb\n")[1] is None
    assert call(env, "agent", "replace_in_file", path="notes/plan.txt", old="b", new="c")[1] is None
    assert call(env, "agent", "read_file", path="notes/plan.txt")[0].endswith("c")
    for bad in ("/etc/passwd", "../user/src/jinja2/loaders.py", "src/../../x"):
        _, error = call(env, "agent", "read_file", path=bad)
        assert error and ("absolute" in error or "'..'" in error), bad
    # A symlink to /etc/passwd made by a command is refused by the file tools, for reading and writing.
    assert call(env, "agent", "run_command", command="ln -s /etc/passwd leak && ln -s / root_link")[1] is None
    refused = [
        ("read_file", {"path": "leak"}),
        ("write_file", {"path": "leak", "content": "x"}),
        ("read_file", {"path": "root_link/etc/passwd"}),
        ("list_files", {"path": "root_link"}),
    ]
    for name, args in refused:
        output, error = call(env, "agent", name, **args)
        assert error and "outside the repository" in error and "root:" not in output, name
    assert call(env, "agent", "replace_in_file", path="notes/plan.txt", old="zzz", new="y")[1]
    # A FIFO would block a reader forever; a hard link could reach a file outside: both are refused.
    assert call(env, "agent", "run_command", command="mkfifo pipe && ln notes/plan.txt hard")[1] is None
    for path in ("pipe", "hard"):
        assert "not a regular file" in call(env, "agent", "read_file", path=path)[1]
        assert "not a regular file" in call(env, "agent", "write_file", path=path, content="x")[1]


@pytest.mark.skipif(not ISOLATION.mount_namespace, reason=f"sandbox here: {ISOLATION.describe()}")
def test_escapes_through_run_command_are_contained_and_reported_as_tool_errors(env):
    env.reset(seed=0, options={"task_id": "pallets_jinja_task/task1621:1+2"})
    attempts = {
        "write outside": ("echo x > /etc/scope-escape || echo x > ../user/pwned.txt", "Permission denied"),
        "read the partner": ("cat ../user/src/jinja2/loaders.py", "No such file"),  # not even visible
        "read the hidden tests": (f"cat {DATA}/pallets_jinja_task/task1621/feature1/tests.patch", "No such file"),
        "allocate 20 GB": ("python -c 'bytearray(20 * 2**30)'", "memory limit"),
        "run forever": ("sleep 1000", "wall-time limit"),
        "fork bomb (bounded)": ("for i in $(seq 300); do sleep 60 & done; wait", "process-count limit"),
        "open a socket": ("python -c \"import socket; socket.create_connection(('1.1.1.1', 80))\"", "network"),
    }  # fmt: skip
    for label, (command, expected) in attempts.items():
        output, error = call(env, "agent", "run_command", command=command, timeout_seconds=3)
        assert error and expected in error, (label, error)
        assert output.startswith("Error: command failed"), label
    assert not Path("/etc/scope-escape").exists()
    assert not (env.workspaces["user"].root / "pwned.txt").exists()
    output, error = call(env, "agent", "run_command", command="env; echo HOME=${HOME:-none}")
    assert error is None and "HOME=none" in output and "API_KEY" not in output


def test_gold_pair_episode_terminates_with_both_suites_passing(env):
    rewards, terminated, truncated, infos = play(env, "pallets_jinja_task/task1621:1+2", GoldPatchCoder(DATA),
                                                 GoldPatchCoder(DATA))  # fmt: skip
    assert terminated == {"agent": True, "user": True} and not any(truncated.values())
    assert infos["agent"]["end_reason"] == "both_finished" and rewards == {"agent": 1.0, "user": 1.0}
    info = infos["user"]["reward_info"]
    assert (
        info["merge"]["status"] == "clean" and info["both_passed"] and info["finished"] == {"agent": True, "user": True}
    )
    assert info["suites"]["1"]["tests_passed"] > 0 and info["suites"]["2"]["passed"]
    assert env.last_evaluation is not None and "loaders.py" in env.last_evaluation.extra["patches"]["agent"]
    json.dumps(infos)  # the breakdown is plain data


def test_one_feature_alone_passes_its_tests_and_the_other_fails_on_base(env):
    rewards, _, _, infos = play(env, "pallets_jinja_task/task1621:1+3", GoldPatchCoder(DATA), IdleCoder(DATA))
    suites = infos["agent"]["reward_info"]["suites"]
    assert suites["1"]["passed"] and not suites["3"]["passed"] and suites["3"]["tests_failed"] > 0
    assert rewards == {"agent": 0.0, "user": 0.0}


def test_partial_credit_and_finished_sides_are_frozen():
    env = parallel_env(data_dir=DATA, pairs=["pallets_jinja_task/task1621:1+3"], partial_credit=True)
    try:
        env.reset(seed=0)
        _, error = call(env, "agent", "finish")
        assert error is None
        _, error = call(env, "agent", "write_file", path="x.txt", content="x")
        assert error and "frozen" in error
        assert call(env, "agent", "finish")[1] == "you have already finished"
        rewards, *_ = play(env, "pallets_jinja_task/task1621:1+3", GoldPatchCoder(DATA), IdleCoder(DATA))
        assert rewards == {"agent": 0.5, "user": 0.0}
    finally:
        env.close()


def test_limits_truncate(env):
    env.max_wall_seconds, saved = 0.0, env.max_wall_seconds
    try:
        env.reset(seed=0, options={"task_id": "pallets_jinja_task/task1621:1+2"})
        _, _, terminated, truncated, infos = env.step({"agent": "hello"})
        assert truncated["agent"] and not terminated["agent"] and infos["agent"]["end_reason"] == "wall_time"
        assert infos["agent"]["event"] == "message"
    finally:
        env.max_wall_seconds = saved


def test_conformance():
    def factory():
        return parallel_env(
            data_dir=DATA, pairs=["pallets_jinja_task/task1621:1+2", "pallets_jinja_task/task1621:2+9"], max_turns=6
        )

    check_env(factory, simulator=GoldPatchCoder(DATA), agent=GoldPatchCoder(DATA), episodes=2)


def test_gold_edits_cover_every_hunk():
    env_data = parallel_env(data_dir=DATA, tasks=["pallets_jinja_task/task1465"])
    task = env_data.items[0].task
    for feature in task.features.values():
        edits = gold_edits(feature.patch)
        assert edits and all(name == "replace_in_file" for name, _ in edits)
    env_data.close()


# ---- the gold sweeps (slow): every feature, every pair ------------------------------------------------


JINJA_FEATURE_TASKS = ("pallets_jinja_task/task1465", "pallets_jinja_task/task1559", "pallets_jinja_task/task1621")


@pytest.mark.slow
@pytest.mark.parametrize("task", JINJA_FEATURE_TASKS)
def test_every_gold_feature_passes_its_tests_and_base_plus_tests_fails(task):
    env = parallel_env(data_dir=DATA, tasks=[task])
    try:
        features = sorted({f for item in env.items for f in (item.first, item.second)})
        evaluator = env.evaluators[task]
        passing, failing_on_base = [], []
        for feature in features:
            partner = next(f for f in features if f != feature)
            first, second = sorted((feature, partner))
            gold, idle = GoldPatchCoder(DATA), IdleCoder(DATA)
            agent, user = (gold, idle) if first == feature else (idle, gold)
            _, _, _, infos = play(env, f"{task}:{first}+{second}", agent, user)
            passing += [feature] * infos["agent"]["reward_info"]["suites"][str(feature)]["passed"]
            failing_on_base += [feature] * (not evaluator.run_suite("", feature).passed)
        print(f"\n{task}: gold passes {len(passing)}/{len(features)}; base+tests fails {len(failing_on_base)}")
        assert passing == features
        # 1621: one feature's tests pass on the base (as upstream); 1559: feature 3's already pass on the sdist.
        expected_base_failures = {"pallets_jinja_task/task1621": 9, "pallets_jinja_task/task1559": 6}.get(task, 10)
        assert len(failing_on_base) == expected_base_failures
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "expected"), [("pallets_jinja_task/task1621", 36), ("pallets_jinja_task/task1465", 3)]
)
def test_gold_pairs_merged_match_the_published_figures(task, expected):
    import time

    env = parallel_env(data_dir=DATA, tasks=[task])
    try:
        both, start = 0, time.monotonic()
        for item in env.items:
            rewards, terminated, _, _ = play(env, item.item_id, GoldPatchCoder(DATA), GoldPatchCoder(DATA))
            assert terminated["agent"]
            both += rewards["agent"] == 1.0
        seconds = (time.monotonic() - start) / len(env.items)
        print(f"\n{task}: {both}/{len(env.items)} gold pairs pass both suites; {seconds:.1f} s per pair")
        assert (both, len(env.items)) == (expected, 45)
    finally:
        env.close()
