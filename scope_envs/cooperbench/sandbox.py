"""Confined subprocesses: every command an agent runs, and every test run, goes through `Sandbox.run`.

What confines a run, from the strongest setting down to what an unprivileged user gets
(`probe_isolation()` says which applies on this machine):

* **limits** (always): wall time (the process group is killed), CPU seconds, address space,
  size of any file written, open files and core dumps via `setrlimit` in the child; output
  is captured through a pipe and capped (head and tail kept).
* **a scrubbed environment** (always): only `PATH`, locale, `TMPDIR` and what the caller passes;
  no `HOME`, no API keys, nothing else of the parent's environment.
* **a dedicated user** (root only): the child drops to a user id of its own (one per
  workspace), so it cannot write outside the files that user owns, cannot signal or read the
  parent's processes, and `RLIMIT_NPROC` (which root ignores) caps its processes; leftovers
  (background processes) are killed after every run.
* **new namespaces** (root only): a network namespace with no interface up (no network at all)
  and a mount namespace in which home directories, world-writable temporary directories and
  the paths given in `hidden` (the dataset with its hidden tests) are covered by empty tmpfs
  mounts; only the paths in `readable` (the interpreter, the test environment) and the
  workspace itself are bound back in.
"""

from __future__ import annotations

import ctypes
import ctypes.util
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
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MS_NOEXEC = 8
PR_SET_NO_NEW_PRIVS = 38

COVERED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
COVERED_HOMES = ("/root", "/home")
SANDBOX_UID_BASE = 3_000_000_000  # far above any real account and the usual subordinate-id ranges
SANDBOX_UID_SPAN = 1_000_000_000
_uid_counter = itertools.count()


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run. Memory is address space (`RLIMIT_AS`)."""

    wall_seconds: float = 60.0
    cpu_seconds: int = 60
    memory_bytes: int = 2 * 1024**3
    file_bytes: int = 64 * 1024**2
    processes: int = 64
    open_files: int = 256
    output_bytes: int = 32 * 1024

    def with_wall(self, seconds: float) -> Limits:
        seconds = max(1.0, seconds)
        return Limits(
            seconds,
            max(1, min(self.cpu_seconds, int(seconds) + 1)),
            self.memory_bytes,
            self.file_bytes,
            self.processes,
            self.open_files,
            self.output_bytes,
        )


@dataclass(frozen=True)
class Isolation:
    """What confinement this machine allows beyond the limits and the scrubbed environment."""

    dedicated_user: bool
    network_namespace: bool
    mount_namespace: bool

    def describe(self) -> str:
        parts = ["rlimits", "scrubbed environment"]
        parts.append("dedicated user id" if self.dedicated_user else "same user as the caller (not root)")
        parts.append("no network (new network namespace)" if self.network_namespace else "network NOT isolated")
        parts.append(
            "private /tmp and hidden homes (mount namespace)"
            if self.mount_namespace
            else "filesystem NOT hidden (no mount namespace)"
        )
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


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


@lru_cache(maxsize=1)
def probe_isolation() -> Isolation:
    """Tries the namespaces once per process: root with mount and network namespaces gets all."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return Isolation(False, False, False)
    libc = _libc()

    def enter() -> None:
        if libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "unshare failed")
        if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "mount failed")

    try:
        subprocess.run(["/bin/sh", "-c", "exit 0"], preexec_fn=enter, check=True, timeout=10)
    except (subprocess.SubprocessError, OSError):
        return Isolation(True, False, False)
    return Isolation(True, True, True)


def new_sandbox_uid() -> int:
    """A user id no account or other sandbox of this process uses."""
    return SANDBOX_UID_BASE + (os.getpid() * 4096 + next(_uid_counter)) % SANDBOX_UID_SPAN


