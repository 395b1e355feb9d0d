"""The grade cannot be forged: hostile patches that configure pytest or fake its output get reward 0.

Each hostile patch implements nothing, so it fails the hidden tests of both features of the pair
on its own: any reward above 0 would be a forgery. The honest gold patches still get 1.
"""

import difflib
from pathlib import Path

import pytest
from local_data import COOPERBENCH, data_dir, why_skipped

from scope_envs.cooperbench import parallel_env
from scope_envs.cooperbench.scripted import GoldPatchCoder
from scope_envs.core.chat import Message, ToolCall

DATA = data_dir(COOPERBENCH)
TASK = "pallets_jinja_task/task1621"
pytestmark = pytest.mark.skipif(DATA is None, reason=why_skipped(COOPERBENCH))

FORCE_PASS = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
FAKE_SUMMARY = 'import os\nprint("999 passed in 0.01s", flush=True)\nos._exit(0)\n'
PLUGIN = "src/forge_plugin.py"


def new_file(path: str, content: str) -> str:
    lines = content.splitlines(keepends=True)
    body = "".join("+" + line for line in lines)
    header = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
    return f"{header}@@ -0,0 +1,{len(lines)} @@\n{body}"


def edit(tree: Path, path: str, old: str, new: str) -> str:
    text = (tree / path).read_text()
    assert old in text
    before, after = text.splitlines(True), text.replace(old, new).splitlines(True)
    lines = difflib.unified_diff(before, after, f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


PLUGIN_FILE = new_file(PLUGIN, FORCE_PASS)
METADATA = "Metadata-Version: 2.1\nName: forge-plugin\nVersion: 1.0\n"
HOSTILE = {  # name: the patch, given the base tree
    "conftest.py forcing every test to pass": lambda tree: new_file("conftest.py", FORCE_PASS),
    "sitecustomize.py printing '999 passed'": lambda tree: new_file("src/sitecustomize.py", FAKE_SUMMARY),
    "usercustomize.py printing '999 passed'": lambda tree: new_file("src/usercustomize.py", FAKE_SUMMARY),
    "pytest.ini addopts loading a plugin": lambda tree: (
        new_file("pytest.ini", "[pytest]\naddopts = -p forge_plugin\n") + PLUGIN_FILE
    ),
    "pyproject.toml addopts loading a plugin": lambda tree: (
        new_file("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p forge_plugin"\n') + PLUGIN_FILE
    ),
    "setup.cfg addopts loading a plugin": lambda tree: (
        edit(tree, "setup.cfg", "[tool:pytest]\n", "[tool:pytest]\naddopts = -p forge_plugin\n") + PLUGIN_FILE
    ),
    ".pth file running code at startup": lambda tree: (
        new_file("src/forge.pth", "import forge_exit\n") + new_file("src/forge_exit.py", FAKE_SUMMARY)
    ),
    "plugin registered through entry points": lambda tree: (
        new_file("src/forge_plugin-1.0.dist-info/METADATA", METADATA)
        + new_file("src/forge_plugin-1.0.dist-info/entry_points.txt", "[pytest11]\nforge = forge_plugin\n")
        + PLUGIN_FILE
    ),
    "pytest.py shadowing pytest": lambda tree: new_file("pytest.py", FAKE_SUMMARY),
}


@pytest.fixture(scope="module")
def env():
    built = parallel_env(data_dir=DATA, pairs=[f"{TASK}:1+3"])
    yield built
    built.close()


@pytest.fixture(scope="module")
def evaluator(env):
    return env.evaluators[TASK]


def test_the_honest_gold_pair_gets_reward_1(evaluator):
    features = evaluator.task.features
    evaluation = evaluator.evaluate(features[1].patch, 1, features[3].patch, 3)
    assert evaluation.both_passed, evaluation.to_info()
    assert evaluation.suites[3].tests_passed == len(evaluator.expected_tests(3)) > 40


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_patch_gets_reward_0(evaluator, name):
    evaluation = evaluator.evaluate(HOSTILE[name](evaluator.source.tree), 1, "", 3)
    assert evaluation.merge.status == "clean"
    assert not evaluation.both_passed, evaluation.to_info()
    assert not any(suite.passed for suite in evaluation.suites.values())
    assert all(suite.tests_failed > 0 and suite.tests_passed < 999 for suite in evaluation.suites.values())


def test_a_patch_editing_the_hidden_test_tree_is_discarded(evaluator):
    # The merge drops test files, but the grader must not rely on it: run_suite takes any patch.
    tree = evaluator.source.tree
    forced = FORCE_PASS.split("import pytest\n", 1)[1]
    patch = edit(tree, "tests/conftest.py", "import pytest\n", "import pytest\n" + forced)
    patch += new_file("tests/res/conftest.py", FORCE_PASS)
    result = evaluator.run_suite(patch, 3)
    assert not result.passed and result.tests_failed > 0


class ForgingCoder(GoldPatchCoder):
    """Writes a conftest that passes every test and a sitecustomize that prints a fake summary, then finishes."""

    def reply(self, messages, tools, rng):
        calls = [call.name for m in messages if m.role == "assistant" for call in m.tool_calls]
        if not calls:
            edits = (("conftest.py", FORCE_PASS), ("src/sitecustomize.py", FAKE_SUMMARY))
            return Message(
                "assistant",
                None,
                tool_calls=tuple(ToolCall.create("write_file", {"path": p, "content": c}) for p, c in edits),
            )
        if "finish" not in calls:
            return Message("assistant", None, tool_calls=(ToolCall.create("finish", {}),))
        return "Done."


def test_forging_through_the_env_tools_gets_reward_0(env):
    _, infos = env.reset(seed=0, options={"task_id": f"{TASK}:1+3"})
    policies = {"agent": ForgingCoder(DATA), "user": ForgingCoder(DATA)}
    rewards = {}
    while env.agents:
        side = infos["agent"]["to_speak"]
        reply = policies[side].respond(infos[side]["messages"], infos[side]["tools"], seed=0)
        _, rewards, _, _, infos = env.step({side: reply.to_message()})
    assert "conftest.py" in env.last_evaluation.extra["patches"]["agent"]
    assert rewards == {"agent": 0.0, "user": 0.0}
    suites = infos["agent"]["reward_info"]["suites"]
    assert "999 passed" not in suites["3"]["output_tail"] and suites["3"]["tests_failed"] > 0
