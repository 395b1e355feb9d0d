"""Confined subprocesses: every command an agent runs, and every test run, goes through `Sandbox.run`.

What confines a run, from the strongest setting down to what an unprivileged user gets
(`probe_isolation()` says which applies on this machine; docs/security.md has the threat model):

* **limits** (always): wall time (the process group is killed), CPU seconds, address space
  per process, size of any file written, open files and core dumps via `setrlimit` in the
  child; output is captured through a pipe and capped (head and tail kept).
* **whole-run limits** (always): memory and process count of everything the run starts, by a
  cgroup v2 where one is delegated (`cgroups.py`), else by polling the run's resident memory
  (with the per-process cap times the process count as the bound between polls); the bytes the
  sandbox's writable directories hold beyond their size at its first run, polled.
* **a scrubbed environment** (always): only `PATH`, locale, `TMPDIR` and what the caller passes;
  no `HOME`, no API keys, nothing else of the parent's environment.
* **no new user namespaces** (Linux on x86-64 and arm64): a seccomp filter (`seccomp.py`).
* **a dedicated user** (root only): the child drops to a user id of its own (one per
  workspace), so it cannot write outside the files that user owns, cannot signal or read the
  parent's processes, and `RLIMIT_NPROC` (which root ignores) caps its processes; leftovers
  (background processes) are killed after every run.
* **new namespaces** (root only): a network namespace with no interface up (no network at all),
  a PID namespace whose `/proc` shows the sandbox user only its own processes, and a mount
  namespace in which home directories, `/run` (the services' UNIX sockets), the temporary
  directories and the paths given in `hidden` (the dataset with its hidden tests) are covered
  by empty tmpfs mounts (`confine.py`); only the paths in `readable` (the interpreter, the test
  environment), in `writable` and the workspace itself are bound back in.
"""

from __future__ import annotations

import itertools
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from scope_envs.cooperbench import cgroups
from scope_envs.cooperbench.confine import (
    MS_PRIVATE,
    MS_REC,
    NAMESPACES,
    PR_SET_NO_NEW_PRIVS,
    MountPlan,
    child_setup,
    libc,
)
from scope_envs.cooperbench.seccomp import UserNamespaceFilter
from scope_envs.cooperbench.usage import Watch, disk_bytes