@dataclass
class Sandbox:
    """Runs commands confined to `root`; see the module docstring.

    `readable`: paths the command needs that may lie under covered directories (bound back
    read-only); `hidden`: paths covered with an empty tmpfs (the dataset, other workspaces).
    `uid` is the dedicated user (root only); the caller makes it own `root`.
    """

    root: Path
    limits: Limits = field(default_factory=Limits)
    readable: Sequence[Path] = ()
    hidden: Sequence[Path] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    path_prefix: Sequence[str] = ()
    uid: int | None = None
    isolation: Isolation = field(default_factory=probe_isolation)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if self.uid is None and self.isolation.dedicated_user:
            self.uid = new_sandbox_uid()
        if not self.isolation.dedicated_user:
            self.uid = None

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

    # ---- running -----------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, limits: Limits | None = None, cwd: Path | None = None) -> RunResult:
        """Runs `argv` (no shell unless the caller asks for one) and returns its capped output."""
        limits = limits or self.limits
        workdir = Path(cwd).resolve() if cwd is not None else self.root
        if workdir != self.root and self.root not in workdir.parents:
            raise SandboxError(f"the working directory {workdir} is outside the sandbox root {self.root}")
        environment = self._environment()
        preexec = self._preexec(limits, workdir)
        start = time.monotonic()
        try:
            process = subprocess.Popen(  # preexec_fn: the limits are set in the child
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env=environment,
                preexec_fn=preexec,
                start_new_session=True,
                close_fds=True,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise SandboxError(f"could not start {argv[0]!r}: {error}") from error
        capture = _Capture(limits.output_bytes)
        timed_out = self._pump(process, capture, start + limits.wall_seconds)
        returncode = process.wait()
        seconds = time.monotonic() - start
        output = capture.text()
        return RunResult(returncode, output, seconds, capture.truncated, _diagnose(returncode, output, timed_out))

    def shell(self, command: str, *, limits: Limits | None = None) -> RunResult:
        return self.run(["/bin/bash", "-c", command], limits=limits)

    def _pump(self, process: subprocess.Popen[bytes], capture: _Capture, deadline: float) -> bool:
        """Reads output until the process and everything holding its output has ended; kills on timeout."""
        assert process.stdout is not None
        fd = process.stdout.fileno()
        os.set_blocking(fd, False)
        selector = selectors.DefaultSelector()
        selector.register(fd, selectors.EVENT_READ)
        timed_out, eof, drain_until = False, False, None
        try:
            while not eof:
                now = time.monotonic()
                if not timed_out and now >= deadline:
                    timed_out = True
                    self._kill(process)
                    drain_until = now + 2.0
                if process.poll() is not None and drain_until is None:
                    self._kill(process)  # background processes left behind share the pipe
                    drain_until = now + 2.0
                if drain_until is not None and now >= drain_until:
                    break
                limit = deadline if drain_until is None else drain_until
                for _ in selector.select(timeout=max(0.0, min(0.2, limit - now))):
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
        return timed_out

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

    def _preexec(self, limits: Limits, workdir: Path) -> Callable[[], None]:
        """The function the child runs between fork and exec; everything it needs is computed here."""
        libc = _libc()
        namespaces = self.isolation.mount_namespace
        covered = [p for p in (*COVERED_HOMES, *COVERED_TMP) if os.path.isdir(p) and not os.path.islink(p)]
        covered += [str(Path(p).resolve()) for p in self.hidden if Path(p).is_dir()]
        covered = [c for c in dict.fromkeys(covered) if not any(_under(c, other) for other in covered if other != c)]
        keep = [(str(Path(p).resolve()), False) for p in self.readable if Path(p).exists()]
        keep.append((str(self.root), True))
        tmpfs_options = b"size=64m,mode=1777"
        uid = self.uid
        processes = limits.processes if uid is not None else _own_process_count() + limits.processes
        rlimits = [
            (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),
            (resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
            (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
            (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_NPROC, processes, processes),
        ]
        o_path = getattr(os, "O_PATH", os.O_RDONLY)

        def mount(source: str | None, target: str, fstype: str | None, flags: int, data: bytes | None) -> None:
            source_b = source.encode() if source is not None else None
            fstype_b = fstype.encode() if fstype is not None else None
            if libc.mount(source_b, target.encode(), fstype_b, flags, data) != 0:
                raise OSError(ctypes.get_errno(), f"mount {target} failed")

        def confine() -> None:
            if namespaces:
                if libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID) != 0:
                    raise OSError(ctypes.get_errno(), "unshare failed")
                mount(None, "/", None, MS_REC | MS_PRIVATE, None)
                handles = [(os.open(path, o_path), path, writable) for path, writable in keep]
                for directory in covered:
                    mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options)
                for handle, path, writable in handles:
                    if any(path == c or _under(path, c) for c in covered):
                        os.makedirs(path, exist_ok=True)
                        mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC, None)
                        if not writable:
                            flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
                            mount(None, path, None, flags, None)
                    os.close(handle)
                os.chdir(workdir)
            for kind, soft, hard in rlimits:
                resource.setrlimit(kind, (soft, hard))
            if namespaces:
                # The command becomes process 1 of a new PID namespace: when it ends, the kernel
                # kills and reaps everything it left behind. This process only relays its status.
                child = os.fork()
                if child != 0:
                    _relay_exit(child)
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
                # Process 1 ignores signals it has no handler for (SIGXCPU among them), so the
                # command runs as process 2 under a minimal init that reaps and relays.
                command = os.fork()
                if command != 0:
                    _relay_exit(command, reap=True)
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)

        return confine


def _under(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


def _relay_exit(child: int, *, reap: bool = False) -> None:  # pragma: no cover - runs between fork and exec
    """Waits for `child` and ends this process the same way (exit status or signal).

    With `reap`, it also collects every other process that ends meanwhile (it is process 1).
    """
    os.closerange(3, 65536)  # among them the pipe that tells the parent the exec happened
    try:
        while True:
            pid, status = os.wait() if reap else os.waitpid(child, 0)
            if pid == child:
                break
    except BaseException:
        os._exit(125)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
        except (OSError, ValueError):
            pass
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 125)


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
