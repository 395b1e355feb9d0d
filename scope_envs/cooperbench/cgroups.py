"""Whole-run caps with cgroup v2: memory (swap off) and process count of everything a run starts.

Each run gets a child cgroup of a *delegated* parent: the directory named by
`$SCOPE_SANDBOX_CGROUP`, else this process's own cgroup when its `cgroup.subtree_control` has (or
can be given) the memory and pids controllers. A cgroup that holds processes cannot hand
controllers to children, so on most machines the parent must be prepared once, as root:
`mkdir /sys/fs/cgroup/scope && echo +memory +pids > /sys/fs/cgroup/cgroup.subtree_control`,
then `export SCOPE_SANDBOX_CGROUP=/sys/fs/cgroup/scope`. Where none is usable (cgroup v1, no
delegation) `delegated_parent()` is None and the sandbox polls instead (see sandbox.py).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ENV_VAR = "SCOPE_SANDBOX_CGROUP"
CONTROLLERS = ("memory", "pids")
_counter = itertools.count()


def cgroup2_mount(mounts: str) -> Path | None:
    """The first cgroup2 mount point in a `/proc/self/mounts` text."""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def own_cgroup(cgroups: str) -> str | None:
    """This process's cgroup v2 path in a `/proc/self/cgroup` text (the `0::` line)."""
    for line in cgroups.splitlines():
        if line.startswith("0::"):
            return line[3:].strip()
    return None


@dataclass
class RunCgroup:
    """One run's cgroup: the child joins it before it execs (`join`), `close` kills and removes it."""

    path: Path

    @classmethod
    def create(cls, parent: Path, memory_bytes: int, processes: int) -> RunCgroup:
        path = parent / f"scope-run-{os.getpid()}-{next(_counter)}"
        path.mkdir()
        try:
            (path / "memory.max").write_text(str(memory_bytes))
            if (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
            (path / "pids.max").write_text(str(processes))
        except OSError:
            cls(path).close()
            raise
        return cls(path)

    @property
    def procs(self) -> bytes:
        return str(self.path / "cgroup.procs").encode()

    def join(self) -> None:  # pragma: no cover - runs in the child between fork and exec
        fd = os.open(self.procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def oom_killed(self) -> bool:
        try:
            events = (self.path / "memory.events").read_text().split()
        except OSError:
            return False
        counts = dict(zip(events[::2], events[1::2], strict=False))
        return int(counts.get("oom_kill", "0")) > 0

    def close(self) -> None:
        """Kills what is left in the cgroup and removes it (retrying while the processes die)."""
        kill = self.path / "cgroup.kill"
        deadline = time.monotonic() + 5.0
        while True:
            try:
                if kill.exists():
                    kill.write_text("1")
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)


@lru_cache(maxsize=1)
def delegated_parent() -> Path | None:
    """A cgroup v2 directory in which runs get their own capped cgroup, or None."""
    candidates = []
    if os.environ.get(ENV_VAR):
        candidates.append(Path(os.environ[ENV_VAR]))
    try:
        mount = cgroup2_mount(Path("/proc/self/mounts").read_text())
        own = own_cgroup(Path("/proc/self/cgroup").read_text())
    except OSError:
        mount = own = None
    if mount is not None and own is not None:
        candidates.append(mount / own.lstrip("/"))
    return next((path for path in candidates if _usable(path)), None)


def _usable(parent: Path) -> bool:
    """Whether both controllers reach `parent`'s children and a child process can be moved into one."""
    try:
        if not set(CONTROLLERS) <= set((parent / "cgroup.controllers").read_text().split()):
            return False
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        missing = [name for name in CONTROLLERS if name not in enabled]
        if missing:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{name}" for name in missing))
        trial = RunCgroup.create(parent, 64 * 1024**2, 8)
        try:
            subprocess.run(["/bin/sh", "-c", "exit 0"], preexec_fn=trial.join, check=True, timeout=10)
        finally:
            trial.close()
    except (OSError, subprocess.SubprocessError):
        return False
    return True
