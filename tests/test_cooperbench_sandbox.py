"""The sandbox holds: escapes are contained and reported, limits apply, nothing leaks in or out."""

import os
import socket
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from scope_envs.cooperbench.cgroups import RunCgroup, cgroup2_mount, own_cgroup
from scope_envs.cooperbench.sandbox import Limits, Sandbox, probe_isolation

ISOLATION = probe_isolation()
needs_root_isolation = pytest.mark.skipif(
    not (ISOLATION.dedicated_user and ISOLATION.mount_namespace), reason=f"sandbox here: {ISOLATION.describe()}"
)
PYTHON = os.path.realpath(sys.executable)
FAST = Limits(wall_seconds=10, cpu_seconds=5, memory_bytes=1024**3, file_bytes=8 * 1024**2, processes=32)


@pytest.fixture
def sandbox(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    box = Sandbox(root, limits=FAST, readable=(Path(sys.base_prefix), Path(PYTHON).parent.parent))
    box.adopt()
    return box


def python(box: Sandbox, code: str, **limits):
    return box.run([PYTHON, "-c", code], limits=Limits(**{**FAST.__dict__, **limits}))


def test_a_plain_command_runs_with_a_scrubbed_environment(sandbox, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    result = sandbox.shell("echo hello > out.txt && cat out.txt && env")
    assert result.ok and result.output.startswith("hello")
    assert "sk-should-not-leak" not in result.output and "HOME=" not in result.output
    assert (sandbox.root / "out.txt").read_text() == "hello\n"


def test_running_forever_is_killed_at_the_wall_time_limit(sandbox):
    result = sandbox.shell("sleep 1000", limits=Limits(wall_seconds=1.5))
    assert not result.ok and result.limit == "wall_time" and result.seconds < 6


def test_a_busy_loop_is_stopped_by_the_cpu_limit(sandbox):
    result = python(sandbox, "while True: pass", cpu_seconds=1, wall_seconds=20)
    assert not result.ok and result.limit in {"cpu_time", "killed"}


def test_allocating_20_gb_fails_inside_the_sandbox(sandbox):
    result = python(sandbox, "b = bytearray(20 * 2**30)")
    assert not result.ok and result.limit == "memory" and "MemoryError" in result.output


def test_a_file_over_the_size_limit_is_stopped(sandbox):
    result = sandbox.shell("head -c 50000000 /dev/zero > big.bin")
    assert not result.ok and result.limit == "file_size"
    assert (sandbox.root / "big.bin").stat().st_size <= FAST.file_bytes


def test_output_is_capped_head_and_tail(sandbox):
    result = sandbox.shell("seq 1 200000", limits=Limits(output_bytes=2000))
    assert result.ok and result.truncated and len(result.output) < 2200
    assert result.output.startswith("1\n2\n") and result.output.rstrip().endswith("200000")


@needs_root_isolation
def test_a_bounded_fork_bomb_hits_the_process_limit_and_leaves_nothing_behind(sandbox):
    # 300 sleepers against a limit of 32 processes: forks fail, the run is killed at its wall time.
    result = sandbox.shell("for i in $(seq 300); do sleep 60 & done; wait", limits=Limits(wall_seconds=3, processes=32))
    assert not result.ok and result.limit == "processes"
    survivors = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _uid_of(p) == sandbox.uid]
    assert survivors == []


def _uid_of(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None


@needs_root_isolation
def test_background_processes_do_not_outlive_their_command(sandbox):
    result = sandbox.shell("(sleep 300 &); echo started")
    assert result.ok and "started" in result.output
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _uid_of(p) == sandbox.uid]


@needs_root_isolation
def test_writing_outside_the_workspace_is_refused(sandbox, tmp_path):
    outside = tmp_path / "outside.txt"
    result = sandbox.shell(f"echo pwned > {outside} ; echo pwned > /etc/scope-sandbox-test ; echo pwned > ../x")
    assert result.output.count("Permission denied") + result.output.count("No such file") >= 3
    assert not outside.exists() and not Path("/etc/scope-sandbox-test").exists()
    assert not (sandbox.root.parent / "x").exists()


@needs_root_isolation
def test_homes_temp_and_hidden_paths_are_empty_inside(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "tests.patch").write_text("hidden tests")
    root = tmp_path / "ws"
    root.mkdir()
    box = Sandbox(root, limits=FAST, hidden=(secret,))
    box.adopt()
    result = box.shell(f"ls -A {secret} /root /tmp; cat {secret}/tests.patch; touch /tmp/inside")
    assert "hidden tests" not in result.output and "No such file" in result.output
    assert not Path("/tmp/inside").exists()


@pytest.mark.skipif(not ISOLATION.network_namespace, reason="no network namespace on this machine")
def test_a_socket_cannot_reach_the_network(sandbox):
    code = "import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)"
    result = python(sandbox, code)
    assert not result.ok and result.limit == "network"


# ---- whole-run limits and what leaks ----------------------------------------------------------------


def test_memory_is_capped_for_the_whole_run_not_only_per_process(sandbox):
    # Four processes of 400 MiB each: every one under the per-process cap of 1 GiB, together over 1 GiB.
    code = "b = bytearray(400 * 2**20); import time; time.sleep(30)"
    limits = replace(FAST, total_memory_bytes=1024**3, wall_seconds=20)
    result = sandbox.shell(f"for i in 1 2 3 4; do {PYTHON} -c '{code}' & done; wait", limits=limits)
    assert not result.ok and result.limit == "memory" and result.seconds < 15


def test_disk_written_is_capped_across_files(sandbox):
    # Forty files of 4 MB, each under the file-size cap, together far over a 20 MiB disk cap.
    limits = replace(FAST, disk_bytes=20 * 2**20)
    result = sandbox.shell("for i in $(seq 40); do head -c 4000000 /dev/zero > f$i; sleep 0.05; done", limits=limits)
    assert not result.ok and result.limit == "disk" and "disk-space limit" in result.describe()
    written = sum(path.stat().st_size for path in sandbox.root.iterdir())
    assert written < 100 * 10**6


def test_probe_isolation_says_how_the_whole_run_is_capped():
    text = ISOLATION.describe()
    assert ("capped by a cgroup v2" in text) == ISOLATION.cgroup
    assert "whole-run memory polled" in text or ISOLATION.cgroup
    assert "disk written polled" in text and "user namespaces" in text


def test_cgroup_v2_mount_and_path_are_read_from_proc(tmp_path):
    mounts = "cgroup /sys/fs/cgroup/memory cgroup rw 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
    assert cgroup2_mount(mounts) == Path("/sys/fs/cgroup/unified") and cgroup2_mount("") is None
    assert own_cgroup("4:memory:/a\n0::/user.slice/x\n") == "/user.slice/x" and own_cgroup("4:memory:/a\n") is None
    group = RunCgroup.create(tmp_path, 2**30, 64)  # tmp_path stands in for a delegated cgroup directory
    assert [(group.path / name).read_text() for name in ("memory.max", "pids.max")] == [str(2**30), "64"]
    assert group.path.parent == tmp_path and not group.oom_killed()


def test_user_namespaces_cannot_be_created(sandbox):
    if not ISOLATION.seccomp:
        pytest.skip(f"sandbox here: {ISOLATION.describe()}")
    code = "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); print('unshare', libc.unshare(0x10000000))"
    result = python(sandbox, code + "; print(os.strerror(ctypes.get_errno()))")
    assert "unshare -1" in result.output and "Operation not permitted" in result.output
    threads = python(sandbox, "import threading; threading.Thread(target=print, args=('threads work',)).start()")
    assert threads.ok and "threads work" in threads.output


@needs_root_isolation
def test_unix_sockets_under_run_are_out_of_reach(sandbox):
    path = Path("/run") / f"scope-sandbox-test-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen()
    try:
        code = f"import socket; socket.socket(socket.AF_UNIX).connect({str(path)!r}); print('connected')"
        result = python(sandbox, code)
        assert "connected" not in result.output and "FileNotFoundError" in result.output
    finally:
        server.close()
        path.unlink()


@needs_root_isolation
def test_the_parents_command_line_is_not_visible(sandbox):
    own = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    result = sandbox.shell("cat /proc/1/cmdline; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")
    assert own not in result.output and "pytest" not in result.output
