"""What a sandboxed child does between fork and exec (see sandbox.py for what each step is for).

In order: join the run's cgroup; with namespaces, enter new mount, network, IPC and PID
namespaces, cover directories with empty tmpfs mounts and bind back what the run needs; set the
rlimits; become process 1 of the PID namespace (a relay), mount a `/proc` that shows the sandbox
user only its own processes and fork the command; drop to the sandbox user; set `no_new_privs`;
install the seccomp filter. Everything the child needs is computed in the parent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scope_envs.cooperbench.cgroups import RunCgroup
from scope_envs.cooperbench.seccomp import UserNamespaceFilter

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38

# Covered by one writable tmpfs, shared between them (it counts as memory, so it is small).
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
SCRATCH_OPTIONS = b"size=64m,mode=1777"
# Covered by empty tmpfs mounts the sandbox user cannot write: homes, and /run with the sockets
# of the machine's services (a UNIX socket is reachable through the filesystem, not the network).
PRIVATE_DIRS = ("/root", "/home", "/run")
PRIVATE_OPTIONS = b"size=1m,mode=755"
PROC_OPTIONS = b"hidepid=2"  # other users' processes (the root relays, with the parent's argv) are invisible


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


@dataclass(frozen=True)
class MountPlan:
    """Which directories are covered and which paths come back (`(path, writable)`)."""

    scratch: tuple[str, ...]
    private: tuple[str, ...]
    keep: tuple[tuple[str, bool], ...]

    @classmethod
    def build(cls, hidden: Sequence[str], keep: Sequence[tuple[str, bool]]) -> MountPlan:
        scratch = [p for p in SCRATCH_DIRS if os.path.isdir(p) and not os.path.islink(p)]
        private = [p for p in (*PRIVATE_DIRS, *hidden) if os.path.isdir(p) and not os.path.islink(p)]
        covered = [*scratch, *private]
        private = [p for p in dict.fromkeys(private) if not any(_under(p, other) for other in covered if other != p)]
        scratch = [p for p in scratch if not any(_under(p, other) for other in private)]
        return cls(tuple(scratch), tuple(private), tuple(keep))

    def covered(self, path: str) -> bool:
        return any(path == c or _under(path, c) for c in (*self.scratch, *self.private))


def child_setup(
    *,
    namespaces: bool,
    plan: MountPlan,
    workdir: str,
    rlimits: Sequence[tuple[int, int, int]],
    uid: int | None,
    cgroup: RunCgroup | None,
    seccomp: UserNamespaceFilter | None,
) -> Callable[[], None]:
    """The `preexec_fn` of a sandboxed run."""
    c = libc()
    o_path = getattr(os, "O_PATH", os.O_RDONLY)

    def mount(source: str | None, target: str, fstype: str | None, flags: int, data: bytes | None) -> None:
        source_b = source.encode() if source is not None else None
        fstype_b = fstype.encode() if fstype is not None else None
        if c.mount(source_b, target.encode(), fstype_b, flags, data) != 0:
            raise OSError(ctypes.get_errno(), f"mount {target} failed")

    def cover() -> None:
        if c.unshare(NAMESPACES) != 0:
            raise OSError(ctypes.get_errno(), "unshare failed")
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        handles = [(os.open(path, o_path), path, writable) for path, writable in plan.keep]
        for directory in plan.private:
            mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, PRIVATE_OPTIONS)
        if plan.scratch:
            mount("tmpfs", plan.scratch[0], "tmpfs", MS_NOSUID | MS_NODEV, SCRATCH_OPTIONS)
            for directory in plan.scratch[1:]:
                mount(plan.scratch[0], directory, None, MS_BIND, None)
        for handle, path, writable in handles:
            if plan.covered(path):
                os.makedirs(path, exist_ok=True)
                mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC, None)
                if not writable:
                    mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
            os.close(handle)
        os.chdir(workdir)

    def become_init() -> None:
        # The command becomes process 1 of a new PID namespace: when it ends, the kernel kills
        # and reaps everything it left behind. This process only relays its status.
        child = os.fork()
        if child != 0:
            _relay_exit(child)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, PROC_OPTIONS)
        # Process 1 ignores signals it has no handler for (SIGXCPU among them), so the command
        # runs as process 2 under a minimal init that reaps and relays.
        command = os.fork()
        if command != 0:
            _relay_exit(command, reap=True)

    def confine() -> None:
        if cgroup is not None:
            cgroup.join()
        if namespaces:
            cover()
        for kind, soft, hard in rlimits:
            resource.setrlimit(kind, (soft, hard))
        if namespaces:
            become_init()
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if seccomp is not None:
            seccomp.install()

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
