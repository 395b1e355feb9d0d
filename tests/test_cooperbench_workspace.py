"""The file tools run in the env process: sizes are checked there, never truncated silently."""

from dataclasses import replace
from pathlib import Path

import pytest
from local_data import COOPERBENCH, data_dir, why_skipped

from scope_envs.cooperbench import parallel_env
from scope_envs.cooperbench.sandbox import Limits
from scope_envs.cooperbench.workspace import Workspace
from scope_envs.core.tools import ToolError

DATA = data_dir(COOPERBENCH)
MAX_FILE_BYTES = 8 * 2**20  # what the file tools read or make at most
pytestmark = pytest.mark.skipif(DATA is None, reason=why_skipped(COOPERBENCH))


@pytest.fixture(scope="module")
def evaluator():
    env = parallel_env(data_dir=DATA, pairs=["pallets_jinja_task/task1621:1+2"])
    yield env.evaluators["pallets_jinja_task/task1621"]
    env.close()


@pytest.fixture
def workspace(evaluator, tmp_path):
    built = Workspace(evaluator.source, evaluator.environment, tmp_path, "ws")
    yield built
    built.close()


def put(workspace: Workspace, name: str, data: bytes) -> Path:
    path = workspace.root / name
    path.write_bytes(data)
    workspace.sandbox.adopt(path)
    return path


def test_a_file_over_the_limit_is_refused_not_truncated(workspace):
    path = put(workspace, "big.txt", b"needle\n" + b"x" * MAX_FILE_BYTES)
    size = path.stat().st_size
    with pytest.raises(ToolError, match="limit"):
        workspace.replace_in_file("big.txt", "needle", "pin")
    with pytest.raises(ToolError, match="limit"):
        workspace.read_file("big.txt")
    assert path.stat().st_size == size and path.read_bytes().startswith(b"needle")


def test_replace_all_cannot_blow_a_file_up(workspace):
    path = put(workspace, "small.txt", b"a" * 100_000)
    with pytest.raises(ToolError, match="limit"):
        workspace.replace_in_file("small.txt", "a", "b" * 200, replace_all=True)  # would be 20 MB
    assert path.stat().st_size == 100_000
    assert "replaced 100000" in workspace.replace_in_file("small.txt", "a", "bc", replace_all=True)
    assert path.stat().st_size == 200_000


def test_writes_stop_at_the_workspace_disk_cap(evaluator, tmp_path):
    limits = replace(Limits(), disk_bytes=20 * 2**20)
    workspace = Workspace(evaluator.source, evaluator.environment, tmp_path, "ws", limits=limits)
    content = "y" * (2 * 2**20 - 100)
    for number in range(8):  # 16 MB under a 20 MiB cap
        workspace.write_file(f"data/{number}.txt", content)
    with pytest.raises(ToolError, match="disk-space limit"):
        for number in range(8, 12):
            workspace.write_file(f"data/{number}.txt", content)
    workspace.write_file("data/0.txt", "overwriting a file with something smaller is fine")
    workspace.close()