SANDBOX_UID_BASE = 3_000_000_000  # far above any real account and the usual subordinate-id ranges
SANDBOX_UID_SPAN = 1_000_000_000
_uid_counter = itertools.count()


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run.

    `memory_bytes` caps each process's address space (`RLIMIT_AS`), `total_memory_bytes` the
    memory of the whole run; `disk_bytes` is how much the sandbox's writable directories may
    grow beyond their size when it first ran (over all its runs, not per run).
    """

    wall_seconds: float = 60.0
    cpu_seconds: int = 60
    memory_bytes: int = 2 * 1024**3
    file_bytes: int = 64 * 1024**2
    processes: int = 64
    open_files: int = 256
    output_bytes: int = 32 * 1024
    total_memory_bytes: int = 4 * 1024**3
    disk_bytes: int = 1024**3

    def with_wall(self, seconds: float) -> Limits:
        seconds = max(1.0, seconds)
        return replace(self, wall_seconds=seconds, cpu_seconds=max(1, min(self.cpu_seconds, int(seconds) + 1)))


@dataclass(frozen=True)
class Isolation:
    """What confinement this machine allows beyond the limits and the scrubbed environment."""

    dedicated_user: bool
    network_namespace: bool
    mount_namespace: bool
    cgroup: bool = False  # a delegated cgroup v2 caps each run's memory and processes as a whole
    seccomp: bool = False  # the filter refusing new user namespaces installs

    def describe(self) -> str:
        parts = ["rlimits", "scrubbed environment"]
        parts.append("dedicated user id" if self.dedicated_user else "same user as the caller (not root)")
        parts.append("no network (new network namespace)" if self.network_namespace else "network NOT isolated")
        parts.append(
            "private /tmp, hidden homes, /run and dataset, /proc of its own processes (mount and PID namespaces)"
            if self.mount_namespace
            else "filesystem and processes NOT hidden (no mount namespace)"
        )
        parts.append(
            "whole-run memory and processes capped by a cgroup v2"
            if self.cgroup
            else "no cgroup v2: whole-run memory polled (bounded between polls by the per-process cap times the"
            " process count)"
        )
        parts.append("disk written polled")
        parts.append("new user namespaces refused (seccomp)" if self.seccomp else "user namespaces NOT blocked")
        return "; ".join(parts)


@dataclass
class RunResult:
    """A finished run. `limit` names the limit that stopped it, if one did."""

    returncode: int
    output: str
    seconds: float
    truncated: bool = False
    limit: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.limit is None

    def describe(self) -> str:
        """A one-line status for a tool result."""
        if self.limit is not None:
            return f"stopped: {LIMIT_MESSAGES[self.limit]}"
        if self.returncode < 0:
            return f"killed by signal {signal.Signals(-self.returncode).name}"
        return f"exit status {self.returncode}"


LIMIT_MESSAGES = {
    "wall_time": "the wall-time limit was reached and the command was killed",
    "cpu_time": "the CPU-time limit was reached",
    "file_size": "a file exceeded the file-size limit",
    "memory": "the memory limit was exceeded",
    "processes": "the process-count limit was reached",
    "network": "network access is not available in the sandbox",
    "killed": "the command was killed by the system (CPU or memory limit)",
    "disk": "the disk-space limit of the workspace was reached (delete files to go on)",
}
_DIAGNOSES = (
    ("memory", re.compile(r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory", re.IGNORECASE)),
    ("processes", re.compile(r"fork: (retry: )?Resource temporarily unavailable|BlockingIOError: \[Errno 11\]")),
    (
        "network",
        re.compile(r"Network is unreachable|Temporary failure in name resolution|Name or service not known"),
    ),
)


class SandboxError(RuntimeError):
    """The sandbox could not start a run (for example a missing executable)."""


@lru_cache(maxsize=1)
def probe_isolation() -> Isolation:
    """Tries each mechanism once per process: root with mount and network namespaces gets all."""
    if not sys.platform.startswith("linux"):
        return Isolation(False, False, False)
    seccomp = UserNamespaceFilter(libc()).available and _probe(_install_seccomp)
    cgroup = cgroups.delegated_parent() is not None
    if os.geteuid() != 0:
        return Isolation(False, False, False, cgroup, seccomp)
    c = libc()

    def enter() -> None:
        if c.unshare(NAMESPACES) != 0 or c.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError("entering the namespaces failed")

    namespaces = _probe(enter)
    return Isolation(True, namespaces, namespaces, cgroup, seccomp)


def _install_seccomp() -> None:
    libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    UserNamespaceFilter(libc()).install()


def _probe(preexec: Callable[[], None]) -> bool:
    """Whether a child that runs `preexec` before its exec starts and exits cleanly."""
    try:
        subprocess.run(["/bin/sh", "-c", "exit 0"], preexec_fn=preexec, check=True, timeout=10)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def new_sandbox_uid() -> int:
    """A user id no account or other sandbox of this process uses."""
    return SANDBOX_UID_BASE + (os.getpid() * 4096 + next(_uid_counter)) % SANDBOX_UID_SPAN


@dataclass
class Sandbox:
    """Runs commands confined to `root`; see the module docstring.

    `readable`: paths the command needs that may lie under covered directories (bound back
    read-only); `writable`: more paths it may write besides `root` (bound back read-write);
    `hidden`: paths covered with an empty tmpfs (the dataset, other workspaces). `uid` is the
    dedicated user (root only); the caller makes it own `root` and the `writable` paths.
    """

    root: Path
    limits: Limits = field(default_factory=Limits)
    readable: Sequence[Path] = ()
    hidden: Sequence[Path] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    path_prefix: Sequence[str] = ()
    uid: int | None = None
    isolation: Isolation = field(default_factory=probe_isolation)
    writable: Sequence[Path] = ()

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if self.uid is None and self.isolation.dedicated_user:
            self.uid = new_sandbox_uid()
        if not self.isolation.dedicated_user:
            self.uid = None
        self._disk_baseline: int | None = None

    # ---- ownership -------------------------------------------------------------------------------

    def adopt(self, path: Path | None = None) -> None:
        """Makes the sandbox user own `path` (default: the whole root), recursively."""
        if self.uid is None:
            return
        target = Path(path) if path is not None else self.root
        os.chown(target, self.uid, self.uid, follow_symlinks=False)
        if target.is_dir() and not target.is_symlink() and shutil.which("chown"):
            subprocess.run(["chown", "-R", "-h", f"{self.uid}:{self.uid}", "--", str(target)], check=True)
        elif target.is_dir() and not target.is_symlink():
            for directory, dirnames, filenames in os.walk(target):
                for name in itertools.chain(dirnames, filenames):
                    os.chown(os.path.join(directory, name), self.uid, self.uid, follow_symlinks=False)

    # ---- disk ------------------------------------------------------------------------------------

    def disk_paths(self) -> list[Path]:
        """The directories the sandbox writes to, whose growth `Limits.disk_bytes` caps."""
        paths = [self.root, *(Path(p) for p in self.writable)]
        if not self.isolation.mount_namespace:
            paths.append(self._private_tmp())
        return paths

    def disk_cap(self, limits: Limits | None = None) -> int:
        """The bytes the writable directories may hold: their size at the first call plus `disk_bytes`."""
        if self._disk_baseline is None:
            self._disk_baseline = disk_bytes(self.disk_paths())
        return self._disk_baseline + (limits or self.limits).disk_bytes

    def disk_room(self) -> int:
        """Bytes the sandbox may still add to its writable directories (negative: over the cap)."""
        cap = self.disk_cap()
        return cap - disk_bytes(self.disk_paths())

    # ---- running -----------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, limits: Limits | None = None, cwd: Path | None = None) -> RunResult:
        """Runs `argv` (no shell unless the caller asks for one) and returns its capped output."""
        limits = limits or self.limits
        workdir = Path(cwd).resolve() if cwd is not None else self.root
        if workdir != self.root and self.root not in workdir.parents:
            raise SandboxError(f"the working directory {workdir} is outside the sandbox root {self.root}")
        environment = self._environment()
        cgroup = self._cgroup(limits)
        watch = Watch(
            memory_bytes=None if cgroup is not None else limits.total_memory_bytes,
            uid=self.uid,
            disk_paths=self.disk_paths(),
            disk_cap=self.disk_cap(limits),
        )
        start = time.monotonic()
        try:
            process = subprocess.Popen(  # preexec_fn: the child confines itself (confine.py)
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env=environment,
                preexec_fn=self._preexec(limits, workdir, cgroup),
                start_new_session=True,
                close_fds=True,
            )
        except (OSError, subprocess.SubprocessError) as error:
            if cgroup is not None:
                cgroup.close()
            raise SandboxError(f"could not start {argv[0]!r}: {error}") from error
        watch.session = process.pid
        capture = _Capture(limits.output_bytes)
        try:
            timed_out, watched = self._pump(process, capture, start + limits.wall_seconds, watch)
            returncode = process.wait()
        finally:
            out_of_memory = cgroup is not None and cgroup.oom_killed()
            if cgroup is not None:
                cgroup.close()
        seconds = time.monotonic() - start
        output = capture.text()
        limit = watched or ("memory" if out_of_memory and not timed_out else None)
        return RunResult(
            returncode, output, seconds, capture.truncated, limit or _diagnose(returncode, output, timed_out)
        )

    def shell(self, command: str, *, limits: Limits | None = None) -> RunResult:
        return self.run(["/bin/bash", "-c", command], limits=limits)

    def _cgroup(self, limits: Limits) -> cgroups.RunCgroup | None:
        parent = cgroups.delegated_parent() if self.isolation.cgroup else None
        if parent is None:
            return None
        try:
            return cgroups.RunCgroup.create(parent, limits.total_memory_bytes, limits.processes + 2)
        except OSError as error:
            raise SandboxError(f"could not create the run's cgroup under {parent}: {error}") from error

    def _pump(
        self, process: subprocess.Popen[bytes], capture: _Capture, deadline: float, watch: Watch
    ) -> tuple[bool, str | None]:
        """Reads output until the process and everything holding its output has ended; kills on a limit.

        Returns whether the wall time ran out and the whole-run limit the watch saw exceeded, if any.
        """
        assert process.stdout is not None
        fd = process.stdout.fileno()
        os.set_blocking(fd, False)
        selector = selectors.DefaultSelector()
        selector.register(fd, selectors.EVENT_READ)
        timed_out, watched, eof, drain_until = False, None, False, None
        try:
            while not eof:
                now = time.monotonic()
                if drain_until is None and not timed_out and now >= deadline:
                    timed_out = True
                if drain_until is None and not timed_out and process.poll() is None:
                    watched = watch.check(now)
                if drain_until is None and (timed_out or watched or process.poll() is not None):
                    self._kill(process)  # background processes left behind share the pipe
                    drain_until = now + 2.0
                if drain_until is not None and now >= drain_until:
                    break
                limit = deadline if drain_until is None else drain_until
                for _ in selector.select(timeout=max(0.0, min(watch.interval, limit - now))):
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        eof = True
                        break
                    capture.add(chunk)
        finally:
            selector.close()
            process.stdout.close()
            self._kill(process)
        return timed_out, watched

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        """Kills the run's process group and, with a dedicated user, every process of that user."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.uid is not None:
            kill_all_of_user(self.uid)

    def _environment(self) -> dict[str, str]:
        path = [*self.path_prefix, "/usr/local/bin", "/usr/bin", "/bin"]
        environment = {
            "PATH": os.pathsep.join(path),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": "/tmp" if self.isolation.mount_namespace else str(self._private_tmp()),
        }
        environment.update(self.env)
        return environment

    def _private_tmp(self) -> Path:
        tmp = self.root.parent / f".{self.root.name}-tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        if self.uid is not None:
            os.chown(tmp, self.uid, self.uid)
        return tmp

    def _preexec(self, limits: Limits, workdir: Path, cgroup: cgroups.RunCgroup | None) -> Callable[[], None]:
        """The function the child runs between fork and exec (confine.py); computed here, in the parent."""
        keep = [(str(Path(p).resolve()), False) for p in self.readable if Path(p).exists()]
        keep += [(str(Path(p).resolve()), True) for p in self.writable if Path(p).exists()]
        keep.append((str(self.root), True))
        plan = MountPlan.build([str(Path(p).resolve()) for p in self.hidden if Path(p).is_dir()], keep)
        processes = limits.processes if self.uid is not None else _own_process_count() + limits.processes
        rlimits = [
            (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),
            (resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
            (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
            (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_NPROC, processes, processes),
        ]
        return child_setup(
            namespaces=self.isolation.mount_namespace,
            plan=plan,
            workdir=str(workdir),
            rlimits=rlimits,
            uid=self.uid,
            cgroup=cgroup,
            seccomp=UserNamespaceFilter(libc()) if self.isolation.seccomp else None,
        )


def kill_all_of_user(uid: int) -> None:
    """SIGKILLs every process of `uid` from a forked child that becomes that user (root only)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only makes system calls and exits
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _own_process_count() -> int:
    uid = os.getuid()
    count = 0
    for entry in Path("/proc").iterdir() if os.path.isdir("/proc") else ():
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                pass
    return count


def _diagnose(returncode: int, output: str, timed_out: bool) -> str | None:
    if timed_out:
        return "processes" if _DIAGNOSES[1][1].search(output[-4000:]) else "wall_time"
    if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU) or "CPU time limit exceeded" in output[-4000:]:
        return "cpu_time"
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ) or "File size limit exceeded" in output[-4000:]:
        return "file_size"
    if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return "killed"
    if returncode != 0:
        tail = output[-4000:]
        for limit, pattern in _DIAGNOSES:
            if pattern.search(tail):
                return limit
    return None


class _Capture:
    """Keeps the first and last `limit / 2` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - self.half
            if excess > 0:
                self.dropped += excess
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output omitted ...]\n{tail}"
        return head + tail


def temporary_root(prefix: str, parent: Path | None = None) -> Path:
    """A fresh directory only its owner can enter (workspaces and evaluation trees live in one)."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
